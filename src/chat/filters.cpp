// Jinja2 3.1's built-in filters and tests, with Hugging Face's tojson (json.dumps, ensure_ascii=False, keys
// in insertion order) in place of Jinja's own HTML-safe one.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string_view>

#include "chat/interp.h"
#include "chat/text.h"

namespace df::chat {

namespace {

const char* const kFilters[] = {
    "abs", "attr", "batch", "capitalize", "center", "count", "d", "default", "dictsort", "e", "escape",
    "first", "float", "forceescape", "format", "indent", "int", "items", "join", "last", "length", "list",
    "lower", "map", "max", "min", "pprint", "reject", "rejectattr", "replace", "reverse", "round", "safe",
    "select", "selectattr", "sort", "string", "striptags", "sum", "title", "tojson", "trim", "truncate",
    "unique", "upper", "wordcount",
};
const char* const kTests[] = {
    "odd", "even", "divisibleby", "defined", "undefined", "filter", "test", "none", "boolean", "false", "true",
    "integer", "float", "lower", "upper", "string", "mapping", "number", "sequence", "iterable", "callable",
    "sameas", "escaped", "in", "==", "eq", "equalto", "!=", "ne", ">", "gt", "greaterthan", ">=", "ge", "<",
    "lt", "lessthan", "<=", "le",
};

const Value* opt(CallArgs& a, size_t pos, const char* name) {
  const Value* v = a.get(name, pos);
  return v && !v->is_undefined() ? v : nullptr;
}
bool flag(CallArgs& a, size_t pos, const char* name) {
  const Value* v = opt(a, pos, name);
  return v && v->truthy();
}

std::string html_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

int64_t py_len(const Value& v) {
  switch (v.kind) {
    case Value::Kind::Undefined: return 0;
    case Value::Kind::String: return static_cast<int64_t>(text::length(v.s));
    case Value::Kind::List: return static_cast<int64_t>(v.list->items.size());
    case Value::Kind::Dict: return static_cast<int64_t>(v.dict->items.size());
    default: fail("object of type '" + v.type_name() + "' has no len()");
  }
}

// Jinja's make_attrgetter: "a.b.0" walks items/attributes; several comma-separated paths give a tuple key.
Value attr_path(Interp& in, const Value& item, const std::string& path) {
  Value v = item;
  for (const auto& part : text::split(path, std::string("."), -1)) {
    bool digits = !part.empty() && part.find_first_not_of("0123456789") == std::string::npos;
    v = in.getitem(v, digits ? Value::integer(std::stoll(part)) : Value::string(part));
  }
  return v;
}

Value fold_case(const Value& v, bool case_sensitive) {
  return !case_sensitive && v.is_string() ? Value::string(text::lower(v.s)) : v;
}

std::optional<int64_t> parse_int(std::string s, int base) {
  s = text::strip(s, std::nullopt, true, true);
  std::string clean;
  for (size_t k = 0; k < s.size(); ++k)
    if (s[k] != '_' || (k > 0 && k + 1 < s.size() && std::isalnum(static_cast<unsigned char>(s[k - 1])) &&
                        std::isalnum(static_cast<unsigned char>(s[k + 1]))))
      clean += s[k];
  if (clean.empty()) return std::nullopt;
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(clean.c_str(), &end, base);
  if (errno || *end || end == clean.c_str()) return std::nullopt;
  return v;
}

std::optional<double> parse_float(const std::string& s0) {
  std::string s = text::strip(s0, std::nullopt, true, true);
  if (s.empty()) return std::nullopt;
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  if (*end || end == s.c_str()) return std::nullopt;
  return v;
}

double py_round(double x, int64_t digits) {
  // Python rounds the exact binary value, half to even; printf does the same.
  char buf[512];
  std::snprintf(buf, sizeof buf, "%.*f", static_cast<int>(std::clamp<int64_t>(digits, 0, 300)), x);
  double r = std::strtod(buf, nullptr);
  if (digits < 0) {
    double p = std::pow(10.0, static_cast<double>(-digits));
    r = std::nearbyint(x / p) * p;
  }
  return r;
}

// Filter/test for select/reject/map: the name and its extra arguments taken from position `from`.
CallArgs rest_args(const CallArgs& a, size_t from) {
  CallArgs r;
  for (size_t k = from; k < a.args.size(); ++k) r.args.push_back(a.args[k]);
  r.kwargs = a.kwargs;
  return r;
}

Value select_filter(Interp& in, const Value& input, CallArgs& a, bool want, bool by_attr) {
  std::vector<Value> out;
  size_t p = 0;
  std::string attr;
  if (by_attr) {
    if (a.args.empty() || !a.args[0].is_string()) fail("selectattr/rejectattr need an attribute name");
    attr = a.args[0].s;
    p = 1;
  }
  std::string test;
  if (p < a.args.size()) {
    if (!a.args[p].is_string()) fail("select/reject need a test name");
    test = a.args[p].s;
    if (!has_test(test)) fail("no test named '" + test + "'");
  }
  CallArgs targs = rest_args(a, p + 1);
  for (const auto& item : in.iterate(input)) {
    Value v = by_attr ? attr_path(in, item, attr) : item;
    bool r;
    if (test.empty()) {
      r = v.truthy();
    } else {
      CallArgs copy = targs;
      r = in.test(test, v, copy);
    }
    if (r == want) out.push_back(item);
  }
  return Value::new_list(std::move(out));
}

Value sorted(Interp& in, std::vector<Value> items, bool reverse, bool case_sensitive, const Value* attribute) {
  std::vector<std::pair<Value, Value>> keyed;
  for (auto& x : items) {
    Value key = attribute ? attr_path(in, x, to_str(*attribute)) : x;
    keyed.emplace_back(fold_case(key, case_sensitive), std::move(x));
  }
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& p, const auto& q) {
    return reverse ? in.less(q.first, p.first) : in.less(p.first, q.first);
  });
  std::vector<Value> out;
  for (auto& [k, v] : keyed) out.push_back(std::move(v));
  return Value::new_list(std::move(out));
}

