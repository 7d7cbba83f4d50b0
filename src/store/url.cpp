#include "store/url.h"

#include <algorithm>
#include <utility>

#include "diskformer/store/source.h"

namespace df::store {

namespace {

// [begin, end) of the userinfo before '@' in scheme://userinfo@host..., or npos where there is none.
std::pair<size_t, size_t> userinfo_span(std::string_view url) {
  const size_t scheme = url.find("://");
  if (scheme == std::string_view::npos) return {std::string_view::npos, 0};
  const size_t begin = scheme + 3;
  const size_t authority_end = std::min(url.find_first_of("/?#", begin), url.size());
  const size_t at = url.substr(0, authority_end).rfind('@');
  if (at == std::string_view::npos || at < begin) return {std::string_view::npos, 0};
  return {begin, at};
}

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::string percent_decode(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size() && hex_digit(s[i + 1]) >= 0 && hex_digit(s[i + 2]) >= 0) {
      out += static_cast<char>(hex_digit(s[i + 1]) * 16 + hex_digit(s[i + 2]));
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

}  // namespace

std::string redact_url(std::string_view url) {
  const auto [begin, at] = userinfo_span(url);
  if (begin == std::string_view::npos) return std::string(url);
  const std::string_view info = url.substr(begin, at - begin);
  const size_t colon = info.find(':');
  if (colon == std::string_view::npos) return std::string(url);  // a user name alone is no secret
  return std::string(url.substr(0, begin)) + std::string(info.substr(0, colon)) + ":***" + std::string(url.substr(at));
}

namespace detail {

UrlParts split_credentials(std::string_view url) {
  UrlParts p;
  const auto [begin, at] = userinfo_span(url);
  if (begin == std::string_view::npos) {
    p.url = std::string(url);
    return p;
  }
  const std::string_view info = url.substr(begin, at - begin);
  const size_t colon = info.find(':');
  p.has_user = true;
  p.user = percent_decode(info.substr(0, colon));
  if (colon != std::string_view::npos) {
    p.has_password = true;
    p.password = percent_decode(info.substr(colon + 1));
  }
  p.url = std::string(url.substr(0, begin)) + std::string(url.substr(at + 1));
  return p;
}

}  // namespace detail

}  // namespace df::store
