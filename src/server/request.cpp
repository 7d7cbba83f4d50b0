#include "server/request.h"

#include <cmath>
#include <limits>

namespace df::server {

namespace {

using json = nlohmann::ordered_json;

// Nesting depth of arrays and objects, outside strings; scanning stops once `limit` is passed.
int json_depth(std::string_view s, int limit) {
  int depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (char c : s) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
      if (deepest > limit) return deepest;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return deepest;
}

const char* type_name(const json& v) {
  switch (v.type()) {
    case json::value_t::null: return "null";
    case json::value_t::boolean: return "a boolean";
    case json::value_t::string: return "a string";
    case json::value_t::array: return "an array";
    case json::value_t::object: return "an object";
    case json::value_t::number_float: return "a number";
    default: return "an integer";
  }
}

ApiError wrong_type(const std::string& field, const char* expected, const json& got) {
  return bad_request("'" + field + "' must be " + expected + ", got " + type_name(got), field, "invalid_type");
}

// Reads one optional field: absent or null leaves `out` unset. Each returns an error for a wrong type or range.
class Fields {
 public:
  explicit Fields(const json& j) : j_(j) {}

  const json* find(const std::string& k) const {
    auto it = j_.find(k);
    return it == j_.end() || it->is_null() ? nullptr : &*it;
  }
  std::optional<ApiError> boolean(const std::string& k, std::optional<bool>& out) const {
    const json* v = find(k);
    if (!v) return std::nullopt;
    if (!v->is_boolean()) return wrong_type(k, "a boolean", *v);
    out = v->get<bool>();
    return std::nullopt;
  }
  std::optional<ApiError> number(const std::string& k, double lo, double hi, std::optional<float>& out) const {
    const json* v = find(k);
    if (!v) return std::nullopt;
    if (!v->is_number()) return wrong_type(k, "a number", *v);
    const double d = v->get<double>();
    if (!std::isfinite(d) || d < lo || d > hi)
      return bad_request("'" + k + "' must be between " + fmt(lo) + " and " + fmt(hi) + ", got " + v->dump(), k,
                         "invalid_value");
    out = float(d);
    return std::nullopt;
  }
  std::optional<ApiError> integer(const std::string& k, int64_t lo, int64_t hi, std::optional<int64_t>& out) const {
    const json* v = find(k);
    if (!v) return std::nullopt;
    // 3.0 is an integer to JSON's readers in Python and JavaScript alike.
    if (v->is_number_float()) {
      const double d = v->get<double>();
      if (!std::isfinite(d) || d != std::floor(d) || std::fabs(d) > 9e15) return wrong_type(k, "an integer", *v);
      out = int64_t(d);
    } else if (v->is_number_unsigned()) {
      const uint64_t u = v->get<uint64_t>();
      out = u > uint64_t(std::numeric_limits<int64_t>::max()) ? std::numeric_limits<int64_t>::max() : int64_t(u);
    } else if (v->is_number_integer()) {
      out = v->get<int64_t>();
    } else {
      return wrong_type(k, "an integer", *v);
    }
    if (*out < lo || *out > hi)
      return bad_request("'" + k + "' must be between " + std::to_string(lo) + " and " + std::to_string(hi) +
                             ", got " + v->dump(),
                         k, "invalid_value");
    return std::nullopt;
  }

