// Errors (where and why), options (clock, sandbox), and the input conversions of the template engine.
#include <gtest/gtest.h>

#include "diskformer/chat/template.h"

namespace df::chat {
namespace {

std::string parse_error(const std::string& src) {
  auto t = Template::parse(src, "t.jinja");
  EXPECT_FALSE(t.ok()) << "parsed: " << src;
  return t.ok() ? "" : t.error().message;
}

Result<std::string> render(const std::string& src, const std::string& vars_json = "{}", RenderOptions opt = {}) {
  auto t = Template::parse(src, "t.jinja");
  if (!t.ok()) return t.take_error();
  auto vars = from_json(nlohmann::ordered_json::parse(vars_json));
  if (!vars.ok()) return vars.take_error();
  return t->render(*vars, opt);
}

std::string render_ok(const std::string& src, const std::string& vars_json = "{}", RenderOptions opt = {}) {
  auto r = render(src, vars_json, opt);
  EXPECT_TRUE(r.ok()) << r.error().message;
  return r.ok() ? *r : "";
}

std::string render_error(const std::string& src, const std::string& vars_json = "{}", RenderOptions opt = {}) {
  auto r = render(src, vars_json, opt);
  EXPECT_FALSE(r.ok()) << "rendered: " << *r;
  return r.ok() ? "" : r.error().message;
}

TEST(ChatErrors, SyntaxErrorsNameLineAndColumn) {
  EXPECT_EQ(parse_error("line1\n{% if x %}\n  {{ 1 + }}\n{% endif %}"),
            "t.jinja:3:10: template syntax error: unexpected end of print statement");
  EXPECT_EQ(parse_error("x\n{% foo %}"), "t.jinja:2:4: template syntax error: encountered unknown tag 'foo'");
  EXPECT_EQ(parse_error("{{ 1 $ 2 }}"), "t.jinja:1:6: template syntax error: unexpected char '$'");
  EXPECT_EQ(parse_error("ab\n  {{ 'abc }}"), "t.jinja:2:6: template syntax error: unterminated string");
  EXPECT_EQ(parse_error("\n\n{{ x | nope }}"), "t.jinja:3:8: template syntax error: no filter named 'nope'");
  EXPECT_EQ(parse_error("{{ x is nope }}"), "t.jinja:1:9: template syntax error: no test named 'nope'");
  EXPECT_EQ(parse_error("{% break %}"), "t.jinja:1:4: template syntax error: 'break' outside of a for loop");
  EXPECT_EQ(parse_error("{# open"), "t.jinja:1:1: template syntax error: missing end of comment tag");
  std::string unclosed = parse_error("a\n{% for x in l %}\nb");
  EXPECT_NE(unclosed.find("t.jinja:3:"), std::string::npos) << unclosed;
  EXPECT_NE(unclosed.find("'endfor'"), std::string::npos) << unclosed;
  EXPECT_NE(unclosed.find("opened at line 2"), std::string::npos) << unclosed;
  std::string stray = parse_error("{% endif %}");
  EXPECT_NE(stray.find("unknown tag 'endif'"), std::string::npos) << stray;
}

TEST(ChatErrors, HostileNestingIsRefusedNotACrash) {
  auto repeat = [](const std::string& s, int n) {
    std::string out;
    for (int k = 0; k < n; ++k) out += s;
    return out;
  };
  EXPECT_NE(parse_error("{{ " + repeat("(", 5000) + "1" + repeat(")", 5000) + " }}").find("nested too deeply"),
            std::string::npos);
  EXPECT_NE(parse_error(repeat("{% if true %}", 5000)).find("nested too deeply"), std::string::npos);
  EXPECT_NE(parse_error("{{ " + repeat("not ", 5000) + "1 }}").find("nested too deeply"), std::string::npos);
  EXPECT_NE(parse_error("{{ 1" + repeat(" + 1", 100000) + " }}").find("expression too long"), std::string::npos);
  EXPECT_NE(parse_error("{{ x" + repeat("|upper", 100000) + " }}").find("expression too long"), std::string::npos);
  // Realistic depth still works.
  EXPECT_EQ(render_ok("{{ " + repeat("(", 60) + "1" + repeat(")", 60) + " }}|{{ 1" + repeat(" + 1", 999) + " }}"),
            "1|1000");
  EXPECT_EQ(render_error("{{ 2 ** 63 }}"), "t.jinja:1: integer overflow (integers are limited to 64 bits here)");
  EXPECT_EQ(render_error("{{ 9223372036854775807 + 1 }}"),
            "t.jinja:1: integer overflow (integers are limited to 64 bits here)");
  EXPECT_EQ(render_ok("{{ 2 ** 62 }} {{ (-1) ** 5 }} {{ [1, 2, 3][1::9223372036854775807] }}"),
            "4611686018427387904 -1 [2]");
  EXPECT_NE(render_error("{{ 'x'|center(1000000000) }}").find("too large"), std::string::npos);
  EXPECT_EQ(render_error("{{ range(100001)|length }}"),
            "t.jinja:1: Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
}

TEST(ChatErrors, RaiseExceptionKeepsTheTemplatesMessageAndLine) {
  EXPECT_EQ(render_error("a\nb\n{{ raise_exception('bad ' ~ 1) }}"), "t.jinja:3: bad 1");
  EXPECT_EQ(render_error("{% macro m() %}\n{{ raise_exception('in macro') }}\n{% endmacro %}\n{{ m() }}"),
            "t.jinja:2: in macro");
}

TEST(ChatErrors, RuntimeErrorsAsJinja) {
  EXPECT_EQ(render_error("{{ missing.attr }}"), "t.jinja:1: 'missing' is undefined");
  EXPECT_EQ(render_error("{{ x.a.b }}", R"({"x": {}})"), "t.jinja:1: 'dict object' has no attribute 'a'");
  EXPECT_EQ(render_error("{{ 1 + 'a' }}"), "t.jinja:1: unsupported operand type(s) for +: 'int' and 'str'");
  EXPECT_EQ(render_error("{{ 'a' + 1 }}"), "t.jinja:1: can only concatenate str (not \"int\") to str");
  EXPECT_EQ(render_error("{{ 1 // 0 }}"), "t.jinja:1: integer division or modulo by zero");
  EXPECT_EQ(render_error("{% for x in 5 %}{% endfor %}"), "t.jinja:1: 'int' object is not iterable");
  EXPECT_EQ(render_error("{{ {'a': missing}|tojson }}"), "t.jinja:1: Object of type Undefined is not JSON serializable");
  EXPECT_EQ(render_error("{% set x = 1 %}{% set x.a = 2 %}"), "t.jinja:1: cannot assign attribute on non-namespace object");
  std::string deep = render_error("{% macro r(n) %}{{ r(n + 1) }}{% endmacro %}{{ r(0) }}");
  EXPECT_NE(deep.find("nested deeper"), std::string::npos) << deep;
}

TEST(ChatErrors, UndefinedIsQuietUntilUsed) {
  EXPECT_EQ(render_ok("[{{ missing }}][{{ missing|default('d') }}][{{ x.nope }}][{{ l[9] }}]", R"({"x": {}, "l": []})"),
            "[][d][][]");
  EXPECT_EQ(render_ok("{% if missing %}y{% else %}n{% endif %}{% for a in missing %}x{% endfor %}"), "n");
}

TEST(ChatOptions, ImmutableSandboxRefusesMutationUnlessAllowed) {
  const std::string src =
      "{% set ns = namespace(ids=[]) %}{% set _ = ns.ids.append(1) %}{% set _ = ns.ids.append(2) %}"
      "{{ ns.ids }}{{ ns.ids.pop(0) }}{{ ns.ids }}{% set dd = {} %}{% set _ = dd.update({'a': 1}) %}{{ dd }}";
  EXPECT_EQ(render_error(src), "t.jinja:1: access to attribute 'append' of 'list' object is unsafe.");
  RenderOptions mutable_opt;
  mutable_opt.allow_mutation = true;
  // What Jinja2's (mutable) SandboxedEnvironment prints.
  EXPECT_EQ(render_ok(src, "{}", mutable_opt), "[1, 2]1[2]{'a': 1}");
}

TEST(ChatOptions, StrftimeNowUsesTheInjectedClock) {
  RenderOptions opt;
  std::tm tm{};
  tm.tm_year = 2026 - 1900;
  tm.tm_mon = 10;
  tm.tm_mday = 29;
  tm.tm_hour = 12;
  tm.tm_wday = 0;
  opt.now = tm;
  EXPECT_EQ(render_ok("{{ strftime_now('%Y-%m-%d %H:%M') }}|{{ strftime_now('%d %b %Y') }}|{{ strftime_now('%A') }}",
                      "{}", opt),
            "2026-11-29 12:00|29 Nov 2026|Sunday");
  // The real clock otherwise: this year's four digits at least.
  EXPECT_EQ(render_ok("{{ strftime_now('%Y')|length }}"), "4");
}

TEST(ChatInputs, NewlinesNormalizedAndOneTrailingNewlineDropped) {
  EXPECT_EQ(render_ok("a\r\n{% if true %}\r\nb\r\n{% endif %}\r\nc\r\n"), "a\nb\nc");
  EXPECT_EQ(render_ok("x\n\n"), "x\n");
}

TEST(ChatInputs, JsonKeepsKeyOrderAndNumberKinds) {
  Value v = from_json(nlohmann::ordered_json::parse(R"({"z": 1, "a": 2.0, "m": [true, null, "s"]})")).value();
  JsonOptions o;
  std::string out;
  ASSERT_TRUE(to_json(v, o, out));
  EXPECT_EQ(out, R"({"z": 1, "a": 2.0, "m": [true, null, "s"]})");
  EXPECT_EQ(to_str(v), "{'z': 1, 'a': 2.0, 'm': [True, None, 's']}");
}

// "[[[...0...]]]" nested `levels` deep: a conversation no one writes, but a file anyone can.
std::string nested_json(size_t levels) { return std::string(levels, '[') + "0" + std::string(levels, ']'); }

TEST(ChatInputs, DeepJsonIsRefusedNotOverflowingTheStack) {
  const auto deep = nlohmann::ordered_json::parse(nested_json(20000));
  EXPECT_EQ(json_depth(deep), 20000u);
  auto v = from_json(deep);
  ASSERT_FALSE(v.ok());
  EXPECT_NE(v.error().message.find("nested deeper than 512 levels"), std::string::npos) << v.error().message;

  // The limit itself converts; one more level does not.
  EXPECT_TRUE(from_json(nlohmann::ordered_json::parse(nested_json(kMaxJsonDepth))).ok());
  EXPECT_FALSE(from_json(nlohmann::ordered_json::parse(nested_json(kMaxJsonDepth + 1))).ok());
  EXPECT_EQ(json_depth(nlohmann::ordered_json::parse(R"({"a": [1, {"b": []}], "c": 2})")), 4u);
  EXPECT_EQ(json_depth(nlohmann::ordered_json(7)), 0u);

  // Through render_chat, the error names what held it.
  auto tpl = Template::parse("{{ messages|length }}", "t");
  ASSERT_TRUE(tpl.ok());
  ChatInput in;
  in.messages = nlohmann::ordered_json::array();
  in.extra = nlohmann::ordered_json::object();
  in.extra["tools"] = deep;
  auto out = render_chat(*tpl, in);
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.error().message.find("tools: JSON nested deeper"), std::string::npos) << out.error().message;
}

TEST(ChatInputs, FloatReprMatchesPython) {
  EXPECT_EQ(float_repr(1.0), "1.0");
  EXPECT_EQ(float_repr(0.1 + 0.2), "0.30000000000000004");
  EXPECT_EQ(float_repr(1e16), "1e+16");
  EXPECT_EQ(float_repr(1e15), "1000000000000000.0");
  EXPECT_EQ(float_repr(0.0001), "0.0001");
  EXPECT_EQ(float_repr(0.00001), "1e-05");
  EXPECT_EQ(float_repr(-2.5e-300), "-2.5e-300");
  EXPECT_EQ(float_repr(123456789.123456789), "123456789.12345679");
}

TEST(ChatInputs, RenderChatSetsTheStandardVariables) {
  auto tpl = Template::parse(
      "{{ bos_token }}{% for m in messages %}[{{ m.role }}:{{ m.content }}]{% endfor %}"
      "{{ tools is none }}{{ add_generation_prompt }}{{ eos_token }}{{ enable_thinking }}",
      "t");
  ASSERT_TRUE(tpl.ok());
  ChatInput in;
  in.messages = nlohmann::ordered_json::parse(R"([{"role": "user", "content": "hi"}])");
  in.bos_token = "<s>";
  in.eos_token = "</s>";
  in.add_generation_prompt = false;
  in.extra = nlohmann::ordered_json::parse(R"({"enable_thinking": false})");
  auto out = render_chat(*tpl, in);
  ASSERT_TRUE(out.ok()) << out.error().message;
  EXPECT_EQ(*out, "<s>[user:hi]TrueFalse</s>False");
}

}  // namespace
}  // namespace df::chat
