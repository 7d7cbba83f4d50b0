#include "diskformer/gguf/value.h"

#include <cmath>
#include <cstdio>
#include <limits>

namespace df::gguf {

std::string_view value_type_name(ValueType t) {
  switch (t) {
    case ValueType::U8: return "u8";
    case ValueType::I8: return "i8";
    case ValueType::U16: return "u16";
    case ValueType::I16: return "i16";
    case ValueType::U32: return "u32";
    case ValueType::I32: return "i32";
    case ValueType::F32: return "f32";
    case ValueType::BOOL: return "bool";
    case ValueType::STRING: return "string";
    case ValueType::ARRAY: return "array";
    case ValueType::U64: return "u64";
    case ValueType::I64: return "i64";
    case ValueType::F64: return "f64";
  }
  return "invalid";
}

bool Value::is_integer() const {
  return std::holds_alternative<uint64_t>(data) || std::holds_alternative<int64_t>(data);
}

bool Value::is_number() const { return is_integer() || std::holds_alternative<double>(data); }

std::optional<uint64_t> Value::to_u64() const {
  if (auto* u = std::get_if<uint64_t>(&data)) return *u;
  if (auto* i = std::get_if<int64_t>(&data))
    if (*i >= 0) return static_cast<uint64_t>(*i);
  return std::nullopt;
}

std::optional<int64_t> Value::to_i64() const {
  if (auto* i = std::get_if<int64_t>(&data)) return *i;
  if (auto* u = std::get_if<uint64_t>(&data))
    if (*u <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return static_cast<int64_t>(*u);
  return std::nullopt;
}

std::optional<double> Value::to_f64() const {
  if (auto* d = std::get_if<double>(&data)) return *d;
  if (auto* u = std::get_if<uint64_t>(&data)) return static_cast<double>(*u);
  if (auto* i = std::get_if<int64_t>(&data)) return static_cast<double>(*i);
  return std::nullopt;
}

std::optional<bool> Value::to_bool() const {
  if (auto* b = std::get_if<bool>(&data)) return *b;
  return std::nullopt;
}

namespace {

// Length of the well-formed UTF-8 sequence at s[i] (1..4), or 0 where the bytes there are not one.
size_t utf8_length(std::string_view s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[i + k]); };
  const unsigned char c = b(0);
  size_t n = 0;
  unsigned char lo = 0x80, hi = 0xbf;  // the range of the second byte (no overlongs, surrogates or > U+10FFFF)
  if (c < 0x80) return 1;
  if (c >= 0xc2 && c <= 0xdf) n = 2;
  else if (c >= 0xe0 && c <= 0xef) n = 3, lo = c == 0xe0 ? 0xa0 : 0x80, hi = c == 0xed ? 0x9f : 0xbf;
  else if (c >= 0xf0 && c <= 0xf4) n = 4, lo = c == 0xf0 ? 0x90 : 0x80, hi = c == 0xf4 ? 0x8f : 0xbf;
  else return 0;
  if (i + n > s.size() || b(1) < lo || b(1) > hi) return 0;
  for (size_t k = 2; k < n; ++k)
    if ((b(k) & 0xc0) != 0x80) return 0;
  return n;
}

}  // namespace

std::string printable(std::string_view s, bool quoted, size_t max_chars) {
  std::string out = quoted ? "\"" : "";
  char buf[16];
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    const size_t n = utf8_length(s, i);
    std::string piece;
    if (n == 0) {
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      piece = buf;
    } else if (c == '\n') {
      piece = "\\n";
    } else if (c == '\t') {
      piece = "\\t";
    } else if (c == '\\') {
      piece = "\\\\";
    } else if (c == '"' && quoted) {
      piece = "\\\"";
    } else if (c < 0x20 || c == 0x7f) {
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      piece = buf;
    } else if (n == 2 && c == 0xc2 && static_cast<unsigned char>(s[i + 1]) < 0xa0) {  // C1: U+0080..U+009F
      std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned char>(s[i + 1]));
      piece = buf;
    } else {
      piece = std::string(s.substr(i, n));
    }
    if (out.size() + piece.size() > max_chars) {
      out += "...";
      break;
    }
    out += piece;
    i += n == 0 ? 1 : n;
  }
  return quoted ? out + "\"" : out;
}

std::string Value::summary(size_t max_chars) const {
  char buf[64];
  if (auto* u = std::get_if<uint64_t>(&data)) return std::to_string(*u);
  if (auto* i = std::get_if<int64_t>(&data)) return std::to_string(*i);
  if (auto* d = std::get_if<double>(&data)) {
    std::snprintf(buf, sizeof buf, "%.9g", *d);
    return buf;
  }
  if (auto* b = std::get_if<bool>(&data)) return *b ? "true" : "false";
  if (auto* s = std::get_if<std::string>(&data)) return printable(*s, /*quoted=*/true, max_chars);
  const Array& a = std::get<Array>(data);
  return "[array of " + std::to_string(a.items.size()) + " " + std::string(value_type_name(a.elem_type)) + "]";
}

bool operator==(const Array& a, const Array& b) { return a.elem_type == b.elem_type && a.items == b.items; }

bool operator==(const Value& a, const Value& b) {
  if (a.type != b.type || a.data.index() != b.data.index()) return false;
  if (auto* d = std::get_if<double>(&a.data)) {
    double e = std::get<double>(b.data);
    return *d == e || (std::isnan(*d) && std::isnan(e));
  }
  return a.data == b.data;
}

}  // namespace df::gguf
