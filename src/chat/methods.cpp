// Python methods of str / dict / list that templates call ("abc".startswith(...), d.items(), ...), the
// globals (range, namespace, dict, raise_exception, strftime_now), and Python's two string formatters.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>

#include "chat/interp.h"
#include "chat/text.h"

namespace df::chat {

namespace {

const Value& arg(CallArgs& a, size_t pos, const char* name, const char* method) {
  const Value* v = a.get(name, pos);
  if (!v) fail(std::string(method) + "() missing required argument '" + name + "' (pos " + std::to_string(pos + 1) + ")");
  return *v;
}

std::optional<std::string> opt_str(CallArgs& a, size_t pos, const char* name) {
  const Value* v = a.get(name, pos);
  if (!v || v->is_none()) return std::nullopt;
  if (!v->is_string()) fail(std::string("expected str for '") + name + "', got " + v->type_name());
  return v->s;
}

long opt_int(CallArgs& a, size_t pos, const char* name, long dflt) {
  const Value* v = a.get(name, pos);
  if (!v || v->is_none()) return dflt;
  if (!v->is_integral()) fail(std::string("expected int for '") + name + "', got " + v->type_name());
  return static_cast<long>(v->as_int());
}

const std::string& str_arg(CallArgs& a, size_t pos, const char* name, const char* method) {
  const Value& v = arg(a, pos, name, method);
  if (!v.is_string()) fail(std::string(method) + "() argument must be str, not " + v.type_name());
  return v.s;
}

Value str_list(const std::vector<std::string>& parts) {
  std::vector<Value> items;
  items.reserve(parts.size());
  for (const auto& p : parts) items.push_back(Value::string(p));
  return Value::new_list(std::move(items));
}

bool affix_match(const std::string& s, const Value& affix, bool prefix) {
  auto one = [&](const Value& x) {
    if (!x.is_string()) fail("startswith/endswith first arg must be str or a tuple of str, not " + x.type_name());
    if (x.s.size() > s.size()) return false;
    return prefix ? s.compare(0, x.s.size(), x.s) == 0 : s.compare(s.size() - x.s.size(), x.s.size(), x.s) == 0;
  };
  if (affix.is_list()) {
    for (const auto& x : affix.list->items)
      if (one(x)) return true;
    return false;
  }
  return one(affix);
}

std::string pad(const std::string& s, long width, char align, const std::string& fill = " ") {
  if (width > (1 << 24)) fail("padding width too large");
  long n = static_cast<long>(text::length(s));
  if (n >= width) return s;
  long total = width - n;
  long left = align == '<' ? 0 : align == '>' ? total : total / 2;
  std::string out;
  for (long k = 0; k < left; ++k) out += fill;
  out += s;
  for (long k = 0; k < total - left; ++k) out += fill;
  return out;
}

// One replacement field's format spec: [[fill]align][sign][#][0][width][,][.precision][type].
std::string format_spec(const Value& v, const std::string& spec) {
  size_t k = 0;
  std::string fill = " ";
  char align = 0;
  auto is_align = [](char c) { return c == '<' || c == '>' || c == '^' || c == '='; };
  if (spec.size() >= 2 && is_align(spec[1])) {
    fill = spec.substr(0, 1);
    align = spec[1];
    k = 2;
  } else if (!spec.empty() && is_align(spec[0])) {
    align = spec[0];
    k = 1;
  }
  char sign = 0;
  if (k < spec.size() && (spec[k] == '+' || spec[k] == '-' || spec[k] == ' ')) sign = spec[k++];
  if (k < spec.size() && spec[k] == '0') {
    fill = "0";
    if (!align) align = '=';
    ++k;
  }
  long width = 0;
  while (k < spec.size() && std::isdigit(static_cast<unsigned char>(spec[k])))
    if ((width = width * 10 + (spec[k++] - '0')) > (1 << 24)) fail("format width too large");
  int precision = -1;
  if (k < spec.size() && spec[k] == '.') {
    precision = 0;
    ++k;
    while (k < spec.size() && std::isdigit(static_cast<unsigned char>(spec[k])))
      if ((precision = precision * 10 + (spec[k++] - '0')) > 400) fail("format precision too large");
  }
  char type = k < spec.size() ? spec[k] : 0;
  std::string body;
  if (v.is_number() && (type == 'f' || type == 'F' || type == 'e' || type == 'g' || type == '%' ||
                        (type == 0 && precision >= 0))) {
    char buf[512];
    double d = v.as_double() * (type == '%' ? 100 : 1);
    char t = type == 0 || type == '%' ? 'f' : type;
    if (type == 0) t = 'g';
    std::snprintf(buf, sizeof buf, (std::string("%") + (sign == '+' ? "+" : sign == ' ' ? " " : "") + ".*" + t).c_str(),
                  precision < 0 ? 6 : precision, d);
    body = buf;
    if (type == '%') body += "%";
  } else if (v.is_integral() && (type == 'd' || type == 0 || type == 'x' || type == 'X' || type == 'o' || type == 'b')) {
    int64_t x = v.as_int();
    if (type == 'x' || type == 'X' || type == 'o' || type == 'b') {
      uint64_t u = x < 0 ? static_cast<uint64_t>(-x) : static_cast<uint64_t>(x);
      int base = type == 'o' ? 8 : type == 'b' ? 2 : 16;
      const char* digits = type == 'X' ? "0123456789ABCDEF" : "0123456789abcdef";
      do {
        body.insert(body.begin(), digits[u % base]);
        u /= base;
      } while (u);
      if (x < 0) body.insert(body.begin(), '-');
    } else {
      body = std::to_string(x);
      if (sign == '+' && x >= 0) body = "+" + body;
      if (sign == ' ' && x >= 0) body = " " + body;
    }
  } else {
    body = to_str(v);
    if (precision >= 0) body = text::encode(text::decode(body).substr(0, static_cast<size_t>(precision)));
  }
  if (!align) align = v.is_number() ? '>' : '<';
  if (align == '=') {
    bool neg = !body.empty() && (body[0] == '-' || body[0] == '+');
    std::string head = neg ? body.substr(0, 1) : "";
    return head + pad(body.substr(head.size()), width - static_cast<long>(head.size()), '>', fill);
  }
  return pad(body, width, align, fill);
}

// Python's str.format (the subset templates use: auto / numbered / named fields, !r !s, format specs).
std::string str_format(Interp& in, const std::string& fmt, CallArgs& a) {
  std::string out;
  size_t auto_idx = 0;
  for (size_t k = 0; k < fmt.size(); ++k) {
    char c = fmt[k];
    if (c == '}') {
      if (k + 1 < fmt.size() && fmt[k + 1] == '}') ++k;
      else fail("single '}' encountered in format string");
      out += '}';
      continue;
    }
    if (c != '{') {
      out += c;
      continue;
    }
    if (k + 1 < fmt.size() && fmt[k + 1] == '{') {
      out += '{';
      ++k;
      continue;
    }
    size_t close = fmt.find('}', k);
    if (close == std::string::npos) fail("single '{' encountered in format string");
    std::string field = fmt.substr(k + 1, close - k - 1);
    k = close;
    std::string spec, conv;
    size_t colon = field.find(':');
    if (colon != std::string::npos) {
      spec = field.substr(colon + 1);
      field.resize(colon);
    }
    size_t bang = field.find('!');
    if (bang != std::string::npos) {
      conv = field.substr(bang + 1);
      field.resize(bang);
    }
    // field: "" | digits | name, then .attr / [key] parts
    size_t end = field.find_first_of(".[");
    std::string head = field.substr(0, end);
    Value v;
    if (head.empty()) {
      if (auto_idx >= a.args.size()) fail("Replacement index " + std::to_string(auto_idx) + " out of range");
      v = a.args[auto_idx++];
    } else if (std::isdigit(static_cast<unsigned char>(head[0]))) {
      size_t idx = std::stoul(head);
      if (idx >= a.args.size()) fail("Replacement index " + head + " out of range");
      v = a.args[idx];
    } else {
      const Value* kv = a.get(head);
      if (!kv) fail("KeyError: '" + head + "'");
      v = *kv;
    }
    while (end != std::string::npos && end < field.size()) {
      if (field[end] == '.') {
        size_t e2 = field.find_first_of(".[", end + 1);
        v = in.getattr(v, field.substr(end + 1, e2 == std::string::npos ? std::string::npos : e2 - end - 1));
        end = e2;
      } else {
        size_t e2 = field.find(']', end);
        if (e2 == std::string::npos) fail("missing ']' in format string");
        std::string key = field.substr(end + 1, e2 - end - 1);
        bool digits = !key.empty() && key.find_first_not_of("0123456789") == std::string::npos;
        v = in.getitem(v, digits ? Value::integer(std::stoll(key)) : Value::string(key));
        end = e2 + 1 < field.size() ? e2 + 1 : std::string::npos;
      }
    }
    if (conv == "r") v = Value::string(to_repr(v));
    else if (conv == "s") v = Value::string(to_str(v));
    out += format_spec(v, spec);
  }
  return out;
}

Value method_fn(std::function<Value(CallArgs&)> f) { return Value::function(std::move(f)); }

Value str_method(Interp& in, const Value& obj, const std::string& name) {
  const std::string s = obj.s;
  if (name == "startswith" || name == "endswith") {
    bool prefix = name == "startswith";
    return method_fn([s, prefix, name](CallArgs& a) {
      return Value::boolean(affix_match(s, arg(a, 0, "prefix", name.c_str()), prefix));
    });
  }
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    bool l = name != "rstrip", r = name != "lstrip";
    return method_fn([s, l, r](CallArgs& a) { return Value::string(text::strip(s, opt_str(a, 0, "chars"), l, r)); });
  }
  if (name == "split" || name == "rsplit") {
    bool rev = name == "rsplit";
    return method_fn([s, rev](CallArgs& a) {
      auto sep = opt_str(a, 0, "sep");
      if (sep && sep->empty()) fail("empty separator");
      long n = opt_int(a, 1, "maxsplit", -1);
      return str_list(rev ? text::rsplit(s, sep, n) : text::split(s, sep, n));
    });
  }
  if (name == "splitlines") {
    return method_fn([s](CallArgs& a) {
      bool keep = a.get("keepends", 0) && a.get("keepends", 0)->truthy();
      std::vector<std::string> lines;
      size_t start = 0;
      for (size_t k = 0; k < s.size(); ++k) {
        if (s[k] != '\n' && s[k] != '\r') continue;
        size_t e = k + (s[k] == '\r' && k + 1 < s.size() && s[k + 1] == '\n' ? 1 : 0);
        lines.push_back(s.substr(start, (keep ? e + 1 : k) - start));
        k = e;
        start = e + 1;
      }
      if (start < s.size()) lines.push_back(s.substr(start));
      return str_list(lines);
    });
  }
  if (name == "upper") return method_fn([s](CallArgs&) { return Value::string(text::upper(s)); });
  if (name == "lower" || name == "casefold") return method_fn([s](CallArgs&) { return Value::string(text::lower(s)); });
  if (name == "title") return method_fn([s](CallArgs&) { return Value::string(text::title(s)); });
  if (name == "capitalize") return method_fn([s](CallArgs&) { return Value::string(text::capitalize(s)); });
  if (name == "swapcase")
    return method_fn([s](CallArgs&) {
      auto u = text::decode(s);
      for (auto& c : u) c = text::to_lower(c) != c ? text::to_lower(c) : text::to_upper(c);
      return Value::string(text::encode(u));
    });
  if (name == "replace")
    return method_fn([s](CallArgs& a) {
      return Value::string(text::replace(s, str_arg(a, 0, "old", "replace"), str_arg(a, 1, "new", "replace"),
                                         opt_int(a, 2, "count", -1)));
    });
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex") {
    bool rev = name[0] == 'r', raise = name.find("index") != std::string::npos;
    return method_fn([s, rev, raise](CallArgs& a) {
      long r = text::find(s, str_arg(a, 0, "sub", "find"), rev);
      if (r < 0 && raise) fail("substring not found");
      return Value::integer(r);
    });
  }
  if (name == "count")
    return method_fn([s](CallArgs& a) {
      return Value::integer(static_cast<int64_t>(text::count(s, str_arg(a, 0, "sub", "count"))));
    });
  if (name == "format") return method_fn([&in, s](CallArgs& a) { return Value::string(str_format(in, s, a)); });
  if (name == "join")
    return method_fn([&in, s](CallArgs& a) {
      std::string out;
      bool first = true;
      for (const auto& x : in.iterate(arg(a, 0, "iterable", "join"))) {
        if (!x.is_string()) fail("sequence item: expected str instance, " + x.type_name() + " found");
        if (!first) out += s;
        first = false;
        out += x.s;
      }
      return Value::string(std::move(out));
    });
  if (name == "removeprefix" || name == "removesuffix") {
    bool pre = name == "removeprefix";
    return method_fn([s, pre](CallArgs& a) {
      const std::string& x = str_arg(a, 0, "affix", "removeprefix");
      if (x.size() <= s.size() && (pre ? s.compare(0, x.size(), x) == 0 : s.compare(s.size() - x.size(), x.size(), x) == 0))
        return Value::string(pre ? s.substr(x.size()) : s.substr(0, s.size() - x.size()));
      return Value::string(s);
    });
  }
  if (name == "partition" || name == "rpartition") {
    bool rev = name == "rpartition";
    return method_fn([s, rev](CallArgs& a) {
      const std::string& sep = str_arg(a, 0, "sep", "partition");
      size_t f = rev ? s.rfind(sep) : s.find(sep);
      std::vector<Value> r;
      if (f == std::string::npos) {
        r = rev ? std::vector<Value>{Value::string(""), Value::string(""), Value::string(s)}
                : std::vector<Value>{Value::string(s), Value::string(""), Value::string("")};
      } else {
        r = {Value::string(s.substr(0, f)), Value::string(sep), Value::string(s.substr(f + sep.size()))};
      }
      return Value::new_list(std::move(r), true);
    });
  }
  if (name == "center" || name == "ljust" || name == "rjust") {
    char align = name == "center" ? '^' : name == "ljust" ? '<' : '>';
    return method_fn([s, align](CallArgs& a) {
      auto fill = opt_str(a, 1, "fillchar");
      return Value::string(pad(s, opt_int(a, 0, "width", 0), align, fill ? *fill : " "));
    });
  }
  if (name == "zfill")
    return method_fn([s](CallArgs& a) {
      long w = opt_int(a, 0, "width", 0);
      bool sign = !s.empty() && (s[0] == '-' || s[0] == '+');
      std::string head = sign ? s.substr(0, 1) : "";
      return Value::string(head + pad(s.substr(head.size()), w - static_cast<long>(head.size()), '>', "0"));
    });
  auto cls = [s](auto pred, bool need_cased) {
    return method_fn([s, pred, need_cased](CallArgs&) {
      auto u = text::decode(s);
      if (u.empty()) return Value::boolean(false);
      bool any_cased = false;
      for (char32_t c : u) {
        if (!pred(c)) return Value::boolean(false);
        if (text::is_cased(c)) any_cased = true;
      }
      return Value::boolean(!need_cased || any_cased);
    });
  };
  if (name == "isdigit" || name == "isnumeric" || name == "isdecimal")
    return cls([](char32_t c) { return c >= '0' && c <= '9'; }, false);
  if (name == "isalpha") return cls([](char32_t c) { return text::is_cased(c) || c >= 0x100; }, false);
  if (name == "isalnum")
    return cls([](char32_t c) { return text::is_cased(c) || c >= 0x100 || (c >= '0' && c <= '9'); }, false);
  if (name == "isspace") return cls([](char32_t c) { return text::is_space(c); }, false);
  if (name == "islower") return cls([](char32_t c) { return text::to_lower(c) == c; }, true);
  if (name == "isupper") return cls([](char32_t c) { return text::to_upper(c) == c; }, true);
  return Value::undefined();
}