 private:
  static std::string fmt(double d) {
    if (std::isinf(d)) return "infinity";
    std::string s = std::to_string(d);
    s.erase(s.find_last_not_of('0') + 1);
    if (!s.empty() && s.back() == '.') s.pop_back();
    return s;
  }
  const json& j_;
};

std::optional<ApiError> parse_messages(const json& body, json& out) {
  auto it = body.find("messages");
  if (it == body.end() || it->is_null()) return bad_request("'messages' is required", "messages", "missing_field");
  if (!it->is_array()) return wrong_type("messages", "an array of messages", *it);
  if (it->empty()) return bad_request("'messages' must hold at least one message", "messages", "empty_array");
  out = json::array();
  for (size_t i = 0; i < it->size(); ++i) {
    const json& m = (*it)[i];
    const std::string at = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) return wrong_type(at, "an object", m);
    auto role = m.find("role");
    if (role == m.end() || role->is_null()) return bad_request("'" + at + ".role' is required", at + ".role",
                                                               "missing_field");
    if (!role->is_string()) return wrong_type(at + ".role", "a string", *role);
    std::string r = role->get<std::string>();
    if (r != "system" && r != "developer" && r != "user" && r != "assistant" && r != "tool")
      return bad_request("'" + at + ".role' must be one of system, developer, user, assistant, tool; got '" + r + "'",
                         at + ".role", "invalid_value");
    if (r == "developer") r = "system";  // OpenAI's newer name for the system message; templates know "system"
    std::string text;
    auto content = m.find("content");
    if (content == m.end() || content->is_null()) {
      if (r != "assistant") return bad_request("'" + at + ".content' is required", at + ".content", "missing_field");
    } else if (content->is_string()) {
      text = content->get<std::string>();
    } else if (content->is_array()) {
      for (size_t p = 0; p < content->size(); ++p) {
        const json& part = (*content)[p];
        const std::string pat = at + ".content[" + std::to_string(p) + "]";
        if (!part.is_object()) return wrong_type(pat, "an object", part);
        auto type = part.find("type");
        if (type == part.end() || !type->is_string() || *type != "text")
          return bad_request("'" + pat + "' is not supported: only parts of type \"text\" are", pat + ".type",
                             "unsupported_content");
        auto t = part.find("text");
        if (t == part.end() || !t->is_string()) return wrong_type(pat + ".text", "a string",
                                                                   t == part.end() ? json() : *t);
        text += t->get<std::string>();
      }
    } else {
      return wrong_type(at + ".content", "a string or an array of text parts", *content);
    }
    json msg = {{"role", r}, {"content", text}};
    if (auto name = m.find("name"); name != m.end() && !name->is_null()) {
      if (!name->is_string()) return wrong_type(at + ".name", "a string", *name);
      msg["name"] = *name;
    }
    out.push_back(std::move(msg));
  }
  return std::nullopt;
}

std::optional<ApiError> parse_prompt(const json& body, ApiRequest& out) {
  auto it = body.find("prompt");
  if (it == body.end() || it->is_null()) return bad_request("'prompt' is required", "prompt", "missing_field");
  const json* p = &*it;
  // A list of one prompt is a prompt; a list of several asks for several completions, which needs n > 1.
  if (p->is_array() && p->size() == 1 && ((*p)[0].is_string() || (*p)[0].is_array())) p = &(*p)[0];
  if (p->is_string()) {
    out.prompt = p->get<std::string>();
    return std::nullopt;
  }
  if (p->is_array() && !p->empty() && (*p)[0].is_string())
    return bad_request("'prompt' holds several prompts; one request completes one prompt", "prompt",
                       "unsupported_value");
  if (!p->is_array()) return wrong_type("prompt", "a string or an array of token ids", *p);
  std::vector<int32_t> ids;
  for (const json& t : *p) {
    if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() > std::numeric_limits<int32_t>::max())
      return bad_request("'prompt' must be a string or an array of token ids (integers of 0 and up)", "prompt",
                         "invalid_type");
    ids.push_back(int32_t(t.get<int64_t>()));
  }
  out.prompt_ids = std::move(ids);
  return std::nullopt;
}

std::optional<ApiError> parse_stop(const json& body, std::vector<std::string>& out) {
  auto it = body.find("stop");
  if (it == body.end() || it->is_null()) return std::nullopt;
  std::vector<const json*> items;
  if (it->is_string()) {
    items.push_back(&*it);
  } else if (it->is_array()) {
    for (const json& s : *it) items.push_back(&s);
  } else {
    return wrong_type("stop", "a string or an array of strings", *it);
  }
  if (items.size() > 16) return bad_request("'stop' holds more than 16 strings", "stop", "invalid_value");
  for (const json* s : items) {
    if (!s->is_string()) return wrong_type("stop", "a string or an array of strings", *s);
    if (s->get<std::string>().empty()) return bad_request("'stop' strings must not be empty", "stop", "invalid_value");
    out.push_back(s->get<std::string>());
  }
  return std::nullopt;
}

// Fields whose effect this server does not have: refused unless they ask for the default.
std::optional<ApiError> refuse_unsupported(const json& body) {
  const Fields f(body);
  for (const char* k : {"presence_penalty", "frequency_penalty"}) {
    std::optional<float> v;
    if (auto e = f.number(k, -2, 2, v)) return e;
    if (v && *v != 0) return bad_request(std::string("'") + k + "' is not supported (use repeat_penalty)", k,
                                         "unsupported_parameter");
  }
  std::optional<int64_t> n;
  if (auto e = f.integer("n", 1, 128, n)) return e;
  if (n && *n != 1) return bad_request("'n' must be 1: one request makes one completion", "n", "unsupported_value");
  if (const json* v = f.find("logit_bias"); v && !(v->is_object() && v->empty()))
    return bad_request("'logit_bias' is not supported", "logit_bias", "unsupported_parameter");
  if (const json* v = f.find("tools"); v && !(v->is_array() && v->empty()))
    return bad_request("'tools' are not supported by this server", "tools", "unsupported_parameter");
  if (const json* v = f.find("response_format")) {
    if (!v->is_object()) return wrong_type("response_format", "an object", *v);
    auto t = v->find("type");
    if (t != v->end() && !(t->is_string() && *t == "text"))
      return bad_request("'response_format' must be {\"type\": \"text\"}: constrained output is not supported",
                         "response_format", "unsupported_value");
  }
  if (const json* v = f.find("echo"); v && !(v->is_boolean() && !v->get<bool>()))
    return bad_request("'echo' is not supported", "echo", "unsupported_parameter");
  return std::nullopt;
}

}  // namespace

