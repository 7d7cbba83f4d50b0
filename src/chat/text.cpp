#include "chat/text.h"

#include <algorithm>
#include <clocale>
#include <cwctype>
#include <locale.h>
#include <wctype.h>

namespace df::chat::text {

std::u32string decode(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    auto c = static_cast<unsigned char>(s[i]);
    int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + n > s.size()) {
      out.push_back(0xFFFD);
      ++i;
      continue;
    }
    char32_t cp = n == 1 ? c : n == 2 ? (c & 0x1F) : n == 3 ? (c & 0x0F) : (c & 0x07);
    bool ok = true;
    for (int k = 1; k < n; ++k) {
      auto cc = static_cast<unsigned char>(s[i + k]);
      if ((cc >> 6) != 2) ok = false;
      cp = (cp << 6) | (cc & 0x3F);
    }
    if (!ok) {
      out.push_back(0xFFFD);
      ++i;
      continue;
    }
    out.push_back(cp);
    i += n;
  }
  return out;
}

void append_utf8(std::string& out, char32_t c) {
  if (c < 0x80) {
    out.push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (c >> 6)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (c >> 12)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (c >> 18)));
    out.push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

std::string encode(std::u32string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : s) append_utf8(out, c);
  return out;
}

size_t length(std::string_view s) {
  size_t n = 0;
  for (char c : s)
    if ((static_cast<unsigned char>(c) & 0xC0) != 0x80) ++n;
  return n;
}

bool is_space(char32_t c) {
  return c == ' ' || (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x1F) || c == 0x85 || c == 0xA0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
         c == 0x205F || c == 0x3000;
}

namespace {
// Unicode case mapping comes from the C library's C.UTF-8 tables, independent of the process locale.
locale_t utf8_ctype() {
  static const locale_t loc = newlocale(LC_CTYPE_MASK, "C.UTF-8", static_cast<locale_t>(nullptr));
  return loc;
}
}  // namespace

char32_t to_lower(char32_t c) {
  if (c < 0x80) return c >= 'A' && c <= 'Z' ? c + 32 : c;
  if (locale_t loc = utf8_ctype()) return static_cast<char32_t>(towlower_l(static_cast<wint_t>(c), loc));
  if (c >= 0xC0 && c <= 0xDE && c != 0xD7) return c + 32;  // Latin-1 where C.UTF-8 is missing
  return c;
}

char32_t to_upper(char32_t c) {
  if (c < 0x80) return c >= 'a' && c <= 'z' ? c - 32 : c;
  if (locale_t loc = utf8_ctype()) return static_cast<char32_t>(towupper_l(static_cast<wint_t>(c), loc));
  if (c >= 0xE0 && c <= 0xFE && c != 0xF7) return c - 32;
  return c;
}

bool is_cased(char32_t c) { return to_lower(c) != c || to_upper(c) != c; }

std::string lower(std::string_view s) {
  auto u = decode(s);
  for (auto& c : u) c = to_lower(c);
  return encode(u);
}

std::string upper(std::string_view s) {
  std::string out;
  for (char32_t c : decode(s)) {
    if (c == 0xDF) out += "SS";  // Python's full mapping of ß
    else append_utf8(out, to_upper(c));
  }
  return out;
}

std::string title(std::string_view s) {
  auto u = decode(s);
  bool prev_cased = false;
  for (auto& c : u) {
    bool cased = is_cased(c);
    if (cased) c = prev_cased ? to_lower(c) : to_upper(c);
    prev_cased = cased;
  }
  return encode(u);
}

std::string capitalize(std::string_view s) {
  auto u = decode(s);
  for (size_t k = 0; k < u.size(); ++k) u[k] = k == 0 ? to_upper(u[k]) : to_lower(u[k]);
  return encode(u);
}

std::string strip(std::string_view s, const std::optional<std::string>& chars, bool left, bool right) {
  auto u = decode(s);
  std::u32string set;
  if (chars) set = decode(*chars);
  auto drop = [&](char32_t c) { return chars ? set.find(c) != std::u32string::npos : is_space(c); };
  size_t a = 0, b = u.size();
  if (left)
    while (a < b && drop(u[a])) ++a;
  if (right)
    while (b > a && drop(u[b - 1])) --b;
  return encode(std::u32string_view(u).substr(a, b - a));
}