Value unsafe(const Value& obj, const std::string& name) {
  return Value::undefined("access to attribute '" + name + "' of '" + obj.type_name() + "' object is unsafe.");
}

Value dict_method(Interp& in, const Value& obj, const std::string& name) {
  auto d = obj.dict;
  if (name == "items" || name == "keys" || name == "values") {
    int which = name == "items" ? 0 : name == "keys" ? 1 : 2;
    return method_fn([d, which](CallArgs&) {
      std::vector<Value> out;
      for (const auto& [k, v] : d->items)
        out.push_back(which == 0 ? Value::new_list({k, v}, true) : which == 1 ? k : v);
      return Value::new_list(std::move(out));
    });
  }
  if (name == "get")
    return method_fn([d](CallArgs& a) {
      const Value* v = d->find(arg(a, 0, "key", "get"));
      if (v) return *v;
      const Value* dflt = a.get("default", 1);
      return dflt ? *dflt : Value::none();
    });
  if (name == "copy") return method_fn([d](CallArgs&) {
      Value c = Value::new_dict();
      c.dict->items = d->items;
      return c;
    });
  static const char* mutators[] = {"pop", "update", "setdefault", "clear", "popitem"};
  for (const char* m : mutators)
    if (name == m && !in.options().allow_mutation) return unsafe(obj, name);
  if (name == "pop")
    return method_fn([d](CallArgs& a) {
      const Value& key = arg(a, 0, "key", "pop");
      for (auto it = d->items.begin(); it != d->items.end(); ++it)
        if (equals(it->first, key)) {
          Value v = it->second;
          d->items.erase(it);
          return v;
        }
      if (const Value* dflt = a.get("default", 1)) return *dflt;
      fail("KeyError: " + to_repr(key));
    });
  if (name == "setdefault")
    return method_fn([d](CallArgs& a) {
      const Value& key = arg(a, 0, "key", "setdefault");
      if (const Value* v = d->find(key)) return *v;
      const Value* dflt = a.get("default", 1);
      d->set(key, dflt ? *dflt : Value::none());
      return dflt ? *dflt : Value::none();
    });
  if (name == "update")
    return method_fn([d](CallArgs& a) {
      if (!a.args.empty() && a.args[0].is_dict())
        for (const auto& [k, v] : a.args[0].dict->items) d->set(k, v);
      for (const auto& [k, v] : a.kwargs) d->set(Value::string(k), v);
      return Value::none();
    });
  if (name == "clear") return method_fn([d](CallArgs&) {
      d->items.clear();
      return Value::none();
    });
  return Value::undefined();
}

