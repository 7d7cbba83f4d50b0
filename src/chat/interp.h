// The evaluator: walks the parsed program with a chain of scopes, writing output into a string.
// Python/Jinja semantics for each operation live here; filters, tests, methods and globals in builtins.cpp.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "chat/ast.h"
#include "chat/error.h"
#include "diskformer/chat/template.h"

namespace df::chat {

struct Scope {
  std::shared_ptr<Scope> parent;
  std::vector<std::pair<std::string, Value>> vars;

  Value* find(const std::string& name);
  void set(const std::string& name, Value v);
};

class Interp {
 public:
  Interp(const RenderOptions& options, std::shared_ptr<Scope> root) : opt_(options), scope_(std::move(root)) {}
  ~Interp();
  Interp(const Interp&) = delete;
  Interp& operator=(const Interp&) = delete;

  std::string run(const Body& body);
  int line() const { return line_; }
  const RenderOptions& options() const { return opt_; }

  Value eval(const Expr& e);
  Value getattr(const Value& obj, const std::string& name);
  Value getitem(const Value& obj, const Value& key);
  Value call(const Value& fn, CallArgs& args);
  // Python's iter(x) materialized: list items, dict keys, string characters; Undefined is empty.
  std::vector<Value> iterate(const Value& v);
  Value filter(const std::string& name, const Value& input, CallArgs& args);
  bool test(const std::string& name, const Value& v, CallArgs& args);
  // Python's a < b (throws TypeError for unorderable types), and `a in b`.
  bool less(const Value& a, const Value& b);
  bool contains(const Value& container, const Value& item);

 private:
  enum class Flow { Normal, Break, Continue };
  Flow exec(const Body& body);
  Flow exec_stmt(const Stmt& s);
  void exec_for(const Stmt& s);
  void exec_set(const Stmt& s);
  void define_macro(const Stmt& s);
  Value call_macro(const Stmt& m, const std::shared_ptr<Scope>& closure, CallArgs& args, const Value* caller);
  std::string render_body(const Body& body, std::shared_ptr<Scope> scope);
  Value eval_filter(const Expr& e, const Value* input);
  Value binary(const std::string& op, const Value& a, const Value& b);
  Value compare(const Expr& e);
  Value slice(const Value& obj, const Expr& e);
  Value lookup(const std::string& name);

  const RenderOptions& opt_;
  std::shared_ptr<Scope> scope_;
  std::string* out_ = nullptr;
  int line_ = 0;
  int depth_ = 0;  // nested macro calls, bounded so that a recursive template cannot exhaust the stack
  // Scopes that hold a macro which captured them (a shared_ptr cycle); emptied when rendering ends.
  std::vector<std::shared_ptr<Scope>> closures_;
};

// Throws Jinja's UndefinedError for an operation on an undefined value.
[[noreturn]] void undefined_error(const Value& v);

// builtins.cpp
Value call_filter(Interp& in, const std::string& name, const Value& input, CallArgs& args);
bool call_test(Interp& in, const std::string& name, const Value& v, CallArgs& args);
// A bound method of a str / dict / list ("abc".upper), or Undefined when there is none.
Value bound_method(Interp& in, const Value& obj, const std::string& name);
void add_globals(Scope& globals, const RenderOptions& options);
// Python's printf-style `fmt % args`.
std::string percent_format(const std::string& fmt, const Value& args);

}  // namespace df::chat
