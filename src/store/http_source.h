// A Source over HTTP(S) Range requests (libcurl). Private to store/: open_source() picks it for a URL.
#pragma once

#include <memory>
#include <string>

#include "diskformer/store/source.h"

namespace df::store {

Result<std::unique_ptr<Source>> open_http_source(const std::string& url, const HttpOptions& options);

}  // namespace df::store
