// Errors inside the template engine. Rendering recurses through expressions, macros and loops, and almost any
// step can fail (a type error, undefined access, raise_exception), so the engine throws this one type and the
// public entry points (template.cpp) turn it into a df::Error; nothing throws across the public API.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

namespace df::chat {

struct TemplateError : std::runtime_error {
  // line 0: not known yet; the statement being executed fills it in on the way out.
  explicit TemplateError(const std::string& message, int line = 0, int col = 0)
      : std::runtime_error(message), line(line), col(col) {}
  int line, col;
};

[[noreturn]] inline void fail(const std::string& message) { throw TemplateError(message); }

// Python's ints are unbounded; these are 64-bit, and overflow is an error rather than a wrong number.
[[noreturn]] inline void integer_overflow() { fail("integer overflow (integers are limited to 64 bits here)"); }
inline int64_t add_i64(int64_t a, int64_t b) {
  int64_t r = 0;
  if (__builtin_add_overflow(a, b, &r)) integer_overflow();
  return r;
}
inline int64_t sub_i64(int64_t a, int64_t b) {
  int64_t r = 0;
  if (__builtin_sub_overflow(a, b, &r)) integer_overflow();
  return r;
}
inline int64_t mul_i64(int64_t a, int64_t b) {
  int64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r)) integer_overflow();
  return r;
}

}  // namespace df::chat
