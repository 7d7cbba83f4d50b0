// GGUF metadata values: every scalar type, strings, and arrays (of arrays too).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace df::gguf {

// On-disk codes of gguf_type.
enum class ValueType : uint32_t {
  U8 = 0, I8 = 1, U16 = 2, I16 = 3, U32 = 4, I32 = 5, F32 = 6, BOOL = 7,
  STRING = 8, ARRAY = 9, U64 = 10, I64 = 11, F64 = 12,
};
constexpr uint32_t kValueTypeCount = 13;
std::string_view value_type_name(ValueType t);  // "u32", "string", "array", ...

// Text as a terminal may show it: control characters (C0, DEL and the C1 range U+0080..U+009F), backslashes and
// bytes that are not UTF-8 come out escaped (\n, \t, \\, \x1b, \u009b), so a file's metadata cannot move the
// cursor or recolour the table it is printed in; other UTF-8 stays as it is. With `quoted`, '"' is escaped and the
// text is wrapped in quotes. Past `max_chars` output characters the text is cut (between characters) and "..."
// added.
std::string printable(std::string_view s, bool quoted = false, size_t max_chars = SIZE_MAX);

struct Value;
struct Array {
  ValueType elem_type = ValueType::U8;
  std::vector<Value> items;
};

struct Value {
  ValueType type = ValueType::U8;
  // Unsigned types hold uint64_t, signed int64_t, floats double, BOOL bool, STRING std::string, ARRAY Array.
  std::variant<uint64_t, int64_t, double, bool, std::string, Array> data{uint64_t{0}};

  static Value u8(uint8_t v) { return {ValueType::U8, uint64_t{v}}; }
  static Value u32(uint32_t v) { return {ValueType::U32, uint64_t{v}}; }
  static Value u64(uint64_t v) { return {ValueType::U64, v}; }
  static Value i32(int32_t v) { return {ValueType::I32, int64_t{v}}; }
  static Value i64(int64_t v) { return {ValueType::I64, v}; }
  static Value f32(float v) { return {ValueType::F32, double{v}}; }
  static Value f64(double v) { return {ValueType::F64, v}; }
  static Value boolean(bool v) { return {ValueType::BOOL, v}; }
  static Value string(std::string v) { return {ValueType::STRING, std::move(v)}; }
  static Value array(ValueType elem, std::vector<Value> items) {
    return {ValueType::ARRAY, Array{elem, std::move(items)}};
  }

  bool is_integer() const;
  bool is_number() const;  // integer or float (not bool)
  // Integers of any width that fit the target; floats are not converted.
  std::optional<uint64_t> to_u64() const;
  std::optional<int64_t> to_i64() const;
  // Any number, as double.
  std::optional<double> to_f64() const;
  const std::string* str() const { return std::get_if<std::string>(&data); }
  const Array* array() const { return std::get_if<Array>(&data); }
  std::optional<bool> to_bool() const;

  // Short rendering for tables: numbers, quoted strings, "[array of 151936 string]".
  std::string summary(size_t max_chars = 60) const;
};

bool operator==(const Value& a, const Value& b);
bool operator==(const Array& a, const Array& b);

}  // namespace df::gguf