Value min_max(Interp& in, const Value& input, CallArgs& a, bool want_max) {
  bool cs = flag(a, 0, "case_sensitive");
  const Value* attribute = opt(a, 1, "attribute");
  std::vector<Value> items = in.iterate(input);
  if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
  size_t best = 0;
  auto key = [&](size_t k) {
    return fold_case(attribute ? attr_path(in, items[k], to_str(*attribute)) : items[k], cs);
  };
  for (size_t k = 1; k < items.size(); ++k)
    if (want_max ? in.less(key(best), key(k)) : in.less(key(k), key(best))) best = k;
  return items[best];
}

std::string indent(const std::string& s0, const Value* width, bool first, bool blank) {
  if (width && width->is_integral() && width->as_int() > 4096) fail("indent width too large");
  std::string ind = width && width->is_string() ? width->s : std::string(width ? static_cast<size_t>(std::max<int64_t>(0, width->as_int())) : 4, ' ');
  std::string s = s0 + "\n";
  std::vector<std::string> lines;
  size_t start = 0;
  for (size_t k = 0; k < s.size(); ++k) {
    if (s[k] != '\n' && s[k] != '\r') continue;
    lines.push_back(s.substr(start, k - start));
    if (s[k] == '\r' && k + 1 < s.size() && s[k + 1] == '\n') ++k;
    start = k + 1;
  }
  std::string rv;
  if (blank) {
    for (size_t k = 0; k < lines.size(); ++k) rv += (k ? "\n" + ind : "") + lines[k];
  } else {
    rv = lines.empty() ? "" : lines[0];
    for (size_t k = 1; k < lines.size(); ++k) {
      rv += '\n';
      if (!lines[k].empty()) rv += ind + lines[k];
    }
  }
  return first ? ind + rv : rv;
}

std::string jinja_title(const std::string& s) {
  auto u = text::decode(s);
  bool start = true;
  for (auto& c : u) {
    bool sep = c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || text::is_space(c);
    if (sep) {
      start = true;
      continue;
    }
    c = start ? text::to_upper(c) : text::to_lower(c);
    start = false;
  }
  return text::encode(u);
}

}  // namespace

bool has_filter(const std::string& name) {
  for (const char* f : kFilters)
    if (name == f) return true;
  return false;
}

bool has_test(const std::string& name) {
  for (const char* t : kTests)
    if (name == t) return true;
  return false;
}

