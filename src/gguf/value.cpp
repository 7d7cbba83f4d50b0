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

std::string Value::summary(size_t max_chars) const {
  char buf[64];
  if (auto* u = std::get_if<uint64_t>(&data)) return std::to_string(*u);
  if (auto* i = std::get_if<int64_t>(&data)) return std::to_string(*i);
  if (auto* d = std::get_if<double>(&data)) {
    std::snprintf(buf, sizeof buf, "%.9g", *d);
    return buf;
  }
  if (auto* b = std::get_if<bool>(&data)) return *b ? "true" : "false";
  if (auto* s = std::get_if<std::string>(&data)) {
    std::string out = "\"";
    for (unsigned char c : *s) {
      if (out.size() >= max_chars) {
        out += "...";
        break;
      }
      if (c == '\n') out += "\\n";
      else if (c == '"') out += "\\\"";
      else if (c < 0x20) {
        std::snprintf(buf, sizeof buf, "\\x%02x", c);
        out += buf;
      } else out += static_cast<char>(c);
    }
    return out + "\"";
  }
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