std::vector<std::string> split(std::string_view s, const std::optional<std::string>& sep, long maxsplit) {
  std::vector<std::string> out;
  if (!sep) {
    auto u = decode(s);
    size_t k = 0;
    while (true) {
      while (k < u.size() && is_space(u[k])) ++k;
      if (k >= u.size()) break;
      if (maxsplit >= 0 && static_cast<long>(out.size()) == maxsplit) {
        // The rest, with its trailing whitespace kept, is the last piece (as Python does).
        out.push_back(encode(std::u32string_view(u).substr(k)));
        break;
      }
      size_t e = k;
      while (e < u.size() && !is_space(u[e])) ++e;
      out.push_back(encode(std::u32string_view(u).substr(k, e - k)));
      k = e;
    }
    return out;
  }
  size_t pos = 0;
  while (maxsplit < 0 || static_cast<long>(out.size()) < maxsplit) {
    size_t f = s.find(*sep, pos);
    if (f == std::string_view::npos) break;
    out.emplace_back(s.substr(pos, f - pos));
    pos = f + sep->size();
  }
  out.emplace_back(s.substr(pos));
  return out;
}

std::vector<std::string> rsplit(std::string_view s, const std::optional<std::string>& sep, long maxsplit) {
  if (maxsplit < 0) return split(s, sep, maxsplit);
  std::vector<std::string> out;
  if (!sep) {
    auto u = decode(s);
    size_t k = u.size();
    while (true) {
      while (k > 0 && is_space(u[k - 1])) --k;
      if (k == 0) break;
      if (static_cast<long>(out.size()) == maxsplit) {
        out.push_back(encode(std::u32string_view(u).substr(0, k)));
        break;
      }
      size_t b = k;
      while (b > 0 && !is_space(u[b - 1])) --b;
      out.push_back(encode(std::u32string_view(u).substr(b, k - b)));
      k = b;
    }
    std::reverse(out.begin(), out.end());
    return out;
  }
  size_t end = s.size();
  while (static_cast<long>(out.size()) < maxsplit && end >= sep->size()) {
    size_t f = s.rfind(*sep, end - sep->size());
    if (f == std::string_view::npos) break;
    out.emplace_back(s.substr(f + sep->size(), end - f - sep->size()));
    end = f;
  }
  out.emplace_back(s.substr(0, end));
  std::reverse(out.begin(), out.end());
  return out;
}

std::string replace(std::string_view s, std::string_view from, std::string_view to, long count) {
  std::string out;
  if (from.empty()) {
    // Python inserts `to` between every code point and at both ends.
    auto u = decode(s);
    long n = 0;
    for (size_t k = 0; k <= u.size(); ++k) {
      if (count < 0 || n < count) {
        out += to;
        ++n;
      }
      if (k < u.size()) append_utf8(out, u[k]);
    }
    return out;
  }
  size_t pos = 0;
  long n = 0;
  while (count < 0 || n < count) {
    size_t f = s.find(from, pos);
    if (f == std::string_view::npos) break;
    out.append(s.substr(pos, f - pos));
    out.append(to);
    pos = f + from.size();
    ++n;
  }
  out.append(s.substr(pos));
  return out;
}

size_t count(std::string_view s, std::string_view sub) {
  if (sub.empty()) return length(s) + 1;
  size_t n = 0, pos = 0;
  while ((pos = s.find(sub, pos)) != std::string_view::npos) {
    ++n;
    pos += sub.size();
  }
  return n;
}

long find(std::string_view s, std::string_view sub, bool reverse) {
  size_t f = reverse ? s.rfind(sub) : s.find(sub);
  if (f == std::string_view::npos) return -1;
  return static_cast<long>(length(s.substr(0, f)));
}

std::string repr(std::string_view s) {
  bool has_single = s.find('\'') != std::string_view::npos;
  bool has_double = s.find('"') != std::string_view::npos;
  char q = has_single && !has_double ? '"' : '\'';
  std::string out(1, q);
  static const char* hex = "0123456789abcdef";
  for (char32_t c : decode(s)) {
    if (c == static_cast<char32_t>(q) || c == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(c));
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7F || (c >= 0x80 && c < 0xA0) || c == 0xAD) {
      out += "\\x";
      out.push_back(hex[c >> 4]);
      out.push_back(hex[c & 15]);
    } else {
      append_utf8(out, c);
    }
  }
  out.push_back(q);
  return out;
}

}  // namespace df::chat::text
