// Byte sizes as users write them: "512M", "1.8G", "4GiB", "123" (powers of 1024).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "diskformer/util/result.h"

namespace df {

Result<uint64_t> parse_size(std::string_view text);
// "1.50 GiB", "312.0 MiB", "17 B": for logs and tables.
std::string format_size(uint64_t bytes);

}  // namespace df
