#include "diskformer/chat/value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "chat/text.h"

namespace df::chat {

const Value* Dict::find(const Value& key) const {
  for (const auto& [k, v] : items)
    if (equals(k, key)) return &v;
  return nullptr;
}

const Value* Dict::find(std::string_view key) const {
  for (const auto& [k, v] : items)
    if (k.kind == Value::Kind::String && k.s == key) return &v;
  return nullptr;
}

void Dict::set(Value key, Value value) {
  for (auto& [k, v] : items)
    if (equals(k, key)) {
      v = std::move(value);
      return;
    }
  items.emplace_back(std::move(key), std::move(value));
}

const Value* CallArgs::get(std::string_view name, size_t pos) const {
  for (const auto& [k, v] : kwargs)
    if (k == name) return &v;
  if (pos < args.size()) return &args[pos];
  return nullptr;
}

Value Value::undefined(std::string hint) {
  Value v;
  v.s = std::move(hint);
  return v;
}
Value Value::none() {
  Value v;
  v.kind = Kind::None;
  return v;
}
Value Value::boolean(bool x) {
  Value v;
  v.kind = Kind::Bool;
  v.b = x;
  return v;
}
Value Value::integer(int64_t x) {
  Value v;
  v.kind = Kind::Int;
  v.i = x;
  return v;
}
Value Value::number(double x) {
  Value v;
  v.kind = Kind::Float;
  v.f = x;
  return v;
}
Value Value::string(std::string x) {
  Value v;
  v.kind = Kind::String;
  v.s = std::move(x);
  return v;
}
Value Value::new_list(std::vector<Value> items, bool tuple) {
  Value v;
  v.kind = Kind::List;
  v.list = std::make_shared<List>(List{std::move(items), tuple});
  return v;
}
Value Value::new_dict() {
  Value v;
  v.kind = Kind::Dict;
  v.dict = std::make_shared<Dict>();
  return v;
}
Value Value::new_namespace() {
  Value v = new_dict();
  v.kind = Kind::Namespace;
  return v;
}
Value Value::function(Function fn) {
  Value v;
  v.kind = Kind::Function;
  v.fn = std::make_shared<Function>(std::move(fn));
  return v;
}

bool Value::truthy() const {
  switch (kind) {
    case Kind::Undefined:
    case Kind::None: return false;
    case Kind::Bool: return b;
    case Kind::Int: return i != 0;
    case Kind::Float: return f != 0;
    case Kind::String: return !s.empty();
    case Kind::List: return !list->items.empty();
    case Kind::Dict: return !dict->items.empty();
    case Kind::Namespace:
    case Kind::Function: return true;
  }
  return false;
}

std::string Value::type_name() const {
  switch (kind) {
    case Kind::Undefined: return "Undefined";
    case Kind::None: return "NoneType";
    case Kind::Bool: return "bool";
    case Kind::Int: return "int";
    case Kind::Float: return "float";
    case Kind::String: return "str";
    case Kind::List: return list->tuple ? "tuple" : "list";
    case Kind::Dict: return "dict";
    case Kind::Namespace: return "Namespace";
    case Kind::Function: return "function";
  }
  return "?";
}

bool equals(const Value& a, const Value& b) {
  using K = Value::Kind;
  if (a.is_number() && b.is_number()) {
    if (a.is_integral() && b.is_integral()) return a.as_int() == b.as_int();
    return a.as_double() == b.as_double();
  }
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case K::Undefined:
    case K::None: return true;
    case K::String: return a.s == b.s;
    case K::List: {
      if (a.list == b.list) return true;
      if (a.list->tuple != b.list->tuple || a.list->items.size() != b.list->items.size()) return false;
      for (size_t k = 0; k < a.list->items.size(); ++k)
        if (!equals(a.list->items[k], b.list->items[k])) return false;
      return true;
    }
    case K::Dict: {
      if (a.dict->items.size() != b.dict->items.size()) return false;
      for (const auto& [k, v] : a.dict->items) {
        const Value* o = b.dict->find(k);
        if (!o || !equals(v, *o)) return false;
      }
      return true;
    }
    case K::Namespace: return a.dict == b.dict;
    case K::Function: return a.fn == b.fn;
    default: return false;
  }
}

bool operator==(const Value& a, const Value& b) { return equals(a, b); }

