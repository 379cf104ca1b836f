#include "common/tokenizer/jinja/interpreter.h"

#include <string>

#include "common/tokenizer/jinja/template.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tandem::tokenizer::jinja {
namespace {

using ::testing::HasSubstr;

// The variables every case renders with.
ValueDict Variables() {
  auto message = [](const char* role, const char* content) {
    return Value::Dict({{"role", Value::String(role)}, {"content", Value::String(content)}});
  };
  return {
      {"messages", Value::List({message("system", "Be brief."), message("user", " Hi there "),
                                message("assistant", "Hello!")})},
      {"d", Value::Dict({{"b", Value::Int(2)},
                         {"a", Value::List({Value::Int(1), Value::String("x"), Value::None(),
                                            Value::Bool(true), Value::Float(1.5)})}})},
      {"s", Value::String("  Hello World  ")},
      {"n", Value::Int(7)},
      {"f", Value::Float(2.5)},
      {"empty", Value::List({})},
      {"t", Value::Bool(true)},
  };
}

absl::StatusOr<std::string> Render(std::string_view source, const Limits& limits = {}) {
  auto tpl = Template::Parse(source, limits);
  if (!tpl.ok()) return tpl.status();
  return tpl->Render(Variables(), limits);
}

struct Case {
  const char* source;
  const char* expected;
};

// Each expected string is Python jinja2's rendering of the same source with the same
// variables, in the environment transformers uses (tests/reference/make_chat_golden.py's
// make_env()).
const Case kCases[] = {
    {"{{ 1 }}|{{ -3 }}|{{ 1.0 }}|{{ 0.1 + 0.2 }}|{{ 1e20 }}|{{ 2.5e-7 }}|{{ 1_000 }}|{{ true }}|{{ "
     "False }}|{{ none }}|{{ 'a' 'b' }}",
     "1|-3|1.0|0.30000000000000004|1e+20|2.5e-07|1000|True|False|None|ab"},
    {"{{ [1, 'x', none, true, 1.5] }}|{{ {'k': 'v', 'n': [1]} }}|{{ (1, 2) | list }}|{{ [] }}|{{ "
     "{} }}",
     "[1, 'x', None, True, 1.5]|{'k': 'v', 'n': [1]}|[1, 2]|[]|{}"},
    {"{{ \"it's\" }}|{{ ['it\\'s', \"q\\\"\", 'a\\nb\\\\'] }}",
     "it's|[\"it's\", 'q\"', 'a\\nb\\\\']"},
    {"{{ 'a\\tb\\x41\\u00e9\\U0001F600\\101\\d' }}", "a\tbAé😀A\\d"},
    {"{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7 % -3 }} {{ 7 / 2 }} {{ 4 / 2 }} {{ "
     "2 ** 10 }} {{ 2 ** -1 }} {{ -7.5 // 2 }} {{ 7.5 % -2 }} {{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ "
     "-2 ** 2 }}",
     "3 -4 1 2 -2 3.5 2.0 1024 0.5 -4.0 -0.5 7 9 4"},
    {"{{ '{}-{}'.format(1, 'x') }}|{{ '{1}{0}{{x}}'.format('a', n) }}|{{ '<{k}>'.format(k=none) "
     "}}|{{ 'é{}'.format([1, 'b']) }}",
     "1-x|7a{x}|<None>|é[1, 'b']"},
    {"{{ [3, 1, 2] | min }}|{{ ['b', 'A', 'a'] | max }}|{{ ['b', 'A', 'a'] | min }}|{{ ['b', 'A', "
     "'a'] | min(case_sensitive=true) }}|{{ (messages | min(attribute='role')).role }}|{{ [] | min "
     "}}|{{ [1.5, 2] | max }}",
     "1|b|A|A|assistant||2"},
    {"{{ 'é😀\"' | tojson(ensure_ascii=true) }}|{{ {'ü': ['ß']} | tojson(ensure_ascii=true) }}",
     "\"\\u00e9\\ud83d\\ude00\\\"\"|{\"\\u00fc\": [\"\\u00df\"]}"},
    {"{% set d = {0: 'z', 512: 128, none: 'n', true: 't', 'k': 1.5} %}{{ d[512] }}|{{ d[0] "
     "}}|{{ d[none] }}|{{ d['k'] }}|{{ d }}|{{ d | tojson }}|{{ 512 in d }}|{{ '512' in d }}|{{ "
     "d.get(0) }}|{% for k, v in {3: 'c', 1: 'a'} | dictsort %}{{ k + 1 }}{{ v }}{% endfor %}|{{ "
     "d.keys() | list }}|{{ d[2.0] }}",
     "128|z|n|1.5|{0: 'z', 512: 128, None: 'n', True: 't', 'k': 1.5}|{\"0\": \"z\", \"512\": "
     "128, \"null\": \"n\", \"true\": \"t\", \"k\": 1.5}|True|False|z|2a4c|[0, 512, None, "
     "True, 'k']|"},
    {"{{ 'yes' if empty | select else 'no' }}|{{ messages | map(attribute='role') | list }}|{{ "
     "messages | map(attribute='role') | first }}|{{ messages | selectattr('role', 'equalto', "
     "'user') | list | length }}|{{ (messages | map(attribute='role'))[0] }}|{{ messages | "
     "map(attribute='role') is sequence }}|{{ messages | map(attribute='role') is iterable }}|{{ "
     "messages | map(attribute='role') | join(',') }}|{{ d | items | list }}|{{ 'yes' if {} | "
     "items else 'no' }}",
     "yes|['system', 'user', 'assistant']|system|1||False|True|system,user,assistant|[('b', 2), "
     "('a', [1, 'x', None, True, 1.5])]|yes"},
    {"{{ \"<b>\"|safe + '\"x\" & <y>' }}|{{ 'a<' + \"<i>\"|safe }}|{{ (\"<\"|safe + \"'\") + \"&\" "
     "}}|{{ \"<\"|safe ~ \"<\" }}|{{ \"<a>\" | e }}|{{ (\"<a>\" | e) | e }}|{{ 5 | safe }}|{{ "
     "\"x\"|safe == \"x\" }}",
     "<b>&#34;x&#34; &amp; &lt;y&gt;|a&lt;<i>|<&#39;&amp;|<<|&lt;a&gt;|&lt;a&gt;|5|True"},
    {"{{ none | selectattr('a') | list }}|{{ none | map('upper') | list }}|{{ '' | select | list "
     "}}|{{ undefined_var | reject | list }}",
     "[]|[]|[]|[]"},
    {"{{ 'ab' * 3 }}|{{ 3 * 'ab' }}|{{ [1] * 2 }}|{{ [1] + [2, 3] }}|{{ 'a' + 'b' }}|{{ 1 + true "
     "}}|{{ 'x' * 0 }}",
     "ababab|ababab|[1, 1]|[1, 2, 3]|ab|2|"},
    {"{{ 'a' ~ 1 ~ none ~ true ~ [1] ~ undefined_var ~ 2.0 ~ (1, 'b') ~ (1,) }}|{{ (1 + 2) ~ 3 }}",
     "a1NoneTrue[1]2.0(1, 'b')(1,)|33"},
    {"{{ 1 == 1.0 }} {{ 1 == true }} {{ 'a' < 'b' }} {{ [1, 2] < [1, 3] }} {{ 2 >= 2 }} {{ 'a' != "
     "'a' }} {{ none == none }} {{ {'a': 1, 'b': 2} == {'b': 2, 'a': 1} }}",
     "True True True True True False True True"},
    {"{{ 'ell' in 'hello' }} {{ 2 in [1, 2] }} {{ 'a' in {'a': 1} }} {{ 'z' not in 'abc' }} {{ 3 "
     "not in [1] }} {{ 'x' in undefined_var }}",
     "True True True True True False"},
    {"{{ 0 or 'fallback' }}|{{ 'first' or 'second' }}|{{ 1 and 'both' }}|{{ [] and 'no' }}|{{ not "
     "[] }}|{{ not 'x' }}|{{ none or none }}",
     "fallback|first|both|[]|True|False|None"},
    {"{{ 'yes' if t else 'no' }}|{{ 'yes' if empty else 'no' }}|{{ 'only' if false }}|{{ 1 if 0 "
     "else 2 if 0 else 3 }}",
     "yes|no||3"},
    {"{{ x is defined }} {{ n is defined }} {{ x is undefined }} {{ none is none }} {{ n is not "
     "none }} {{ s is string }} {{ n is string }} {{ d is mapping }} {{ empty is mapping }}",
     "False True True True True True False True False"},
    {"{{ d is iterable }} {{ s is iterable }} {{ n is iterable }} {{ x is iterable }} {{ empty is "
     "sequence }} {{ n is number }} {{ f is number }} {{ t is number }} {{ n is integer }} {{ f is "
     "float }} {{ t is boolean }}",
     "True True False True True True True True True True True"},
    {"{{ t is true }} {{ 1 is true }} {{ false is false }} {{ n is odd }} {{ n is even }} {{ 9 is "
     "divisibleby 3 }} {{ 9 is divisibleby(4) }} {{ 'a' is eq 'a' }} {{ 2 is gt 1 }} {{ 'abc' is "
     "lower }} {{ 'A' is upper }} {{ n is in [7] }} {{ none is sameas none }}",
     "True False True True False True False True True True True True True"},
    {"[{{ s | trim }}]|[{{ s.strip() }}]|[{{ s.lstrip() }}]|[{{ s.rstrip() }}]|[{{ 'xxhixx' | "
     "trim('x') }}]|[{{ '--a--'.strip('-') }}]",
     "[Hello World]|[Hello World]|[Hello World  ]|[  Hello World]|[hi]|[a]"},
    {"{{ s | length }} {{ d | length }} {{ 'héllo' | length }} {{ x | length }} {{ empty | count "
     "}} {{ s | upper }} {{ s | lower }} {{ 'hello world' | capitalize }} {{ 'hello wORLD' | title "
     "}} {{ \"they're 1st\".title() }}",
     "15 2 5 0 0   HELLO WORLD     hello world   Hello world Hello World They'Re 1St"},
    {"{{ d | tojson }}|{{ 'é\"\\n\\u0001<' | tojson }}|{{ [1.5, none, true, {}] | tojson }}|{{ d | "
     "tojson(indent=2) }}|{{ [] | tojson(indent=2) }}|{{ {'a': []} | tojson(indent=4) }}",
     "{\"b\": 2, \"a\": [1, \"x\", null, true, 1.5]}|\"é\\\"\\n\\u0001<\"|[1.5, null, true, "
     "{}]|{\n  \"b\": 2,\n  \"a\": [\n    1,\n    \"x\",\n    null,\n    true,\n    1.5\n  "
     "]\n}|[]|{\n    \"a\": []\n}"},
    {"{{ [1, 2, 3] | join(', ') }}|{{ ['a', 'b'] | join }}|{{ messages | map(attribute='role') | "
     "join('/') }}|{{ messages | join(',', attribute='role') }}",
     "1, 2, 3|ab|system/user/assistant|system,user,assistant"},
    {"{{ x | default('dflt') }}|{{ '' | default('dflt') }}|{{ '' | default('dflt', true) }}|{{ "
     "none | d('n') }}|{{ n | default(0) }}",
     "dflt||dflt|None|7"},
    {"{{ [3, 4] | first }}{{ [3, 4] | last }}{{ 'abc' | first }}{{ 'abc' | last }}{{ d | first "
     "}}|{{ [] | first }}|",
     "34acb||"},
    {"{{ 'a-b-a' | replace('a', 'x') }}|{{ 'a-b-a'.replace('a', 'x', 1) }}|{{ 'ab' | replace('', "
     "'.') }}|{{ 'aaa'.replace('aa', 'b') }}",
     "x-b-x|x-b-a|.a.b.|ba"},
    {"{{ d | items | list }}|{{ d.items() | list }}|{{ d.keys() | list }}|{{ d.values() | list "
     "}}|{{ d.get('b') }}|{{ d.get('zz') }}|{{ d.get('zz', 'dv') }}|{{ 'ab' | list }}|{{ d | list "
     "}}",
     "[('b', 2), ('a', [1, 'x', None, True, 1.5])]|[('b', 2), ('a', [1, 'x', None, True, "
     "1.5])]|['b', 'a']|[2, [1, 'x', None, True, 1.5]]|2|None|dv|['a', 'b']|['b', 'a']"},
    {"{{ 5 | string }}{{ [1] | string }}|{{ '42' | int + 1 }} {{ '3.9' | int }} {{ 3.9 | int }} {{ "
     "'x' | int }} {{ 'x' | int(7) }} {{ ' 12 ' | int }} {{ '2' | float }} {{ true | int }} {{ -3 "
     "| abs }}",
     "5[1]|43 3 3 0 7 12 2.0 1 3"},
    {"{{ [1, 0, 2, none] | select | list }}|{{ [1, 2, 3, 4] | select('odd') | list }}|{{ [1, 2, 3] "
     "| reject('equalto', 2) | list }}|{{ messages | selectattr('role', 'equalto', 'user') | "
     "map(attribute='content') | list }}|{{ messages | rejectattr('role', 'eq', 'user') | list | "
     "length }}",
     "[1, 2]|[1, 3]|[1, 3]|[' Hi there ']|2"},
    {"{{ ['a', 'b'] | map('upper') | join }}|{{ messages | selectattr('role') | list | length "
     "}}|{{ [' a ', 'b '] | map('trim') | list }}",
     "AB|3|['a', 'b']"},
    {"{{ 'a,b,,c'.split(',') }}|{{ '  a  b c '.split() }}|{{ 'a b c'.split(' ', 1) }}|{{ 'a  b  c  "
     "'.split(None, 1) }}|{{ 'x'.split('x') }}",
     "['a', 'b', '', 'c']|['a', 'b', 'c']|['a', 'b c']|['a', 'b  c  ']|['', '']"},
    {"{{ 'Hello'.startswith('He') }} {{ 'Hello'.endswith('lo') }} {{ 'Hello'.startswith(('x', "
     "'H')) }} {{ 'abc'.upper() }} {{ 'ABC'.lower() }} {{ 'a b'.title() }} {{ '-'.join(['a', 'b']) "
     "}} {{ 'hello'.find('l') }} {{ 'hello'.count('l') }} {{ 'héllo'.find('l') }}",
     "True True True ABC abc A B a-b 2 2 2"},
    {"{{ messages[0].role }}|{{ messages[0]['content'] }}|{{ messages[-1].content }}|{{ "
     "messages[1:] | length }}|{{ messages[5] }}|{{ messages[0].nope }}|{{ messages[0]['nope'] "
     "}}|{{ none.attr }}",
     "system|Be brief.|Hello!|2||||"},
    {"{{ [1, 2, 3, 4][::-1] }}|{{ [1, 2, 3, 4][1:3] }}|{{ [1, 2, 3, 4][-2:] }}|{{ [1, 2, 3, "
     "4][::2] }}|{{ 'héllo'[1:3] }}|{{ 'héllo'[1] }}|{{ 'héllo'[-1] }}|{{ 'abc'[::-1] }}|{{ [1, 2, "
     "3][5:] }}|{{ [1,2,3][:-1] }}",
     "[4, 3, 2, 1]|[2, 3]|[3, 4]|[1, 3]|él|é|o|cba|[]|[1, 2]"},
    {"{{ d.a[1] }}|{{ d['a'][0] }}|{{ d.a.1 }}|{{ 'abc'.x }}|", "x|1|x||"},
    {"{% for m in messages %}{{ loop.index }}{{ loop.index0 }}{{ loop.first }}{{ loop.last }}{{ "
     "loop.length }}{{ loop.revindex }}{{ loop.revindex0 }}{{ m.role[0] }};{% endfor %}",
     "10TrueFalse332s;21FalseFalse321u;32FalseTrue310a;"},
    {"{% for m in messages if m.role != 'system' %}{{ loop.index }}/{{ loop.length }}:{{ m.role }} "
     "{% else %}none{% endfor %}|{% for x in empty %}x{% else %}empty{% endfor %}",
     "1/2:user 2/2:assistant |empty"},
    {"{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}|{% for k in d %}{{ k }}{% endfor "
     "%}|{% for c in 'hé' %}[{{ c }}]{% endfor %}",
     "b=2;a=[1, 'x', None, True, 1.5];|ba|[h][é]"},
    {"{% for i in range(5) %}{% if i == 1 %}{% continue %}{% endif %}{% if i == 3 %}{% break %}{% "
     "endif %}{{ i }}{% endfor %}|{{ range(2, 10, 3) | list }}|{{ range(3, 0, -1) | list }}",
     "02|[2, 5, 8]|[3, 2, 1]"},
    {"{% for x in [1, 2] %}{% for y in 'ab' %}{{ x }}{{ y }}{{ loop.index }}{% endfor %}{{ "
     "loop.index }} {% endfor %}|{% for x in [1, 2, 3] %}{{ loop.previtem }}-{{ loop.nextitem "
     "}},{% endfor %}",
     "1a11b21 2a12b22 |-2,1-3,2-,"},
    {"{% set x = 1 %}{% for i in [1, 2] %}{{ x }}{% set x = 2 %}{{ x }}{% endfor %}{{ x }}|{% if "
     "true %}{% set y = 5 %}{% endif %}{{ y }}",
     "12121|5"},
    {"{% set ns = namespace(count=0, seen=false) %}{% for m in messages %}{% set ns.count = "
     "ns.count + 1 %}{% if m.role == 'user' %}{% set ns.seen = true %}{% endif %}{% endfor %}{{ "
     "ns.count }} {{ ns.seen }} {{ ns.missing }}",
     "3 True "},
    {"{% set a, b = [1, 2] %}{{ a }}{{ b }}|{% set c = 1, 2 %}{{ c }}|{% set block %}in {{ n }}{% "
     "endset %}[{{ block }}]",
     "12|(1, 2)|[in 7]"},
    {"{% macro greet(name, punct='!') %}Hello {{ name }}{{ punct }}{% endmacro %}{{ greet('a') }} "
     "{{ greet('b', '?') }} {{ greet(punct='.', name='c') }} {{ greet() }}",
     "Hello a! Hello b? Hello c. Hello !"},
    {"{% macro m(n) %}{% if n > 0 %}{{ n }}{{ m(n - 1) }}{% endif %}{% endmacro %}{{ m(3) }}|{% "
     "macro g() %}{{ s | trim }}{% endmacro %}{{ g() }}",
     "321|Hello World"},
    {"{% if n > 10 %}big{% elif n > 5 %}medium{% elif n > 0 %}small{% else %}none{% endif %}|{% if "
     "x %}x{% elif t %}t{% endif %}",
     "medium|t"},
    {"{% raw %}{{ not evaluated }} {% if %}{% endraw %}|{# comment #}after",
     "{{ not evaluated }} {% if %}|after"},
    {"a\n  {% if t %}\n    b\n  {% endif %}\nc\n", "a\n    b\nc"},
    {"a  {{- ' b ' -}}  c|{%- if t -%}  d  {%- endif -%}  |{{ 'e' }}  {% if t %}f{% endif %}",
     "a b c|d|e  f"},
    {"{% for i in [1, 2] %}\n  {{ i }}\n{% endfor %}\n", "  1\n  2\n"},
    {"line1\n    {%+ if t %}kept indent{% endif %}\n{% if t +%}\nnewline kept{% endif %}",
     "line1\n    kept indent\nnewline kept"},
    {"  {# comment #}\nx\n  {#- c -#}  y", "xy"},
    {"{% if t %}\r\nwin\r\n{% endif %}\r\n", "win\n"},
    {"{{ {'a': {'b': '}}'}} }}|{{ '%}' }}|{% set q = '}}' %}{{ q }}", "{'a': {'b': '}}'}}|%}|}}"},
    {"{% for i in [1, 2] %}{% break %}{% else %}else after break{% endfor %}|{% for i in [1, 2] "
     "%}{% if i == 2 %}{% continue %}{% endif %}{% else %}not run either{% endfor %}|{% for i in "
     "[1, 2] %}{% if i == 1 %}{% continue %}{% endif %}{% else %}not run{% endfor %}|{% for i in "
     "[] %}{% else %}{% set z = 1 %}{% endfor %}{{ z }}",
     "else after break|||"},
    {"{{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 1 == 1.0 == true }} {{ 'a' in 'abc' in ['abc'] }} {{ [x, "
     "s, none] }} {{ 'they\\'re ({hello) wORLD-wide' | title }} {{ 2.5 is odd }} {{ 3.0 is odd }} "
     "{{ [1, 2, 1].count(1) }} {{ [1, 2].index(2) }}",
     "True False True True [Undefined, '  Hello World  ', None] They're ({Hello) World-Wide False "
     "True 2 1"},
    // Filter blocks.
    {"{% filter upper %}a{{ n }}b{% endfilter %}", "A7B"},
    {"{% filter trim | upper %}  pad {{ n }}  {% endfilter %}|", "PAD 7|"},
    {"{% filter replace('a', 'b') %}banana{% endfilter %}", "bbnbnb"},
    {"{% for i in [1, 2] %}{% filter upper %}x{{ i }}{% endfilter %}{% endfor %}", "X1X2"},
    {"{% filter indent(2) %}a\nb{% endfilter %}", "a\n  b"},
    {"{{ 'a\\nb\\n\\nc\\r\\nd' | indent }}|{{ 'a\\nb\\n' | indent(2, true) }}|{{ "
     "'a\\n\\nb' | indent('> ', blank=true) }}|{{ 'a\\u2028b\\x85c' | indent(1) }}|{{ '' | "
     "indent(first=true) }}",
     "a\n    b\n\n    c\n    d|  a\n  b\n|a\n> \n> b|a\n b\n c|    "},
    // dictsort (Gemma 4's template): case-insensitive and stable by default, by value,
    // reversed.
    {"{% for k, v in {'b': 2, 'A': 3, 'a': 1, 'C': 0} | dictsort %}{{ k }}={{ v }},{% endfor "
     "%}|{% for k, v in {'b': 2, 'A': 3, 'a': 1} | dictsort(true) %}{{ k }},{% endfor %}|{% "
     "for k, v in {'x': 2, 'y': 1, 'z': 2} | dictsort(by='value', reverse=true) %}{{ k }},{% "
     "endfor %}",
     "A=3,a=1,b=2,C=0,|A,a,b,|x,z,y,"},
    // Filters on None: string filters see str(None), as jinja2's do.
    {"{{ none | string }}|{{ none | default('d') }}|{{ none | tojson }}|{{ [none, 1] | "
     "map('string') | join(',') }}",
     "None|None|null|None,1"},
    {"{{ none | lower }}|{{ none | upper }}|{{ none | trim }}|{{ none | capitalize }}|{{ none | "
     "title }}|{{ none | replace('o', '0') }}|{{ none | int }}|{{ none | float }}",
     "none|NONE|None|None|None|N0ne|0|0.0"},
};

TEST(Interpreter, MatchesJinja2) {
  for (const Case& c : kCases) {
    auto got = Render(c.source);
    ASSERT_TRUE(got.ok()) << c.source << "\n" << got.status();
    EXPECT_EQ(*got, c.expected) << c.source;
  }
}

// Where jinja2 raises, so do we (the messages are ours, the location included).
TEST(Interpreter, RaisesWhereJinja2Raises) {
  const struct {
    const char* source;
    const char* message;
  } kErrors[] = {
      {"{{ x.y }}", "line 1, column 5: 'x' is undefined"},
      {"{{ x + 1 }}", "'x' is undefined"},
      {"{{ x() }}", "'x' is undefined"},
      {"{{ 'a' + 1 }}", "unsupported operand type(s) for +: 'str' and 'int'"},
      {"{{ 1 + 2 ~ 3 }}", "unsupported operand type(s) for +: 'int' and 'str'"},
      {"{{ messages[0].content.strip().nope() }}", "'str object' has no attribute 'nope'"},
      {"{{ [1].append(2) }}", "access to attribute 'append' of 'list' object is unsafe."},
      {"{{ 1 // 0 }}", "integer division or modulo by zero"},
      {"{{ 1 / 0 }}", "division by zero"},
      {"{% for a, b in [1] %}{% endfor %}", "cannot unpack int"},
      {"{{ 1 < 'a' }}", "'<' not supported between instances of 'int' and 'str'"},
      {"{{ n | length }}", "object of type 'int' has no len()"},
      {"{{ n is divisibleby 0 }}", "modulo by zero"},
      {"{{ n | no_such_filter }}", "no filter named 'no_such_filter'"},
      {"{{ n is no_such_test }}", "no test named 'no_such_test'"},
      {"{% for x in n %}{% endfor %}", "'int' object is not iterable"},
      {"{% set n.x = 1 %}", "not a namespace"},
      {"{{ 9223372036854775807 + 1 }}", "integer overflow"},
      {"{{ 2 ** 64 }}", "integer overflow"},
      {"{{ '{}{0}'.format(1) }}", "cannot switch between automatic field numbering"},
      {"{{ {[1]: 2} }}", "unhashable type: 'list'"},
      {"{{ messages | map(attribute='role') | length }}",
       "object of type 'generator' has no len()"},
      {"{{ messages | select | count }}", "object of type 'generator' has no len()"},
      {"{{ messages | map(attribute='role') | tojson }}",
       "Object of type generator is not JSON serializable"},
      {"{{ messages | map(attribute='role') | last }}", "'generator' object is not reversible"},
      {"{{ '{:>3}'.format(1) }}", "the field '{:>3}' is not supported"},
      {"{{ '{2}'.format(1) }}", "Replacement index 2 out of range"},
      {"{{ '{'.format(1) }}", "Single '{' encountered in format string"},
      {"{{ none | length }}", "object of type 'NoneType' has no len()"},
      {"{{ none | first }}", "'NoneType' object is not iterable"},
      {"{% filter nope %}x{% endfilter %}", "no filter named 'nope'"},
  };
  for (const auto& e : kErrors) {
    auto got = Render(e.source);
    ASSERT_FALSE(got.ok()) << e.source << " rendered " << *got;
    EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument) << e.source;
    EXPECT_THAT(std::string(got.status().message()), HasSubstr(e.message)) << e.source;
  }
}