std::optional<ApiError> parse_request(Endpoint endpoint, std::string_view body, ApiRequest& out) {
  out = ApiRequest{};
  out.endpoint = endpoint;
  if (json_depth(body, kMaxJsonDepth) > kMaxJsonDepth)
    return bad_request("the JSON body nests deeper than " + std::to_string(kMaxJsonDepth) + " levels", "",
                       "invalid_json");
  json j;
  try {
    j = json::parse(body);
  } catch (const json::parse_error& e) {
    return bad_request(std::string("the body is not valid JSON: ") + e.what(), "", "invalid_json");
  }
  if (!j.is_object()) return bad_request(std::string("the body must be a JSON object, got ") + type_name(j), "",
                                         "invalid_json");
  if (auto e = refuse_unsupported(j)) return e;
  const Fields f(j);
  if (const json* m = f.find("model")) {
    if (!m->is_string()) return wrong_type("model", "a string", *m);
    out.model = m->get<std::string>();
  }
  if (endpoint == Endpoint::kChat) {
    if (auto e = parse_messages(j, out.messages)) return e;
  } else {
    if (auto e = parse_prompt(j, out)) return e;
  }
  std::optional<bool> stream;
  if (auto e = f.boolean("stream", stream)) return e;
  out.stream = stream.value_or(false);
  if (const json* so = f.find("stream_options")) {
    if (!so->is_object()) return wrong_type("stream_options", "an object", *so);
    std::optional<bool> usage;
    if (auto e = Fields(*so).boolean("include_usage", usage)) {
      e->param = "stream_options.include_usage";
      return e;
    }
    out.include_usage = usage.value_or(false);
  }
  constexpr int64_t kMaxInt = std::numeric_limits<int32_t>::max();
  if (auto e = f.integer("max_tokens", 1, kMaxInt, out.max_tokens)) return e;
  if (!out.max_tokens)
    if (auto e = f.integer("max_completion_tokens", 1, kMaxInt, out.max_tokens)) return e;
  const double inf = std::numeric_limits<double>::infinity();
  SamplingOverrides& s = out.sampling;
  if (auto e = f.number("temperature", 0, inf, s.temperature)) return e;
  if (auto e = f.number("top_p", 0, 1, s.top_p)) return e;
  if (auto e = f.number("min_p", 0, 1, s.min_p)) return e;
  if (auto e = f.number("repeat_penalty", 0, inf, s.repeat_penalty)) return e;
  if (s.repeat_penalty && *s.repeat_penalty <= 0)
    return bad_request("'repeat_penalty' must be greater than 0", "repeat_penalty", "invalid_value");
  std::optional<int64_t> top_k;
  if (auto e = f.integer("top_k", 0, kMaxInt, top_k)) return e;
  if (top_k) s.top_k = int32_t(*top_k);
  if (auto e = f.integer("seed", std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max(), s.seed))
    return e;
  if (auto e = parse_stop(j, out.stop)) return e;
  if (auto e = f.boolean("ignore_eos", out.ignore_eos)) return e;

  if (endpoint == Endpoint::kChat) {
    std::optional<bool> logprobs;
    std::optional<int64_t> top;
    if (auto e = f.boolean("logprobs", logprobs)) return e;
    if (auto e = f.integer("top_logprobs", 0, 20, top)) return e;
    if (top && !logprobs.value_or(false))
      return bad_request("'top_logprobs' needs 'logprobs' set to true", "top_logprobs", "invalid_value");
    if (logprobs.value_or(false)) out.n_probs = int(top.value_or(0));
  } else {
    std::optional<int64_t> logprobs;
    if (auto e = f.integer("logprobs", 0, 20, logprobs)) return e;
    if (logprobs) out.n_probs = int(*logprobs);
  }
  return std::nullopt;
}

}  // namespace df::server