std::string float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  if (d == 0) return std::signbit(d) ? "-0.0" : "0.0";
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string sci(buf, r.ptr);
  // sci = [-]D[.DDD]e[+-]XX: split into sign, digits, exponent.
  bool neg = sci[0] == '-';
  if (neg) sci.erase(0, 1);
  size_t e = sci.find('e');
  int exp = std::stoi(sci.substr(e + 1));
  std::string digits;
  for (size_t k = 0; k < e; ++k)
    if (sci[k] != '.') digits.push_back(sci[k]);
  std::string out = neg ? "-" : "";
  if (exp >= -4 && exp < 16) {  // Python's repr uses exponent form outside this range
    if (exp < 0) {
      out += "0." + std::string(static_cast<size_t>(-exp - 1), '0') + digits;
    } else if (static_cast<int>(digits.size()) <= exp + 1) {
      out += digits + std::string(static_cast<size_t>(exp + 1 - static_cast<int>(digits.size())), '0') + ".0";
    } else {
      out += digits.substr(0, static_cast<size_t>(exp + 1)) + "." + digits.substr(static_cast<size_t>(exp + 1));
    }
    return out;
  }
  out += digits.substr(0, 1);
  if (digits.size() > 1) out += "." + digits.substr(1);
  char eb[16];
  std::snprintf(eb, sizeof eb, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
  return out + eb;
}

static void repr_into(const Value& v, std::string& out);

std::string to_str(const Value& v) {
  using K = Value::Kind;
  switch (v.kind) {
    case K::Undefined: return "";
    case K::String: return v.s;
    default: {
      std::string out;
      repr_into(v, out);
      return out;
    }
  }
}

std::string to_repr(const Value& v) {
  std::string out;
  repr_into(v, out);
  return out;
}

static void repr_into(const Value& v, std::string& out) {
  using K = Value::Kind;
  switch (v.kind) {
    case K::Undefined: return;
    case K::None: out += "None"; return;
    case K::Bool: out += v.b ? "True" : "False"; return;
    case K::Int: out += std::to_string(v.i); return;
    case K::Float: out += float_repr(v.f); return;
    case K::String: out += text::repr(v.s); return;
    case K::List: {
      out += v.list->tuple ? '(' : '[';
      for (size_t k = 0; k < v.list->items.size(); ++k) {
        if (k) out += ", ";
        repr_into(v.list->items[k], out);
      }
      if (v.list->tuple && v.list->items.size() == 1) out += ',';
      out += v.list->tuple ? ')' : ']';
      return;
    }
    case K::Dict: {
      out += '{';
      bool first = true;
      for (const auto& [k, x] : v.dict->items) {
        if (!first) out += ", ";
        first = false;
        repr_into(k, out);
        out += ": ";
        repr_into(x, out);
      }
      out += '}';
      return;
    }
    case K::Namespace: out += "<Namespace>"; return;
    case K::Function: out += "<function>"; return;
  }
}

static void json_string(std::string_view s, bool ensure_ascii, std::string& out) {
  static const char* hex = "0123456789abcdef";
  auto u4 = [&](unsigned c) {
    out += "\\u";
    for (int sh = 12; sh >= 0; sh -= 4) out.push_back(hex[(c >> sh) & 15]);
  };
  out.push_back('"');
  for (char32_t c : text::decode(s)) {
    switch (c) {
      case '"': out += "\\\""; continue;
      case '\\': out += "\\\\"; continue;
      case '\n': out += "\\n"; continue;
      case '\r': out += "\\r"; continue;
      case '\t': out += "\\t"; continue;
      case '\b': out += "\\b"; continue;
      case '\f': out += "\\f"; continue;
      default: break;
    }
    if (c < 0x20 || (ensure_ascii && c > 0x7E)) {
      if (c >= 0x10000) {
        char32_t v = c - 0x10000;
        u4(0xD800 + (v >> 10));
        u4(0xDC00 + (v & 0x3FF));
      } else {
        u4(c);
      }
    } else {
      text::append_utf8(out, c);
    }
  }
  out.push_back('"');
}