TEST(Interpreter, RaiseExceptionMessageIsExactlyTheTemplates) {
  auto got = Render("text {% if true %}{{ raise_exception('custom: ' ~ n) }}{% endif %}");
  EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(got.status().message(), "custom: 7");
}

// transformers' AssistantTracker extension: {% generation %} renders its body.
TEST(Interpreter, GenerationBlockRendersItsBody) {
  EXPECT_EQ(*Render("a{% generation %}b{{ n }}{% endgeneration %}c"), "ab7c");
}

TEST(Interpreter, MacrosSeeGlobalsButNotTheCallersLoopVariables) {
  EXPECT_EQ(*Render("{% macro m() %}[{{ i }}{{ n }}]{% endmacro %}"
                    "{% for i in [1] %}{{ m() }}{% endfor %}"),
            "[7]");
  auto wrong = Render("{% macro m(a) %}{% endmacro %}{{ m(1, 2) }}");
  EXPECT_EQ(wrong.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(Interpreter, ContentsAreDataNeverCode) {
  auto tpl = Template::Parse("{{ c }}|{{ c | trim }}");
  ASSERT_TRUE(tpl.ok());
  auto got = tpl->Render({{"c", Value::String("{{ 7 * 7 }} {% if true %}x{% endif %}")}});
  EXPECT_EQ(*got, "{{ 7 * 7 }} {% if true %}x{% endif %}|{{ 7 * 7 }} {% if true %}x{% endif %}");
}

TEST(Interpreter, LimitsAreErrorsNotHangs) {
  Limits limits;
  limits.max_steps = 10000;
  limits.max_output_bytes = 1000;
  auto code = [&](std::string_view source) { return Render(source, limits).status().code(); };
  EXPECT_EQ(code("{% for i in range(100000) %}{% endfor %}"), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(code("{% for i in range(100) %}{% for j in range(100) %}{% for k in range(100) %}"
                 "{% endfor %}{% endfor %}{% endfor %}"),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(code("{{ 'x' * 2000 }}"), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(code("{{ 'x' * 9223372036854775807 }}"), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(code("{{ [1] * 9223372036854775807 }}"), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(*Render("{{ '' * 9223372036854775807 }}{{ [] * 9223372036854775807 }}", limits), "[]");
  EXPECT_EQ(code("{% for i in range(300) %}0123456789{% endfor %}"),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(code("{% set ns = namespace(s='ab') %}{% for i in range(40) %}"
                 "{% set ns.s = ns.s ~ ns.s %}{% endfor %}"),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(code("{{ range(1000000) }}"), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(code("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}"),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(code("{% set ns = namespace(l=[]) %}{% for i in range(100) %}"
                 "{% set ns.l = [ns.l] %}{% endfor %}"),
            absl::StatusCode::kInvalidArgument);  // nested deeper than max_value_depth
  EXPECT_EQ(code("{% set ns = namespace() %}{% set ns.me = ns %}"),
            absl::StatusCode::kInvalidArgument);  // no cycles
  EXPECT_EQ(code("{% set ns = namespace() %}{% set x = [ns] %}"),
            absl::StatusCode::kInvalidArgument);
}

TEST(Interpreter, LoopVariablesAndScopes) {
  EXPECT_EQ(*Render("{% for a in [1, 2] %}{% for b in [3] %}{{ loop.index }}{% endfor %}"
                    "{{ loop.index }}{% endfor %}{{ a }}"),
            "1112");
  EXPECT_EQ(*Render("{% for x in [1, 2, 3] %}{% if x == 2 %}{% break %}{% endif %}{{ x }}"
                    "{% else %}never{% endfor %}"),
            "1");
}

}  // namespace
}  // namespace tandem::tokenizer::jinja