Value list_method(Interp& in, const Value& obj, const std::string& name) {
  auto l = obj.list;
  if (name == "index")
    return method_fn([l](CallArgs& a) {
      const Value& x = arg(a, 0, "value", "index");
      for (size_t k = 0; k < l->items.size(); ++k)
        if (equals(l->items[k], x)) return Value::integer(static_cast<int64_t>(k));
      fail(to_repr(x) + " is not in list");
    });
  if (name == "count")
    return method_fn([l](CallArgs& a) {
      const Value& x = arg(a, 0, "value", "count");
      int64_t n = 0;
      for (const auto& v : l->items) n += equals(v, x);
      return Value::integer(n);
    });
  if (name == "copy") return method_fn([l](CallArgs&) { return Value::new_list(l->items); });
  if (l->tuple) return Value::undefined();
  static const char* mutators[] = {"append", "extend", "insert", "pop", "remove", "reverse", "sort", "clear"};
  for (const char* m : mutators)
    if (name == m && !in.options().allow_mutation) return unsafe(obj, name);
  if (name == "append") return method_fn([l](CallArgs& a) {
      l->items.push_back(arg(a, 0, "object", "append"));
      return Value::none();
    });
  if (name == "extend") return method_fn([l, &in](CallArgs& a) {
      for (auto& x : in.iterate(arg(a, 0, "iterable", "extend"))) l->items.push_back(x);
      return Value::none();
    });
  if (name == "insert") return method_fn([l](CallArgs& a) {
      auto n = static_cast<int64_t>(l->items.size());
      int64_t i = opt_int(a, 0, "index", 0);
      if (i < 0) i = std::max<int64_t>(0, i + n);
      i = std::min(i, n);
      l->items.insert(l->items.begin() + i, arg(a, 1, "object", "insert"));
      return Value::none();
    });
  if (name == "pop") return method_fn([l](CallArgs& a) {
      auto n = static_cast<int64_t>(l->items.size());
      int64_t i = opt_int(a, 0, "index", -1);
      if (i < 0) i += n;
      if (i < 0 || i >= n) fail("pop index out of range");
      Value v = l->items[static_cast<size_t>(i)];
      l->items.erase(l->items.begin() + i);
      return v;
    });
  if (name == "remove") return method_fn([l](CallArgs& a) {
      const Value& x = arg(a, 0, "value", "remove");
      for (auto it = l->items.begin(); it != l->items.end(); ++it)
        if (equals(*it, x)) {
          l->items.erase(it);
          return Value::none();
        }
      fail("list.remove(x): x not in list");
    });
  if (name == "reverse") return method_fn([l](CallArgs&) {
      std::reverse(l->items.begin(), l->items.end());
      return Value::none();
    });
  if (name == "clear") return method_fn([l](CallArgs&) {
      l->items.clear();
      return Value::none();
    });
  if (name == "sort") return method_fn([l, &in](CallArgs& a) {
      bool rev = a.get("reverse") && a.get("reverse")->truthy();
      std::stable_sort(l->items.begin(), l->items.end(),
                       [&](const Value& x, const Value& y) { return rev ? in.less(y, x) : in.less(x, y); });
      return Value::none();
    });
  return Value::undefined();
}

}  // namespace