Value call_filter(Interp& in, const std::string& name, const Value& v, CallArgs& a) {
  using K = Value::Kind;
  auto str_in = [&]() { return to_str(v); };
  if (name == "tojson") {
    JsonOptions o;
    if (const Value* x = opt(a, 0, "ensure_ascii")) o.ensure_ascii = x->truthy();
    if (const Value* x = opt(a, 1, "indent"); x && !x->is_none()) o.indent = static_cast<int>(x->as_int());
    if (const Value* x = opt(a, 2, "separators"); x && x->is_list() && x->list->items.size() == 2) {
      o.item_sep = to_str(x->list->items[0]);
      o.key_sep = to_str(x->list->items[1]);
    }
    o.sort_keys = flag(a, 3, "sort_keys");
    std::string out, bad;
    if (!to_json(v, o, out, &bad)) fail(bad);
    return Value::string(std::move(out));
  }
  if (name == "length" || name == "count") return Value::integer(py_len(v));
  if (name == "string") return Value::string(str_in());
  if (name == "safe") return Value::string(str_in());
  if (name == "e" || name == "escape" || name == "forceescape") return Value::string(html_escape(str_in()));
  if (name == "pprint") return Value::string(to_repr(v));
  if (name == "trim") {
    const Value* chars = opt(a, 0, "chars");
    return Value::string(text::strip(str_in(), chars && !chars->is_none() ? std::optional(to_str(*chars)) : std::nullopt, true, true));
  }
  if (name == "upper") return Value::string(text::upper(str_in()));
  if (name == "lower") return Value::string(text::lower(str_in()));
  if (name == "capitalize") return Value::string(text::capitalize(str_in()));
  if (name == "title") return Value::string(jinja_title(str_in()));
  if (name == "replace") {
    const Value* from = opt(a, 0, "old");
    const Value* to = opt(a, 1, "new");
    if (!from || !to) fail("replace() needs old and new");
    const Value* cnt = opt(a, 2, "count");
    return Value::string(text::replace(str_in(), to_str(*from), to_str(*to), cnt && !cnt->is_none() ? static_cast<long>(cnt->as_int()) : -1));
  }
  if (name == "center") {
    const Value* w = opt(a, 0, "width");
    std::string s = str_in();
    long width = w ? static_cast<long>(w->as_int()) : 80;
    if (width > (1 << 24)) fail("center width too large");
    long n = static_cast<long>(text::length(s));
    if (n >= width) return Value::string(s);
    long left = (width - n) / 2 + ((width - n) & width & 1);  // CPython's centering rule
    return Value::string(std::string(static_cast<size_t>(left), ' ') + s + std::string(static_cast<size_t>(width - n - left), ' '));
  }
  if (name == "indent") return Value::string(indent(str_in(), opt(a, 0, "width"), flag(a, 1, "first"), flag(a, 2, "blank")));
  if (name == "truncate") {
    std::string s = str_in();
    const Value* l = opt(a, 0, "length");
    int64_t length = l ? l->as_int() : 255;
    bool killwords = flag(a, 1, "killwords");
    const Value* e = opt(a, 2, "end");
    std::string end = e ? to_str(*e) : "...";
    const Value* lw = opt(a, 3, "leeway");
    int64_t leeway = lw && !lw->is_none() ? lw->as_int() : 5;
    auto u = text::decode(s);
    auto end_len = static_cast<int64_t>(text::length(end));
    if (length < end_len) fail("expected length >= " + std::to_string(end_len) + ", got " + std::to_string(length));
    if (static_cast<int64_t>(u.size()) <= length + leeway) return Value::string(s);
    std::string head = text::encode(u.substr(0, static_cast<size_t>(length - end_len)));
    if (killwords) return Value::string(head + end);
    size_t sp = head.rfind(' ');
    return Value::string((sp == std::string::npos ? head : head.substr(0, sp)) + end);
  }
  if (name == "wordcount") {
    int64_t n = 0;
    bool in_word = false;
    for (char32_t c : text::decode(str_in())) {
      bool w = c == '_' || (c >= '0' && c <= '9') || text::is_cased(c) || c >= 0x100;
      if (w && !in_word) ++n;
      in_word = w;
    }
    return Value::integer(n);
  }
  if (name == "striptags") {
    std::string s = str_in(), out;
    bool tag = false;
    for (char c : s) {
      if (c == '<') tag = true;
      else if (c == '>' && tag) tag = false;
      else if (!tag) out += c;
    }
    return Value::string(text::strip(out, std::nullopt, true, true));
  }
  if (name == "format") {
    Value args = a.kwargs.empty() ? Value::new_list(a.args, true) : Value::new_dict();
    for (auto& [k, x] : a.kwargs) args.dict->set(Value::string(k), x);
    return Value::string(percent_format(str_in(), args));
  }
  if (name == "d" || name == "default") {
    const Value* dflt = a.get("default_value", 0);
    bool boolean = flag(a, 1, "boolean");
    if (v.is_undefined() || (boolean && !v.truthy())) return dflt ? *dflt : Value::string("");
    return v;
  }
  if (name == "first" || name == "last") {
    std::vector<Value> items = in.iterate(v);
    if (items.empty()) return Value::undefined(std::string("No ") + name + " item, sequence was empty.");
    return name == "first" ? items.front() : items.back();
  }
  if (name == "list") return Value::new_list(in.iterate(v));
  if (name == "reverse") {
    if (v.is_string()) {
      auto u = text::decode(v.s);
      std::reverse(u.begin(), u.end());
      return Value::string(text::encode(u));
    }
    std::vector<Value> items = in.iterate(v);
    std::reverse(items.begin(), items.end());
    return Value::new_list(std::move(items));
  }
  if (name == "items") {
    if (v.is_undefined()) return Value::new_list();
    if (!v.is_dict()) fail("Can only get item pairs from a mapping.");
    std::vector<Value> out;
    for (const auto& [k, x] : v.dict->items) out.push_back(Value::new_list({k, x}, true));
    return Value::new_list(std::move(out));
  }
  if (name == "dictsort") {
    if (!v.is_dict()) fail("dictsort needs a mapping, got " + v.type_name());
    bool cs = flag(a, 0, "case_sensitive");
    const Value* by = opt(a, 1, "by");
    size_t pos = 0;
    if (by) {
      if (to_str(*by) == "value") pos = 1;
      else if (to_str(*by) != "key") fail("You can only sort by either \"key\" or \"value\"");
    }
    bool reverse = flag(a, 2, "reverse");
    std::vector<Value> items;
    for (const auto& [k, x] : v.dict->items) items.push_back(Value::new_list({k, x}, true));
    std::stable_sort(items.begin(), items.end(), [&](const Value& p, const Value& q) {
      Value x = fold_case(p.list->items[pos], cs), y = fold_case(q.list->items[pos], cs);
      return reverse ? in.less(y, x) : in.less(x, y);
    });
    return Value::new_list(std::move(items));
  }
  if (name == "sort")
    return sorted(in, in.iterate(v), flag(a, 0, "reverse"), flag(a, 1, "case_sensitive"), opt(a, 2, "attribute"));
  if (name == "unique") {
    bool cs = flag(a, 0, "case_sensitive");
    const Value* attribute = opt(a, 1, "attribute");
    std::vector<Value> out, seen;
    for (const auto& x : in.iterate(v)) {
      Value key = fold_case(attribute ? attr_path(in, x, to_str(*attribute)) : x, cs);
      if (std::find(seen.begin(), seen.end(), key) != seen.end()) continue;
      seen.push_back(key);
      out.push_back(x);
    }
    return Value::new_list(std::move(out));
  }
  if (name == "join") {
    const Value* sep = opt(a, 0, "d");
    const Value* attribute = opt(a, 1, "attribute");
    std::string out, s = sep ? to_str(*sep) : "";
    bool first = true;
    for (const auto& x : in.iterate(v)) {
      if (!first) out += s;
      first = false;
      out += to_str(attribute ? attr_path(in, x, to_str(*attribute)) : x);
    }
    return Value::string(std::move(out));
  }
  if (name == "map") {
    std::vector<Value> out;
    const Value* attribute = a.args.empty() ? a.get("attribute") : nullptr;
    if (attribute) {
      const Value* dflt = a.get("default");
      for (const auto& x : in.iterate(v)) {
        Value r = attr_path(in, x, to_str(*attribute));
        out.push_back(r.is_undefined() && dflt ? *dflt : r);
      }
      return Value::new_list(std::move(out));
    }
    if (a.args.empty() || !a.args[0].is_string()) fail("map requires a filter name or attribute=");
    const std::string f = a.args[0].s;
    if (!has_filter(f)) fail("no filter named '" + f + "'");
    CallArgs fargs = rest_args(a, 1);
    for (const auto& x : in.iterate(v)) {
      CallArgs copy = fargs;
      out.push_back(in.filter(f, x, copy));
    }
    return Value::new_list(std::move(out));
  }
  if (name == "select") return select_filter(in, v, a, true, false);
  if (name == "reject") return select_filter(in, v, a, false, false);
  if (name == "selectattr") return select_filter(in, v, a, true, true);
  if (name == "rejectattr") return select_filter(in, v, a, false, true);
  if (name == "batch") {
    const Value* n = opt(a, 0, "linecount");
    if (!n || !n->is_integral() || n->as_int() <= 0) fail("batch needs a positive line count");
    const Value* fill = opt(a, 1, "fill_with");
    std::vector<Value> out, cur;
    for (const auto& x : in.iterate(v)) {
      cur.push_back(x);
      if (static_cast<int64_t>(cur.size()) == n->as_int()) out.push_back(Value::new_list(std::exchange(cur, {})));
    }
    if (!cur.empty()) {
      if (fill && !fill->is_none())
        while (static_cast<int64_t>(cur.size()) < n->as_int()) cur.push_back(*fill);
      out.push_back(Value::new_list(std::move(cur)));
    }
    return Value::new_list(std::move(out));
  }
  if (name == "sum") {
    const Value* attribute = opt(a, 0, "attribute");
    const Value* start = opt(a, 1, "start");
    Value total = start ? *start : Value::integer(0);
    for (const auto& x : in.iterate(v)) {
      Value item = attribute ? attr_path(in, x, to_str(*attribute)) : x;
      if (!item.is_number() || !total.is_number())
        fail("unsupported operand type(s) for +: '" + total.type_name() + "' and '" + item.type_name() + "'");
      total = total.is_integral() && item.is_integral() ? Value::integer(add_i64(total.as_int(), item.as_int()))
                                                        : Value::number(total.as_double() + item.as_double());
    }
    return total;
  }
  if (name == "min") return min_max(in, v, a, false);
  if (name == "max") return min_max(in, v, a, true);
  if (name == "attr") {
    const Value* n = opt(a, 0, "name");
    if (!n) fail("attr needs a name");
    if (v.kind == K::Dict) {
      Value m = bound_method(in, v, to_str(*n));
      return m.is_undefined() ? Value::undefined("'dict object' has no attribute '" + to_str(*n) + "'") : m;
    }
    return in.getattr(v, to_str(*n));
  }
  if (name == "abs") {
    if (v.kind == K::Float) return Value::number(std::fabs(v.f));
    if (v.is_integral()) return Value::integer(v.as_int() < 0 ? sub_i64(0, v.as_int()) : v.as_int());
    if (v.is_undefined()) undefined_error(v);
    fail("bad operand type for abs(): '" + v.type_name() + "'");
  }
  if (name == "int") {
    const Value* dflt = opt(a, 0, "default");
    const Value* base = opt(a, 1, "base");
    Value fallback = dflt ? *dflt : Value::integer(0);
    if (v.is_integral()) return Value::integer(v.as_int());
    if (v.kind == K::Float) {
      if (!std::isfinite(v.f)) return fallback;
      if (std::fabs(v.f) >= 9.2e18) fail("integer overflow (integers are limited to 64 bits here)");
      return Value::integer(static_cast<int64_t>(v.f));
    }
    if (v.is_string()) {
      if (auto i = parse_int(v.s, base ? static_cast<int>(base->as_int()) : 10)) return Value::integer(*i);
      if (auto d = parse_float(v.s); d && std::isfinite(*d) && std::fabs(*d) < 9.2e18)
        return Value::integer(static_cast<int64_t>(*d));
    }
    return fallback;
  }
  if (name == "float") {
    const Value* dflt = opt(a, 0, "default");
    if (v.is_number()) return Value::number(v.as_double());
    if (v.is_string())
      if (auto d = parse_float(v.s)) return Value::number(*d);
    return dflt ? *dflt : Value::number(0.0);
  }
  if (name == "round") {
    const Value* p = opt(a, 0, "precision");
    int64_t precision = p ? p->as_int() : 0;
    const Value* m = opt(a, 1, "method");
    std::string method = m ? to_str(*m) : "common";
    if (v.is_undefined()) undefined_error(v);
    if (!v.is_number()) fail("type " + v.type_name() + " doesn't define __round__ method");
    if (method == "common") {
      if (v.is_integral()) return Value::integer(v.as_int());  // Python: round(int, n) stays an int
      return Value::number(py_round(v.f, precision));
    }
    if (method != "ceil" && method != "floor") fail("method must be common, ceil or floor");
    double scale = std::pow(10.0, static_cast<double>(precision));
    double x = v.as_double() * scale;
    return Value::number((method == "ceil" ? std::ceil(x) : std::floor(x)) / scale);
  }
  fail("no filter named '" + name + "'");
}

