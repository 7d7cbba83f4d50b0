// The engine's pieces against Jinja2 3.1.6 itself: each template below was rendered by Jinja2 (Hugging Face's
// settings: immutable sandbox, trim_blocks, lstrip_blocks, loopcontrols, json.dumps tojson) with the variables
// of reference_vars(), and the text after it is what Jinja2 printed.
#include <gtest/gtest.h>

#include "diskformer/chat/template.h"

namespace df::chat {
namespace {

struct Case {
  const char* group;
  const char* name;
  const char* source;
  const char* expected;
};

const Case kCases[] = {
    {"Whitespace", "trim_and_lstrip_blocks", R"J(<ul>
  {% for i in l %}
    <li>{{ i }}</li>
  {% endfor %}
</ul>
)J",
     R"J(<ul>
    <li>3</li>
    <li>1</li>
    <li>2</li>
</ul>)J"},
    {"Whitespace", "minus_strips_both_sides", R"J(a   {%- if true -%}   b   {%- endif -%}

  c {{- ' d ' -}}  e)J",
     R"J(abc d e)J"},
    {"Whitespace", "plus_keeps_indent", R"J(x
  {%+ if true %}y{% endif %}
  {% if true +%}
z{% endif %})J",
     R"J(x
  y
z)J"},
    {"Whitespace", "comments_trim_like_blocks", R"J(a
  {# note #}
b {#- tight -#}   c
{#- multi
line #}d)J",
     R"J(a
bcd)J"},
    {"Whitespace", "variable_tags_do_not_trim", R"J(a
  {{ 'v' }}
b
)J",
     R"J(a
  v
b)J"},
    {"Whitespace", "raw_block", R"J({% raw %}{{ x }}{% if %}{% endraw %}|{%- raw -%}  {{ y }}  {%- endraw -%}|)J",
     R"J({{ x }}{% if %}|{{ y }}|)J"},
    {"Whitespace", "one_trailing_newline_dropped", R"J(line

)J",
     R"J(line
)J"},
    {"Whitespace", "minus_strips_unicode_whitespace", R"J(a   {%- if true -%} 　b{% endif %}|x  {{- 1 -}}  y|q 
  {% if true %}r{% endif %})J",
     R"J(ab|x1y|q 
r)J"},
    {"Loops", "loop_variables", R"J({% for x in l %}{{ loop.index }}/{{ loop.index0 }}/{{ loop.revindex }}/{{ loop.revindex0 }}/{{ loop.first }}/{{ loop.last }}/{{ loop.length }}/{{ loop.previtem }}/{{ loop.nextitem }}/{{ loop.cycle('a','b') }};{% endfor %})J",
     R"J(1/0/3/2/True/False/3//1/a;2/1/2/1/False/False/3/3/2/b;3/2/1/0/False/True/3/1//a;)J"},
    {"Loops", "filtered_loop_and_else", R"J({% for x in l if x > 1 %}{{ loop.index }}:{{ x }}/{{ loop.length }} {% else %}none{% endfor %}|{% for x in [] %}x{% else %}empty{% endfor %})J",
     R"J(1:3/2 2:2/2 |empty)J"},
    {"Loops", "unpacking", R"J({% for k, v in d.items() %}{{ k }}={{ v }},{% endfor %}|{% for k, v in d|dictsort %}{{ k }}{{ v }}{% endfor %}|{% for a, b in [[1,2],[3,4]] %}{{ a+b }}{% endfor %})J",
     R"J(b=2,a=1,C=3,|a1b2C3|37)J"},
    {"Loops", "break_continue", R"J({% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 5 %}{% break %}{% endif %}{{ x }}{% endfor %})J",
     R"J(0134)J"},
    {"Loops", "set_in_loop_is_local", R"J({% set x = 1 %}{% for i in range(3) %}{% set x = x + i %}{{ x }}{% endfor %}|{{ x }}|{% set ns = namespace(c=0) %}{% for i in range(4) %}{% set ns.c = ns.c + i %}{% endfor %}{{ ns.c }})J",
     R"J(123|1|6)J"},
    {"Loops", "reverse_slice", R"J({% for m in l[::-1] %}{{ m }}{% endfor %}|{{ s[::-1] }}|{{ u[::-1] }}|{{ l[1:] }}|{{ s[-5:] }}|{{ u[2:4] }})J",
     R"J(213|dlroW olleH|🚀 édöcïnü|[1, 2]|World|ïc)J"},
    {"Loops", "dict_iteration_order", R"J({% for k in d %}{{ k }}{% endfor %}|{{ d|list }})J",
     R"J(baC|['b', 'a', 'C'])J"},
    {"Filters", "string_filters", R"J({{ s|upper }}|{{ s|lower }}|{{ 'hello-world foo(bar'|title }}|{{ 'aBC'|capitalize }}|{{ '  x  '|trim }}|{{ 'xxaxx'|trim('x') }}|{{ s|replace('o','0') }}|{{ s|replace('o','0',1) }}|{{ u|length }}|{{ u|upper }})J",
     R"J(HELLO WORLD|hello world|Hello-World Foo(Bar|Abc|x|a|Hell0 W0rld|Hell0 World|9|ÜNÏCÖDÉ 🚀)J"},
    {"Filters", "unicode_case", R"J({{ 'αβγ Жук ünï straße'|upper }} {{ 'ΑΒΓ ЖУК ÜNÏ'|lower }} {{ 'élan vital ωmega'|title }} {{ 'élan vital'.title() }} {{ 'ÉLAN'|capitalize }} {{ 'Ωmega' is upper }} {{ 'ωmega'.islower() }} {{ 'ÄÖ'.isupper() }})J",
     R"J(ΑΒΓ ЖУК ÜNÏ STRASSE αβγ жук ünï Élan Vital Ωmega Élan Vital Élan False True True)J"},
    {"Filters", "sequence_filters", R"J({{ l|first }}{{ l|last }}|{{ l|sort }}|{{ l|sort(reverse=true) }}|{{ l|reverse|list }}|{{ l|join(', ') }}|{{ l|min }}{{ l|max }}{{ l|sum }}|{{ ['b','A','a','B']|unique|list }}|{{ ['b','A','a','B']|sort }}|{{ l|length }}{{ l|count }})J",
     R"J(32|[1, 2, 3]|[3, 2, 1]|[2, 1, 3]|3, 1, 2|136|['b', 'A']|['A', 'a', 'b', 'B']|33)J"},
    {"Filters", "dict_filters", R"J({{ d|dictsort }}|{{ d|dictsort(true) }}|{{ d|dictsort(by='value', reverse=true) }}|{{ d|items|list }}|{{ d|length }})J",
     R"J([('a', 1), ('b', 2), ('C', 3)]|[('C', 3), ('a', 1), ('b', 2)]|[('C', 3), ('b', 2), ('a', 1)]|[('b', 2), ('a', 1), ('C', 3)]|3)J"},
    {"Filters", "select_and_map", R"J({{ users|selectattr('age','equalto',30)|map(attribute='name')|list }}|{{ users|rejectattr('age','eq',30)|map(attribute='name')|join }}|{{ l|select('odd')|list }}|{{ l|reject('even')|list }}|{{ [0,1,'',none,'x']|select|list }}|{{ users|sort(attribute='name')|map(attribute='name')|join(',') }}|{{ ['a','b']|map('upper')|list }}|{{ users|map(attribute='zz', default='?')|list }})J",
     R"J(['bob', 'carl']|Alice|[3, 1]|[3, 1]|[1, 'x']|Alice,bob,carl|['A', 'B']|['?', '?', '?'])J"},
    {"Filters", "numbers", R"J({{ 3.7|int }} {{ '42'|int }} {{ '4.9'|int }} {{ 'x'|int }} {{ 'x'|int(5) }} {{ '3.5'|float }} {{ 3|float }} {{ -3|abs }} {{ 2.567|round(2) }} {{ 2.5|round }} {{ 3.5|round }} {{ 3|round }} {{ 2.1|round(0,'ceil') }})J",
     R"J(3 42 4 0 5 3.5 3.0 3 2.57 2.0 4.0 3 3.0)J"},
    {"Filters", "default_and_undefined", R"J({{ n|default('dflt') }}|{{ missing|default('dflt') }}|{{ missing|d('x') }}|{{ ''|default('empty', true) }}|{{ missing }}|{{ n }}|{{ missing is defined }}{{ n is none }}{{ n is defined }}|{{ missing|length }}|{{ missing|list }})J",
     R"J(None|dflt|x|empty||None|FalseTrueTrue|0|[])J"},
    {"Filters", "indent", R"J([{{ 'a\nb\n\nc'|indent(2) }}]|[{{ 'a\nb'|indent(2, true) }}]|[{{ 'a\n\nb'|indent(blank=true) }}]|[{{ 'x'|indent('> ', first=true) }}])J",
     R"J([a
  b

  c]|[  a
  b]|[a
    
    b]|[> x])J"},
    {"Filters", "escape_and_string", R"J({{ 'a<b>&"\''|e }}|{{ l|string }}|{{ d|string }}|{{ (1,)|string }}|{{ [none, true, 1.0, 'it\'s']|string }})J",
     R"J(a&lt;b&gt;&amp;&#34;&#39;|[3, 1, 2]|{'b': 2, 'a': 1, 'C': 3}|(1,)|[None, True, 1.0, "it's"])J"},
    {"Filters", "tojson", R"J({{ s|tojson }} {{ d|tojson }} {{ l|tojson(indent=2) }} {{ u|tojson }} {{ u|tojson(ensure_ascii=True) }} {{ {'a':{'b':[]}, 'c':{}}|tojson(indent=4) }} {{ d|tojson(sort_keys=true) }} {{ "a\"b\\c\n\t\x01"|tojson }} {{ 1.0|tojson }} {{ (1,2)|tojson }} {{ none|tojson }})J",
     R"J("Hello World" {"b": 2, "a": 1, "C": 3} [
  3,
  1,
  2
] "ünïcödé 🚀" "\u00fcn\u00efc\u00f6d\u00e9 \ud83d\ude80" {
    "a": {
        "b": []
    },
    "c": {}
} {"C": 3, "a": 1, "b": 2} "a\"b\\c\n\t\u0001" 1.0 [1, 2] null)J"},
    {"Expressions", "arithmetic", R"J({{ 1 + 2 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 7 % -3 }} {{ 7 / 2 }} {{ 2 ** 10 }} {{ 1.5 * 2 }} {{ 1e20 }} {{ 1e-5 }} {{ 0.1 + 0.2 }} {{ 'ab' * 3 }} {{ [1,2] + [3] }} {{ -2 ** 2 }} {{ 'a' ~ 1 ~ none ~ true }})J",
     R"J(3 3 -4 2 -2 3.5 1024 3.0 1e+20 1e-05 0.30000000000000004 ababab [1, 2, 3] 4 a1NoneTrue)J"},
    {"Expressions", "comparisons_and_logic", R"J({{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 'a' < 'b' }} {{ 1 == 1.0 }} {{ true == 1 }} {{ 'a' in 'abc' }} {{ 'z' not in 'abc' }} {{ 2 in l }} {{ 'a' in d }} {{ n or 'alt' }} {{ 0 and 1 }} {{ not n }} {{ 'y' if n else 'n' }} {{ 'x' if n }}|)J",
     R"J(True False True True True True True True True alt 0 True n |)J"},
    {"Expressions", "tests", R"J({{ 5 is odd }} {{ 4 is even }} {{ 9 is divisibleby 3 }} {{ s is string }} {{ true is number }} {{ 1 is integer }} {{ 1.0 is float }} {{ d is mapping }} {{ l is sequence }} {{ missing is iterable }} {{ n is iterable }} {{ 3 is in l }} {{ 'abc' is lower }} {{ n is false }} {{ 3 is gt 2 }} {{ d is not mapping }})J",
     R"J(True True True True True True True True True True False True True False True False)J"},
    {"Expressions", "string_methods", R"J({{ s.startswith('He') }} {{ s.endswith(('x','ld')) }} {{ s.split() }} {{ s.split('o', 1) }} {{ s.rsplit('o', 1) }} {{ '  a  b  '.split(none, 1) }} {{ '--x--'.strip('-') }} {{ s.find('o') }} {{ s.rfind('o') }} {{ s.count('l') }} {{ s.replace('l','L',2) }} {{ "they're".title() }} {{ '{} and {:>4}'.format(1, 'x') }} {{ '%s-%05.1f' % ('a', 2.25) }})J",
     R"J(True True ['Hello', 'World'] ['Hell', ' World'] ['Hello W', 'rld'] ['a', 'b  '] x 4 7 3 HeLLo World They'Re 1 and    x a-002.2)J"},
    {"Expressions", "dict_methods_and_access", R"J({{ d.a }} {{ d['b'] }} {{ d.get('z', 'dz') }} {{ d.get('z') }} {{ d.keys()|list }} {{ d.values()|list }} {{ users[0].name }} {{ l[10] }}|{{ d.items is callable }})J",
     R"J(1 2 dz None ['b', 'a', 'C'] [2, 1, 3] bob |True)J"},
    {"Expressions", "macros_and_call", R"J({% macro greet(name, greeting='Hello', punct='!') %}{{ greeting }}, {{ name }}{{ punct }}{% endmacro %}{{ greet('bob') }}|{{ greet(name='x', punct='?') }}|{{ greet() }}|{% macro wrap(tag) %}<{{ tag }}>{{ caller() }}</{{ tag }}>{% endmacro %}{% call wrap('b') %}in{% endcall %}|{% macro li(items) %}{% for i in items %}{{ caller(i) }}{% endfor %}{% endmacro %}{% call(x) li([1,2]) %}[{{ x }}]{% endcall %})J",
     R"J(Hello, bob!|Hello, x?|Hello, !|<b>in</b>|[1][2])J"},
    {"Expressions", "block_set_and_filter_block", R"J({% set blk %}  some {{ s }}  {% endset %}[{{ blk }}]{% set blk2 | upper | trim %}  inner  {% endset %}[{{ blk2 }}]{% filter upper %}shout{% endfilter %})J",
     R"J([  some Hello World  ][INNER]SHOUT)J"},
    {"Expressions", "namespace_and_globals", R"J({% set ns = namespace(a=1, items=[]) %}{% set ns.a = ns.a + 1 %}{{ ns.a }}|{{ namespace({'k': 5}).k }}|{{ dict(x=1) }}|{{ range(3)|list }}{{ range(5,0,-2)|list }}|{% set a, b = 1, 2 %}{{ a }}{{ b }})J",
     R"J(2|5|{'x': 1}|[0, 1, 2][5, 3, 1]|12)J"},
    {"Expressions", "string_literals", R"J({{ "multi
line" }}|{{ 'it' 's' }}|{{ "tab\there" }}|{{ '\u00e9\x41' }}|{{ 'q\'s' }})J",
     R"J(multi
line|its|tab	here|éA|q's)J"},
};

Value reference_vars() {
  return from_json(nlohmann::ordered_json::parse(R"({
    "d": {"b": 2, "a": 1, "C": 3}, "l": [3, 1, 2], "s": "Hello World", "n": null, "u": "ünïcödé 🚀",
    "users": [{"name": "bob", "age": 30}, {"name": "Alice", "age": 25}, {"name": "carl", "age": 30}]})")).value();
}

class JinjaReference : public ::testing::TestWithParam<Case> {};

TEST_P(JinjaReference, RendersAsJinja2) {
  const Case& c = GetParam();
  auto tpl = Template::parse(c.source, c.name);
  ASSERT_TRUE(tpl.ok()) << tpl.error().message;
  auto out = tpl->render(reference_vars());
  ASSERT_TRUE(out.ok()) << out.error().message;
  EXPECT_EQ(*out, c.expected);
}

INSTANTIATE_TEST_SUITE_P(Chat, JinjaReference, ::testing::ValuesIn(kCases), [](const auto& info) {
  return std::string(info.param.group) + "_" + info.param.name;
});

}  // namespace
}  // namespace df::chat