Value bound_method(Interp& in, const Value& obj, const std::string& name) {
  switch (obj.kind) {
    case Value::Kind::String: return str_method(in, obj, name);
    case Value::Kind::Dict: return dict_method(in, obj, name);
    case Value::Kind::List: return list_method(in, obj, name);
    default: return Value::undefined();
  }
}

std::string percent_format(const std::string& fmt, const Value& args) {
  std::vector<Value> pos;
  const Value* mapping = nullptr;
  if (args.is_list() && args.list->tuple) pos = args.list->items;
  else if (args.is_dict()) mapping = &args;
  else pos.push_back(args);
  size_t next = 0;
  std::string out;
  for (size_t k = 0; k < fmt.size(); ++k) {
    if (fmt[k] != '%') {
      out += fmt[k];
      continue;
    }
    if (++k >= fmt.size()) fail("incomplete format");
    Value v;
    bool have = false;
    if (fmt[k] == '(') {
      size_t close = fmt.find(')', k);
      if (close == std::string::npos || !mapping) fail("format requires a mapping");
      const Value* x = mapping->dict->find(fmt.substr(k + 1, close - k - 1));
      if (!x) fail("KeyError: '" + fmt.substr(k + 1, close - k - 1) + "'");
      v = *x;
      have = true;
      k = close + 1;
    }
    std::string spec;
    while (k < fmt.size() && std::strchr("-+ #0123456789.", fmt[k])) spec += fmt[k++];
    if (k >= fmt.size()) fail("incomplete format");
    char conv = fmt[k];
    if (conv == '%') {
      out += '%';
      continue;
    }
    if (!have) {
      if (mapping) v = args;
      else if (next < pos.size()) v = pos[next++];
      else fail("not enough arguments for format string");
    }
    char buf[512];
    std::string f = "%" + spec;
    if (conv == 's' || conv == 'r' || conv == 'a') {
      std::string s = conv == 's' ? to_str(v) : to_repr(v);
      std::snprintf(buf, sizeof buf, (f + "s").c_str(), s.c_str());
      out += s.size() < 400 ? std::string(buf) : s;
    } else if (conv == 'd' || conv == 'i' || conv == 'x' || conv == 'X' || conv == 'o') {
      if (!v.is_number()) fail("%" + std::string(1, conv) + " format: a real number is required, not " + v.type_name());
      if (v.kind == Value::Kind::Float && !(std::fabs(v.f) < 9.2e18)) fail("cannot convert float to integer");
      auto x = static_cast<long long>(v.kind == Value::Kind::Float ? std::trunc(v.f) : v.as_int());
      std::snprintf(buf, sizeof buf, (f + "ll" + (conv == 'i' ? 'd' : conv)).c_str(), x);
      out += buf;
    } else if (std::strchr("eEfFgG", conv)) {
      if (!v.is_number()) fail("must be real number, not " + v.type_name());
      std::snprintf(buf, sizeof buf, (f + conv).c_str(), v.as_double());
      out += buf;
    } else if (conv == 'c') {
      if (v.is_integral()) text::append_utf8(out, static_cast<char32_t>(v.as_int()));
      else out += to_str(v);
    } else {
      fail(std::string("unsupported format character '") + conv + "'");
    }
  }
  if (!mapping && next < pos.size()) fail("not all arguments converted during string formatting");
  return out;
}

