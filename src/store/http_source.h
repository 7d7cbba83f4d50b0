// A Source over HTTP(S) Range requests (libcurl), and a plain GET. Private to store/: open_source() picks the
// Source for a URL; the hub's API requests are GETs.
#pragma once

#include <memory>
#include <string>

#include "diskformer/store/source.h"

namespace df::store {

Result<std::unique_ptr<Source>> open_http_source(const std::string& url, const HttpOptions& options);

// One GET of a small document (an API's JSON): its status and body. Transport failures and 5xx answers are asked
// again (HttpOptions' retries and back-off); a body over max_bytes is an error.
struct HttpResponse {
  long status = 0;
  std::string body;
};
Result<HttpResponse> http_get(const std::string& url, const HttpOptions& options, size_t max_bytes = 64u << 20);

}  // namespace df::store
