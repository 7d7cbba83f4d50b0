// The whole text of a file named on the command line (-f, --messages, --template); "-" reads standard input.
#pragma once

#include <string>

#include "diskformer/util/result.h"

namespace df::cli {

Result<std::string> read_text_file(const std::string& path);

}  // namespace df::cli
