// Errors as values for environmental failures (missing file, short read, corrupt header, refused budget).
// Broken invariants use DF_CHECK (util/check.h) instead and abort.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <variant>

namespace df {

struct Error {
  std::string message;  // one line: what failed, the file or field, and the number or offset that made it fail
};

// A value or an Error.  Deliberately tiny: g++ 12 has no std::expected.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT(google-explicit-constructor)
  Result(Error error) : v_(std::move(error)) {}  // NOLINT(google-explicit-constructor)

  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }

  T& value() & { return std::get<0>(v_); }
  const T& value() const& { return std::get<0>(v_); }
  T&& value() && { return std::get<0>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

  const Error& error() const { return std::get<1>(v_); }
  Error&& take_error() { return std::get<1>(std::move(v_)); }

 private:
  std::variant<T, Error> v_;
};

// Result<void>.
class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(Error error) : error_(std::move(error)), failed_(true) {}  // NOLINT(google-explicit-constructor)
  static Status Ok() { return {}; }

  bool ok() const { return !failed_; }
  explicit operator bool() const { return ok(); }
  const Error& error() const { return error_; }
  Error&& take_error() { return std::move(error_); }

 private:
  Error error_;
  bool failed_ = false;
};

}  // namespace df

// Propagates an error out of the enclosing function that returns Status or Result<T>.
#define DF_TRY(expr)                                  \
  do {                                                \
    auto&& df_try_r_ = (expr);                        \
    if (!df_try_r_.ok()) return df_try_r_.take_error(); \
  } while (0)

#define DF_CONCAT_INNER_(a, b) a##b
#define DF_CONCAT_(a, b) DF_CONCAT_INNER_(a, b)
// DF_ASSIGN(auto x, expr): x = the value of expr, or return its error.
#define DF_ASSIGN(lhs, expr) DF_ASSIGN_IMPL_(DF_CONCAT_(df_assign_r_, __LINE__), lhs, expr)
#define DF_ASSIGN_IMPL_(tmp, lhs, expr)       \
  auto tmp = (expr);                          \
  if (!tmp.ok()) return tmp.take_error();     \
  lhs = std::move(tmp).value()
