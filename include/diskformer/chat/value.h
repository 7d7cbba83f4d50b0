// The values a chat template computes with: Python's objects as Jinja2 sees them (None, bool, int, float, str,
// list/tuple, dict, jinja's Undefined and namespace, callables), with Python's semantics for truthiness,
// equality, ordering, str() and json.dumps().
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "diskformer/util/result.h"

namespace df::chat {

struct Value;

// Python list or tuple. Shared by reference like a Python object: two Values may name the same list.
struct List {
  std::vector<Value> items;
  bool tuple = false;  // only changes str(): "(1, 2)" instead of "[1, 2]"
};

// Python dict (insertion order kept, as Python 3.7+ does) or jinja's namespace() object.
struct Dict {
  std::vector<std::pair<Value, Value>> items;

  const Value* find(const Value& key) const;
  const Value* find(std::string_view key) const;
  void set(Value key, Value value);
};

struct CallArgs {
  std::vector<Value> args;
  std::vector<std::pair<std::string, Value>> kwargs;

  // kwargs[name], or args[pos] where the caller passed it positionally, or nullptr.
  const Value* get(std::string_view name, size_t pos = SIZE_MAX) const;
};

// A callable: a macro, a bound method ("abc".upper), a global such as range or raise_exception.
// Errors are thrown as chat::Error by the interpreter (src/chat), never across the public API.
using Function = std::function<Value(CallArgs&)>;

struct Value {
  enum class Kind : uint8_t { Undefined, None, Bool, Int, Float, String, List, Dict, Namespace, Function };

  Kind kind = Kind::Undefined;
  bool b = false;
  int64_t i = 0;
  double f = 0;
  std::string s;                   // String's text (UTF-8); for Undefined, why it is undefined ("'x' is undefined")
  std::shared_ptr<List> list;      // List
  std::shared_ptr<Dict> dict;      // Dict and Namespace
  std::shared_ptr<Function> fn;    // Function

  Value() = default;
  static Value undefined(std::string hint = {});
  static Value none();
  static Value boolean(bool v);
  static Value integer(int64_t v);
  static Value number(double v);
  static Value string(std::string v);
  static Value new_list(std::vector<Value> items = {}, bool tuple = false);
  static Value new_dict();
  static Value new_namespace();
  static Value function(Function fn);

  bool is_undefined() const { return kind == Kind::Undefined; }
  bool is_none() const { return kind == Kind::None; }
  bool is_string() const { return kind == Kind::String; }
  bool is_list() const { return kind == Kind::List; }
  bool is_dict() const { return kind == Kind::Dict; }
  bool is_number() const { return kind == Kind::Int || kind == Kind::Float || kind == Kind::Bool; }
  bool is_integral() const { return kind == Kind::Int || kind == Kind::Bool; }  // Python: bool is an int
  double as_double() const { return kind == Kind::Float ? f : static_cast<double>(kind == Kind::Bool ? b : i); }
  int64_t as_int() const { return kind == Kind::Bool ? static_cast<int64_t>(b) : i; }

  // Python's bool(x); Undefined is false.
  bool truthy() const;
  // Python's type name as used in error messages: "str", "dict", "NoneType", ...
  std::string type_name() const;
};

// Python's ==. Never throws: different types are simply unequal (1 == 1.0 == True holds, as in Python).
bool equals(const Value& a, const Value& b);
bool operator==(const Value& a, const Value& b);

// Python's str(x) / repr(x). Undefined prints as "".
std::string to_str(const Value& v);
std::string to_repr(const Value& v);
// Python's repr(float): shortest round-trip digits, "1.0", "1e-05", "1e+16".
std::string float_repr(double d);

struct JsonOptions {
  bool ensure_ascii = false;
  int indent = -1;              // < 0: one line; else newline + indent spaces per level
  std::string item_sep, key_sep;  // empty: json.dumps' defaults (", " / ": ", or "," with indent)
  bool sort_keys = false;
};
// json.dumps(x); returns false (out untouched beyond what was written) for what JSON cannot hold: Undefined,
// namespaces, functions. `bad` receives that value's type name.
bool to_json(const Value& v, const JsonOptions& opt, std::string& out, std::string* bad = nullptr);

// JSON input deeper than this is refused: the conversion and every later walk of the value (tojson, ==, str(),
// its destruction) go one call deeper per level, and 20,000 levels overflow the stack. Python's json refuses
// such input too (its recursion limit is 1,000); conversations and tool schemas nest a dozen levels.
constexpr size_t kMaxJsonDepth = 512;

// Containers nested in `j` (a scalar is 0, [[1]] is 2), counted without recursion: safe on any parsed document.
size_t json_depth(const nlohmann::ordered_json& j);

// Conversion from parsed JSON input (messages, tools); ordered_json keeps the file's key order like Python's json.
// An Error "JSON nested deeper than 512 levels" where json_depth(j) > kMaxJsonDepth.
Result<Value> from_json(const nlohmann::ordered_json& j);

}  // namespace df::chat
