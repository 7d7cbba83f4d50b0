#include "chat/interp.h"

#include <cmath>

#include "chat/text.h"

namespace df::chat {

namespace {

constexpr int kMaxMacroDepth = 200;

std::string jinja_type(const Value& v) {  // how Jinja names an object in "has no attribute" messages
  if (v.is_none()) return "None";
  std::string out(1, '\'');
  out += v.type_name();
  out += " object'";
  return out;
}

// Python's slice.indices(): clamps start/stop for a sequence of length n.
void slice_indices(int64_t n, const Value& start, const Value& stop, const Value& step_v, int64_t& a, int64_t& b,
                   int64_t& step) {
  auto given = [](const Value& v) { return !v.is_undefined() && !v.is_none(); };
  step = given(step_v) ? step_v.as_int() : 1;
  if (step == 0) fail("slice step cannot be zero");
  auto clamp = [&](const Value& v, int64_t dflt) {
    if (!given(v)) return dflt;
    if (!v.is_integral()) fail("slice indices must be integers or None");
    int64_t x = v.as_int();
    if (x < 0) x += n;
    if (step > 0) return std::clamp<int64_t>(x, 0, n);
    return std::clamp<int64_t>(x, -1, n - 1);
  };
  a = clamp(start, step > 0 ? 0 : n - 1);
  b = clamp(stop, step > 0 ? n : -1);
}

}  // namespace

Value* Scope::find(const std::string& name) {
  for (Scope* s = this; s; s = s->parent.get())
    for (auto& [k, v] : s->vars)
      if (k == name) return &v;
  return nullptr;
}

void Scope::set(const std::string& name, Value v) {
  for (auto& [k, x] : vars)
    if (k == name) {
      x = std::move(v);
      return;
    }
  vars.emplace_back(name, std::move(v));
}

void undefined_error(const Value& v) {
  fail(v.s.empty() ? std::string("value is undefined") : v.s);
}

Interp::~Interp() {
  for (auto& s : closures_) s->vars.clear();
}

std::string Interp::run(const Body& body) {
  std::string out;
  out_ = &out;
  exec(body);
  return out;
}

Interp::Flow Interp::exec(const Body& body) {
  for (const auto& s : body) {
    Flow f = exec_stmt(*s);
    if (f != Flow::Normal) return f;
  }
  return Flow::Normal;
}

std::string Interp::render_body(const Body& body, std::shared_ptr<Scope> scope) {
  std::string buf;
  std::string* saved_out = out_;
  auto saved_scope = scope_;
  out_ = &buf;
  scope_ = std::move(scope);
  try {
    exec(body);
  } catch (...) {
    out_ = saved_out;
    scope_ = saved_scope;
    throw;
  }
  out_ = saved_out;
  scope_ = saved_scope;
  return buf;
}

Interp::Flow Interp::exec_stmt(const Stmt& s) {
  line_ = s.line;
  switch (s.kind) {
    case Stmt::Kind::Data: *out_ += s.text; break;
    case Stmt::Kind::Output: *out_ += to_str(eval(*s.expr)); break;
    case Stmt::Kind::If:
      for (size_t k = 0; k < s.conds.size(); ++k)
        if (eval(*s.conds[k]).truthy()) return exec(s.bodies[k]);
      return exec(s.else_body);
    case Stmt::Kind::For: exec_for(s); break;
    case Stmt::Kind::Set: exec_set(s); break;
    case Stmt::Kind::Macro: define_macro(s); break;
    case Stmt::Kind::CallBlock: {
      const Expr& c = *s.expr;
      Value fn = eval(*c.a);
      CallArgs args;
      for (const auto& a : c.items) args.args.push_back(eval(*a));
      for (const auto& [k, a] : c.kwargs) args.kwargs.emplace_back(k, eval(*a));
      auto closure = scope_;
      const Stmt* stmt = &s;
      args.kwargs.emplace_back("caller", Value::function([this, stmt, closure](CallArgs& a) {
        return call_macro(*stmt, closure, a, nullptr);
      }));
      *out_ += to_str(call(fn, args));
      break;
    }
    case Stmt::Kind::FilterBlock: {
      Value body = Value::string(render_body(s.body, std::make_shared<Scope>(Scope{scope_, {}})));
      *out_ += to_str(eval_filter(*s.expr, &body));
      break;
    }
    case Stmt::Kind::With: {
      auto scope = std::make_shared<Scope>(Scope{scope_, {}});
      for (size_t k = 0; k < s.targets.size(); ++k) scope->set(s.targets[k], eval(*s.values[k]));
      *out_ += render_body(s.body, scope);
      break;
    }
    case Stmt::Kind::Break: return Flow::Break;
    case Stmt::Kind::Continue: return Flow::Continue;
  }
  return Flow::Normal;
}

void Interp::exec_for(const Stmt& s) {
  std::vector<Value> seq = iterate(eval(*s.expr));
  auto bind = [&](Scope& scope, const Value& item) {
    if (s.targets.size() == 1) {
      scope.set(s.targets[0], item);
      return;
    }
    std::vector<Value> parts = iterate(item);
    if (parts.size() != s.targets.size())
      fail("cannot unpack " + std::to_string(parts.size()) + " values into " + std::to_string(s.targets.size()) +
           " loop variables");
    for (size_t k = 0; k < parts.size(); ++k) scope.set(s.targets[k], parts[k]);
  };
  if (s.cond) {
    std::vector<Value> kept;
    auto saved = scope_;
    for (auto& item : seq) {
      scope_ = std::make_shared<Scope>(Scope{saved, {}});
      bind(*scope_, item);
      bool keep = eval(*s.cond).truthy();
      if (keep) kept.push_back(std::move(item));
    }
    scope_ = saved;
    seq = std::move(kept);
  }
  if (seq.empty()) {
    exec(s.else_body);
    return;
  }
  auto outer = scope_;
  const auto n = static_cast<int64_t>(seq.size());
  // One `loop` object per loop, updated in place each iteration (fields in a fixed order, see kLoopFields).
  static const char* const kLoopFields[] = {"index", "index0", "revindex", "revindex0", "first", "last",
                                            "length", "depth", "depth0", "previtem", "nextitem", "cycle"};
  Value loop = Value::new_dict();
  auto& fields = loop.dict->items;
  for (const char* f : kLoopFields) fields.emplace_back(Value::string(f), Value());
  auto counter = std::make_shared<int64_t>(0);
  fields[6].second = Value::integer(n);
  fields[7].second = Value::integer(1);
  fields[8].second = Value::integer(0);
  fields[11].second = Value::function([counter](CallArgs& a) {
    if (a.args.empty()) fail("no items for cycling given");
    return a.args[static_cast<size_t>(*counter) % a.args.size()];
  });
  try {
    for (int64_t k = 0; k < n; ++k) {
      // Each iteration gets a fresh scope: a `set` inside a loop body is gone after the iteration (Jinja).
      scope_ = std::make_shared<Scope>(Scope{outer, {}});
      *counter = k;
      fields[0].second = Value::integer(k + 1);
      fields[1].second = Value::integer(k);
      fields[2].second = Value::integer(n - k);
      fields[3].second = Value::integer(n - k - 1);
      fields[4].second = Value::boolean(k == 0);
      fields[5].second = Value::boolean(k == n - 1);
      fields[9].second = k > 0 ? seq[static_cast<size_t>(k - 1)] : Value::undefined("there is no previous item");
      fields[10].second = k + 1 < n ? seq[static_cast<size_t>(k + 1)] : Value::undefined("there is no next item");
      scope_->set("loop", loop);
      bind(*scope_, seq[static_cast<size_t>(k)]);
      if (exec(s.body) == Flow::Break) break;
    }
  } catch (...) {
    scope_ = outer;
    throw;
  }
  scope_ = outer;
}

void Interp::exec_set(const Stmt& s) {
  Value v;
  if (s.block_set) {
    v = Value::string(render_body(s.body, std::make_shared<Scope>(Scope{scope_, {}})));
    if (s.expr) v = eval_filter(*s.expr, &v);
  } else {
    v = eval(*s.expr);
  }
  if (!s.target_attr.empty()) {
    Value* ns = scope_->find(s.targets[0]);
    if (!ns || ns->kind != Value::Kind::Namespace) fail("cannot assign attribute on non-namespace object");
    ns->dict->set(Value::string(s.target_attr), std::move(v));
    return;
  }
  if (s.targets.size() == 1) {
    scope_->set(s.targets[0], std::move(v));
    return;
  }
  std::vector<Value> parts = iterate(v);
  if (parts.size() != s.targets.size())
    fail("cannot unpack " + std::to_string(parts.size()) + " values into " + std::to_string(s.targets.size()) +
         " names");
  for (size_t k = 0; k < parts.size(); ++k) scope_->set(s.targets[k], parts[k]);
}

void Interp::define_macro(const Stmt& s) {
  auto closure = scope_;
  closures_.push_back(closure);
  const Stmt* m = &s;
  scope_->set(s.name, Value::function([this, m, closure](CallArgs& args) {
    const Value* caller = nullptr;
    for (auto it = args.kwargs.begin(); it != args.kwargs.end(); ++it)
      if (it->first == "caller") {
        caller = &it->second;
        break;
      }
    return call_macro(*m, closure, args, caller);
  }));
}

Value Interp::call_macro(const Stmt& m, const std::shared_ptr<Scope>& closure, CallArgs& args, const Value* caller) {
  if (depth_ >= kMaxMacroDepth) fail("macro calls nested deeper than " + std::to_string(kMaxMacroDepth));
  auto scope = std::make_shared<Scope>(Scope{closure, {}});
  const std::string label = m.kind == Stmt::Kind::Macro ? "macro '" + m.name + "'" : "caller()";
  std::vector<bool> bound(m.params.size(), false);
  std::vector<Value> varargs;
  for (size_t k = 0; k < args.args.size(); ++k) {
    if (k < m.params.size()) {
      scope->set(m.params[k].name, args.args[k]);
      bound[k] = true;
    } else {
      varargs.push_back(args.args[k]);
    }
  }
  Value kwargs = Value::new_dict();
  for (auto& [name, v] : args.kwargs) {
    if (name == "caller") continue;
    bool found = false;
    for (size_t k = 0; k < m.params.size(); ++k)
      if (m.params[k].name == name) {
        if (bound[k]) fail(label + " got multiple values for argument '" + name + "'");
        scope->set(name, v);
        bound[k] = found = true;
      }
    if (!found) kwargs.dict->set(Value::string(name), v);
  }
  scope->set("varargs", Value::new_list(std::move(varargs), true));
  scope->set("kwargs", kwargs);
  if (caller) scope->set("caller", *caller);
  // Defaults are evaluated at call time, in the macro's scope (they may refer to earlier parameters).
  auto saved = scope_;
  scope_ = scope;
  try {
    for (size_t k = 0; k < m.params.size(); ++k)
      if (!bound[k])
        scope->set(m.params[k].name, m.params[k].default_value
                                         ? eval(*m.params[k].default_value)
                                         : Value::undefined("parameter '" + m.params[k].name + "' was not provided"));
  } catch (...) {
    scope_ = saved;
    throw;
  }
  scope_ = saved;
  ++depth_;
  std::string out;
  try {
    out = render_body(m.body, scope);
  } catch (...) {
    --depth_;
    throw;
  }
  --depth_;
  return Value::string(std::move(out));
}

Value Interp::lookup(const std::string& name) {
  if (Value* v = scope_->find(name)) return *v;
  return Value::undefined("'" + name + "' is undefined");
}

Value Interp::eval(const Expr& e) {
  line_ = e.line;
  using K = Expr::Kind;
  switch (e.kind) {
    case K::Const: return e.value;
    case K::Name: return lookup(e.name);
    case K::List:
    case K::Tuple: {
      std::vector<Value> items;
      items.reserve(e.items.size());
      for (const auto& x : e.items) items.push_back(eval(*x));
      return Value::new_list(std::move(items), e.kind == K::Tuple);
    }
    case K::Dict: {
      Value d = Value::new_dict();
      for (size_t k = 0; k + 1 < e.items.size(); k += 2) {
        Value key = eval(*e.items[k]);
        if (key.kind == Value::Kind::List && !key.list->tuple) fail("unhashable type: 'list'");
        if (key.kind == Value::Kind::Dict) fail("unhashable type: 'dict'");
        d.dict->set(std::move(key), eval(*e.items[k + 1]));
      }
      return d;
    }
    case K::Getattr: {
      Value obj = eval(*e.a);
      return getattr(obj, e.name);
    }
    case K::Getitem: {
      Value obj = eval(*e.a);
      Value key = eval(*e.b);
      return getitem(obj, key);
    }
    case K::Slice: return slice(eval(*e.a), e);
    case K::Call: {
      Value fn = eval(*e.a);
      CallArgs args;
      for (const auto& a : e.items) args.args.push_back(eval(*a));
      for (const auto& [k, a] : e.kwargs) args.kwargs.emplace_back(k, eval(*a));
      line_ = e.line;
      return call(fn, args);
    }
    case K::Filter: return eval_filter(e, nullptr);
    case K::Test: {
      Value v = eval(*e.a);
      CallArgs args;
      for (const auto& a : e.items) args.args.push_back(eval(*a));
      for (const auto& [k, a] : e.kwargs) args.kwargs.emplace_back(k, eval(*a));
      line_ = e.line;
      bool r = test(e.name, v, args);
      return Value::boolean(e.negated ? !r : r);
    }
    case K::Unary: {
      Value v = eval(*e.a);
      if (e.op == "not") return Value::boolean(!v.truthy());
      if (v.is_undefined()) undefined_error(v);
      if (!v.is_number()) fail("bad operand type for unary " + e.op + ": '" + v.type_name() + "'");
      if (e.op == "+") return v.kind == Value::Kind::Bool ? Value::integer(v.as_int()) : v;
      return v.kind == Value::Kind::Float ? Value::number(-v.f) : Value::integer(sub_i64(0, v.as_int()));
    }
    case K::Binary: {
      if (e.op == "and") {
        Value a = eval(*e.a);
        return a.truthy() ? eval(*e.b) : a;
      }
      if (e.op == "or") {
        Value a = eval(*e.a);
        return a.truthy() ? a : eval(*e.b);
      }
      Value a = eval(*e.a);
      Value b = eval(*e.b);
      line_ = e.line;
      return binary(e.op, a, b);
    }
    case K::Compare: return compare(e);
    case K::Cond:
      if (eval(*e.a).truthy()) return eval(*e.b);
      return e.c ? eval(*e.c) : Value::undefined("the inline if-expression on line " + std::to_string(e.line) +
                                                 " evaluated to false and no else section was defined.");
  }
  return Value::undefined();
}

Value Interp::eval_filter(const Expr& e, const Value* input) {
  // In a filter block / block set the chain's innermost filter has no operand: it takes `input`.
  Value in = !e.a ? *input : input && e.a->kind == Expr::Kind::Filter ? eval_filter(*e.a, input) : eval(*e.a);
  CallArgs args;
  for (const auto& a : e.items) args.args.push_back(eval(*a));
  for (const auto& [k, a] : e.kwargs) args.kwargs.emplace_back(k, eval(*a));
  line_ = e.line;
  return filter(e.name, in, args);
}

Value Interp::filter(const std::string& name, const Value& input, CallArgs& args) {
  return call_filter(*this, name, input, args);
}

bool Interp::test(const std::string& name, const Value& v, CallArgs& args) { return call_test(*this, name, v, args); }

Value Interp::getattr(const Value& obj, const std::string& name) {
  using K = Value::Kind;
  switch (obj.kind) {
    case K::Undefined: undefined_error(obj);
    case K::Namespace:
      if (const Value* v = obj.dict->find(name)) return *v;
      return Value::undefined("'Namespace object' has no attribute '" + name + "'");
    case K::Dict: {
      Value m = bound_method(*this, obj, name);
      if (!m.is_undefined() || !m.s.empty()) return m;  // a method, or the sandbox's refusal of one
      if (const Value* v = obj.dict->find(name)) return *v;
      break;
    }
    case K::String:
    case K::List: {
      Value m = bound_method(*this, obj, name);
      if (!m.is_undefined() || !m.s.empty()) return m;
      break;
    }
    default: break;
  }
  return Value::undefined(jinja_type(obj) + " has no attribute '" + name + "'");
}

Value Interp::getitem(const Value& obj, const Value& key) {
  using K = Value::Kind;
  switch (obj.kind) {
    case K::Undefined: undefined_error(obj);
    case K::Dict:
      if (const Value* v = obj.dict->find(key)) return *v;
      break;
    case K::List:
    case K::String:
      if (key.is_integral()) {
        int64_t i = key.as_int();
        if (obj.kind == K::List) {
          auto n = static_cast<int64_t>(obj.list->items.size());
          if (i < 0) i += n;
          if (i >= 0 && i < n) return obj.list->items[static_cast<size_t>(i)];
        } else {
          std::u32string u = text::decode(obj.s);
          auto n = static_cast<int64_t>(u.size());
          if (i < 0) i += n;
          if (i >= 0 && i < n) return Value::string(text::encode(u.substr(static_cast<size_t>(i), 1)));
        }
        return Value::undefined(jinja_type(obj) + " has no element " + std::to_string(key.as_int()));
      }
      break;
    default: break;
  }
  // As Jinja: a failed subscript falls back to the attribute of that name.
  if (key.is_string()) {
    Value v = getattr(obj, key.s);
    if (!v.is_undefined() || obj.kind == K::Namespace) return v;
  }
  return Value::undefined(jinja_type(obj) + " has no attribute " + to_repr(key));
}

Value Interp::slice(const Value& obj, const Expr& e) {
  Value parts[3];
  for (size_t k = 0; k < 3; ++k)
    if (e.items[k]) parts[k] = eval(*e.items[k]);
  if (obj.is_undefined()) undefined_error(obj);
  int64_t a, b, step;
  if (obj.is_list()) {
    const auto& items = obj.list->items;
    slice_indices(static_cast<int64_t>(items.size()), parts[0], parts[1], parts[2], a, b, step);
    std::vector<Value> out;
    for (int64_t k = a; step > 0 ? k < b : k > b;) {
      out.push_back(items[static_cast<size_t>(k)]);
      if (__builtin_add_overflow(k, step, &k)) break;
    }
    return Value::new_list(std::move(out), obj.list->tuple);
  }
  if (obj.is_string()) {
    std::u32string u = text::decode(obj.s);
    slice_indices(static_cast<int64_t>(u.size()), parts[0], parts[1], parts[2], a, b, step);
    std::u32string out;
    for (int64_t k = a; step > 0 ? k < b : k > b;) {
      out.push_back(u[static_cast<size_t>(k)]);
      if (__builtin_add_overflow(k, step, &k)) break;
    }
    return Value::string(text::encode(out));
  }
  fail("'" + obj.type_name() + "' object is not subscriptable");
}

Value Interp::call(const Value& fn, CallArgs& args) {
  if (fn.is_undefined()) undefined_error(fn);
  if (fn.kind != Value::Kind::Function) fail("'" + fn.type_name() + "' object is not callable");
  return (*fn.fn)(args);
}

std::vector<Value> Interp::iterate(const Value& v) {
  using K = Value::Kind;
  switch (v.kind) {
    case K::Undefined: return {};
    case K::List: return v.list->items;
    case K::Dict: {
      std::vector<Value> keys;
      keys.reserve(v.dict->items.size());
      for (const auto& [k, x] : v.dict->items) keys.push_back(k);
      return keys;
    }
    case K::String: {
      std::vector<Value> chars;
      for (char32_t c : text::decode(v.s)) chars.push_back(Value::string(text::encode(std::u32string(1, c))));
      return chars;
    }
    default: fail("'" + v.type_name() + "' object is not iterable");
  }
}

bool Interp::less(const Value& a, const Value& b) {
  if (a.is_undefined()) undefined_error(a);
  if (b.is_undefined()) undefined_error(b);
  if (a.is_number() && b.is_number()) {
    if (a.is_integral() && b.is_integral()) return a.as_int() < b.as_int();
    return a.as_double() < b.as_double();
  }
  if (a.is_string() && b.is_string()) return a.s < b.s;  // UTF-8 byte order is code point order
  if (a.is_list() && b.is_list()) {
    const auto &x = a.list->items, &y = b.list->items;
    for (size_t k = 0; k < x.size() && k < y.size(); ++k)
      if (!equals(x[k], y[k])) return less(x[k], y[k]);
    return x.size() < y.size();
  }
  fail("'<' not supported between instances of '" + a.type_name() + "' and '" + b.type_name() + "'");
}

bool Interp::contains(const Value& c, const Value& item) {
  using K = Value::Kind;
  switch (c.kind) {
    case K::Undefined: return false;
    case K::String:
      if (!item.is_string())
        fail("'in <string>' requires string as left operand, not " + item.type_name());
      return c.s.find(item.s) != std::string::npos;
    case K::List:
      for (const auto& x : c.list->items)
        if (equals(x, item)) return true;
      return false;
    case K::Dict: return c.dict->find(item) != nullptr;
    default: fail("argument of type '" + c.type_name() + "' is not iterable");
  }
}

Value Interp::compare(const Expr& e) {
  Value left = eval(*e.a);
  for (size_t k = 0; k < e.ops.size(); ++k) {
    Value right = eval(*e.items[k]);
    line_ = e.line;
    const std::string& op = e.ops[k];
    bool r;
    if (op == "==") r = equals(left, right);
    else if (op == "!=") r = !equals(left, right);
    else if (op == "<") r = less(left, right);
    else if (op == ">") r = less(right, left);
    else if (op == "<=") r = !less(right, left);
    else if (op == ">=") r = !less(left, right);
    else if (op == "in") r = contains(right, left);
    else r = !contains(right, left);
    if (!r) return Value::boolean(false);
    left = std::move(right);
  }
  return Value::boolean(true);
}

Value Interp::binary(const std::string& op, const Value& a, const Value& b) {
  if (op == "~") return Value::string(to_str(a) + to_str(b));
  if (a.is_undefined()) undefined_error(a);
  if (b.is_undefined()) undefined_error(b);
  auto type_error = [&]() -> Value {
    fail("unsupported operand type(s) for " + op + ": '" + a.type_name() + "' and '" + b.type_name() + "'");
  };
  const bool nums = a.is_number() && b.is_number();
  const bool ints = a.is_integral() && b.is_integral();
  if (op == "+") {
    if (ints) return Value::integer(add_i64(a.as_int(), b.as_int()));
    if (nums) return Value::number(a.as_double() + b.as_double());
    if (a.is_string() && b.is_string()) return Value::string(a.s + b.s);
    if (a.is_list() && b.is_list() && a.list->tuple == b.list->tuple) {
      std::vector<Value> items = a.list->items;
      items.insert(items.end(), b.list->items.begin(), b.list->items.end());
      return Value::new_list(std::move(items), a.list->tuple);
    }
    if (a.is_string()) fail("can only concatenate str (not \"" + b.type_name() + "\") to str");
    return type_error();
  }
  if (op == "-") {
    if (ints) return Value::integer(sub_i64(a.as_int(), b.as_int()));
    if (nums) return Value::number(a.as_double() - b.as_double());
    return type_error();
  }
  if (op == "*") {
    if (ints) return Value::integer(mul_i64(a.as_int(), b.as_int()));
    if (nums) return Value::number(a.as_double() * b.as_double());
    const Value* seq = a.is_string() || a.is_list() ? &a : &b;
    const Value* cnt = seq == &a ? &b : &a;
    if ((seq->is_string() || seq->is_list()) && cnt->is_integral()) {
      int64_t n = std::max<int64_t>(0, cnt->as_int());
      size_t unit = seq->is_string() ? seq->s.size() : seq->list->items.size();
      if (unit && static_cast<uint64_t>(n) > (uint64_t{1} << 28) / unit) fail("repetition result too large");
      if (seq->is_string()) {
        std::string out;
        for (int64_t k = 0; k < n; ++k) out += seq->s;
        return Value::string(std::move(out));
      }
      std::vector<Value> out;
      for (int64_t k = 0; k < n; ++k) out.insert(out.end(), seq->list->items.begin(), seq->list->items.end());
      return Value::new_list(std::move(out), seq->list->tuple);
    }
    return type_error();
  }
  if (op == "/") {
    if (!nums) return type_error();
    if (b.as_double() == 0) fail("division by zero");
    return Value::number(a.as_double() / b.as_double());
  }
  if (op == "//" || op == "%") {
    if (op == "%" && a.is_string()) return Value::string(percent_format(a.s, b));
    if (!nums) return type_error();
    if (ints) {
      int64_t x = a.as_int(), y = b.as_int();
      if (y == 0) fail(op == "//" ? "integer division or modulo by zero" : "integer modulo by zero");
      if (y == -1) return Value::integer(op == "//" ? sub_i64(0, x) : 0);  // INT64_MIN / -1 overflows in C++
      int64_t q = x / y, r = x % y;
      if (r != 0 && ((r < 0) != (y < 0))) {  // Python floors toward negative infinity
        --q;
        r += y;
      }
      return Value::integer(op == "//" ? q : r);
    }
    double x = a.as_double(), y = b.as_double();
    if (y == 0) fail("float division by zero");
    if (op == "//") return Value::number(std::floor(x / y));
    double r = std::fmod(x, y);
    if (r != 0 && ((r < 0) != (y < 0))) r += y;
    return Value::number(r);
  }
  if (op == "**") {
    if (!nums) return type_error();
    if (ints && b.as_int() >= 0) {
      int64_t r = 1, base = a.as_int();
      for (int64_t k = 0; k < b.as_int(); ++k) {
        r = mul_i64(r, base);
        if (r == 0 || r == 1) break;
        if (r == -1) {
          r = (b.as_int() - k - 1) % 2 ? 1 : -1;
          break;
        }
      }
      return Value::integer(r);
    }
    return Value::number(std::pow(a.as_double(), b.as_double()));
  }
  fail("unknown operator " + op);
}

}  // namespace df::chat
