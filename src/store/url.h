// Credentials in an http(s) URL (http://user:secret@host/...): taken out of the URL before it is used or shown, so
// that they reach the server through libcurl's own options and never a file, a log line or an error.
#pragma once

#include <string>
#include <string_view>

namespace df::store::detail {

struct UrlParts {
  std::string url;             // the URL without its userinfo
  std::string user, password;  // percent-decoded
  bool has_user = false, has_password = false;
};
UrlParts split_credentials(std::string_view url);

}  // namespace df::store::detail