bool call_test(Interp& in, const std::string& name, const Value& v, CallArgs& a) {
  using K = Value::Kind;
  auto other = [&]() -> const Value& {
    if (a.args.empty()) fail("test '" + name + "' needs an argument");
    return a.args[0];
  };
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "boolean") return v.kind == K::Bool;
  if (name == "false") return v.kind == K::Bool && !v.b;
  if (name == "true") return v.kind == K::Bool && v.b;
  if (name == "integer") return v.kind == K::Int;
  if (name == "float") return v.kind == K::Float;
  if (name == "number") return v.is_number();
  if (name == "string") return v.is_string();
  if (name == "mapping") return v.kind == K::Dict;
  // Jinja's Undefined has __len__, __getitem__, __iter__ and __call__, so it passes these three.
  if (name == "sequence") return v.is_undefined() || v.is_string() || v.is_list() || v.is_dict();
  if (name == "iterable") return v.is_undefined() || v.is_string() || v.is_list() || v.is_dict();
  if (name == "callable") return v.is_undefined() || v.kind == K::Function;
  if (name == "escaped") return false;
  if (name == "filter") return v.is_string() && has_filter(v.s);
  if (name == "test") return v.is_string() && has_test(v.s);
  if (name == "lower" || name == "upper") {
    std::string s = to_str(v);
    bool any = false;
    for (char32_t c : text::decode(s)) {
      if (!text::is_cased(c)) continue;
      any = true;
      if ((name == "lower" ? text::to_lower(c) : text::to_upper(c)) != c) return false;
    }
    return any;
  }
  if (name == "odd" || name == "even" || name == "divisibleby") {
    if (v.is_undefined()) undefined_error(v);
    Value m = name == "divisibleby" ? other() : Value::integer(2);
    if (!v.is_number() || !m.is_number()) fail("unsupported operand type(s) for %: '" + v.type_name() + "'");
    if (m.as_double() == 0) fail("integer division or modulo by zero");
    double r = std::fmod(v.as_double(), m.as_double());
    if (v.is_integral() && m.is_integral()) r = static_cast<double>(v.as_int() % m.as_int());
    return name == "odd" ? r != 0 : r == 0;
  }
  if (name == "sameas") {
    const Value& o = other();
    if (v.kind != o.kind) return false;
    if (v.is_list()) return v.list == o.list;
    if (v.is_dict() || v.kind == K::Namespace) return v.dict == o.dict;
    if (v.kind == K::Function) return v.fn == o.fn;
    return equals(v, o);
  }
  if (name == "in") return in.contains(other(), v);
  if (name == "==" || name == "eq" || name == "equalto") return equals(v, other());
  if (name == "!=" || name == "ne") return !equals(v, other());
  if (name == "<" || name == "lt" || name == "lessthan") return in.less(v, other());
  if (name == ">" || name == "gt" || name == "greaterthan") return in.less(other(), v);
  if (name == "<=" || name == "le") return !in.less(other(), v);
  if (name == ">=" || name == "ge") return !in.less(v, other());
  fail("no test named '" + name + "'");
}

}  // namespace df::chat