void add_globals(Scope& g, const RenderOptions& options) {
  g.set("range", Value::function([](CallArgs& a) {
    for (const auto& x : a.args)
      if (!x.is_integral()) fail("'" + x.type_name() + "' object cannot be interpreted as an integer");
    int64_t start = 0, stop, step = 1;
    if (a.args.size() == 1) {
      stop = a.args[0].as_int();
    } else if (a.args.size() == 2 || a.args.size() == 3) {
      start = a.args[0].as_int();
      stop = a.args[1].as_int();
      if (a.args.size() == 3) step = a.args[2].as_int();
    } else {
      fail("range expected 1 to 3 arguments, got " + std::to_string(a.args.size()));
    }
    if (step == 0) fail("range() arg 3 must not be zero");
    std::vector<Value> out;
    for (int64_t k = start; step > 0 ? k < stop : k > stop;) {
      if (out.size() >= 100'000)  // as Jinja's sandbox (MAX_RANGE)
        fail("Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
      out.push_back(Value::integer(k));
      if (__builtin_add_overflow(k, step, &k)) break;
    }
    return Value::new_list(std::move(out));
  }));
  auto make_dict = [](CallArgs& a, Value d) {
    if (!a.args.empty()) {
      if (!a.args[0].is_dict()) fail("dictionary update argument must be a mapping");
      d.dict->items = a.args[0].dict->items;
    }
    for (auto& [k, v] : a.kwargs) d.dict->set(Value::string(k), v);
    return d;
  };
  g.set("namespace", Value::function([make_dict](CallArgs& a) { return make_dict(a, Value::new_namespace()); }));
  g.set("dict", Value::function([make_dict](CallArgs& a) { return make_dict(a, Value::new_dict()); }));
  g.set("raise_exception", Value::function([](CallArgs& a) -> Value {
    fail(a.args.empty() ? std::string() : to_str(a.args[0]));
  }));
  std::optional<std::tm> now = options.now;
  g.set("strftime_now", Value::function([now](CallArgs& a) {
    std::tm tm{};
    if (now) {
      tm = *now;
    } else {
      std::time_t t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
      localtime_r(&t, &tm);
    }
    const Value* f = a.get("format", 0);
    if (!f || !f->is_string()) fail("strftime_now() needs a format string");
    if (f->s.empty()) return Value::string("");
    std::string buf(256 + f->s.size() * 8, '\0');
    size_t n = std::strftime(buf.data(), buf.size(), f->s.c_str(), &tm);
    buf.resize(n);
    return Value::string(buf);
  }));
}

}  // namespace df::chat