static bool json_into(const Value& v, const JsonOptions& o, int depth, std::string& out, std::string* bad) {
  using K = Value::Kind;
  const std::string item_sep = !o.item_sep.empty() ? o.item_sep : o.indent >= 0 ? "," : ", ";
  const std::string key_sep = !o.key_sep.empty() ? o.key_sep : ": ";
  auto newline = [&](int d) {
    if (o.indent < 0) return;
    out.push_back('\n');
    out.append(static_cast<size_t>(o.indent * d), ' ');
  };
  switch (v.kind) {
    case K::None: out += "null"; return true;
    case K::Bool: out += v.b ? "true" : "false"; return true;
    case K::Int: out += std::to_string(v.i); return true;
    case K::Float:
      if (std::isnan(v.f)) out += "NaN";
      else if (std::isinf(v.f)) out += v.f > 0 ? "Infinity" : "-Infinity";
      else out += float_repr(v.f);
      return true;
    case K::String: json_string(v.s, o.ensure_ascii, out); return true;
    case K::List: {
      if (v.list->items.empty()) {
        out += "[]";
        return true;
      }
      out.push_back('[');
      for (size_t k = 0; k < v.list->items.size(); ++k) {
        if (k) out += item_sep;
        newline(depth + 1);
        if (!json_into(v.list->items[k], o, depth + 1, out, bad)) return false;
      }
      newline(depth);
      out.push_back(']');
      return true;
    }
    case K::Dict: {
      if (v.dict->items.empty()) {
        out += "{}";
        return true;
      }
      std::vector<std::pair<std::string, const Value*>> entries;
      for (const auto& [k, x] : v.dict->items) {
        std::string key;
        if (k.kind == K::String) key = k.s;
        else if (k.kind == K::None) key = "null";
        else if (k.kind == K::Bool) key = k.b ? "true" : "false";
        else if (k.kind == K::Int || k.kind == K::Float) key = to_str(k);
        else {
          if (bad) *bad = "keys must be str, int, float, bool or None, not " + k.type_name();
          return false;
        }
        entries.emplace_back(std::move(key), &x);
      }
      if (o.sort_keys)
        std::stable_sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
      out.push_back('{');
      for (size_t k = 0; k < entries.size(); ++k) {
        if (k) out += item_sep;
        newline(depth + 1);
        json_string(entries[k].first, o.ensure_ascii, out);
        out += key_sep;
        if (!json_into(*entries[k].second, o, depth + 1, out, bad)) return false;
      }
      newline(depth);
      out.push_back('}');
      return true;
    }
    default:
      if (bad) *bad = "Object of type " + v.type_name() + " is not JSON serializable";
      return false;
  }
}

bool to_json(const Value& v, const JsonOptions& opt, std::string& out, std::string* bad) {
  return json_into(v, opt, 0, out, bad);
}

size_t json_depth(const nlohmann::ordered_json& j) {
  using It = nlohmann::ordered_json::const_iterator;
  if (!j.is_structured()) return 0;
  // One (next, end) pair per open container: the walk's own stack, on the heap.
  std::vector<std::pair<It, It>> open{{j.cbegin(), j.cend()}};
  size_t deepest = 1;
  while (!open.empty()) {
    auto& [next, end] = open.back();
    if (next == end) {
      open.pop_back();
      continue;
    }
    const nlohmann::ordered_json& child = *next++;
    if (child.is_structured()) {
      open.emplace_back(child.cbegin(), child.cend());
      deepest = std::max(deepest, open.size());
    }
  }
  return deepest;
}

namespace {

// `depth`: containers around j. Recurses once a level, at most kMaxJsonDepth deep.
Result<Value> from_json_at(const nlohmann::ordered_json& j, size_t depth) {
  using T = nlohmann::ordered_json::value_t;
  if (j.is_structured() && depth >= kMaxJsonDepth)
    return Error{"JSON nested deeper than " + std::to_string(kMaxJsonDepth) + " levels"};
  switch (j.type()) {
    case T::null: return Value::none();
    case T::boolean: return Value::boolean(j.get<bool>());
    case T::number_integer: return Value::integer(j.get<int64_t>());
    case T::number_unsigned: {
      auto u = j.get<uint64_t>();
      return u <= static_cast<uint64_t>(INT64_MAX) ? Value::integer(static_cast<int64_t>(u))
                                                    : Value::number(static_cast<double>(u));
    }
    case T::number_float: return Value::number(j.get<double>());
    case T::string: return Value::string(j.get<std::string>());
    case T::array: {
      std::vector<Value> items;
      items.reserve(j.size());
      for (const auto& e : j) {
        DF_ASSIGN(Value item, from_json_at(e, depth + 1));
        items.push_back(std::move(item));
      }
      return Value::new_list(std::move(items));
    }
    case T::object: {
      Value d = Value::new_dict();
      for (const auto& [k, e] : j.items()) {
        DF_ASSIGN(Value item, from_json_at(e, depth + 1));
        d.dict->items.emplace_back(Value::string(k), std::move(item));
      }
      return d;
    }
    default: return Value::none();
  }
}

}  // namespace

Result<Value> from_json(const nlohmann::ordered_json& j) { return from_json_at(j, 0); }

}  // namespace df::chat
