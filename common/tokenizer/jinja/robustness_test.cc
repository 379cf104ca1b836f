// Random and mutated templates must come back as a string or an error: never a crash,
// a hang or a runaway allocation. A deterministic stand-in for a fuzzer that runs with
// the normal tests (run it under ASan/UBSan for the full benefit).
#include <cstdint>
#include <string>
#include <vector>

#include "common/tokenizer/jinja/template.h"
#include "gtest/gtest.h"

namespace tandem::tokenizer::jinja {
namespace {

// SplitMix64: the same sequence on every platform, unlike <random>'s distributions.
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t Next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  size_t Below(size_t n) { return n == 0 ? 0 : static_cast<size_t>(Next() % n); }

 private:
  uint64_t state_;
};

const char* const kSeeds[] = {
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ "
    "'<|im_start|>system\\nYou are helpful<|im_end|>\\n' }}{% endif %}{{'<|im_start|>' + "
    "message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if "
    "add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}",
    "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not "
    "supported') }}{% endif %}{% for message in messages %}{% if (message['role'] == 'user') != "
    "(loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate') }}{% endif "
    "%}{% if (message['role'] == 'assistant') %}{% set role = 'model' %}{% else %}{% set role = "
    "message['role'] %}{% endif %}{{ '<start_of_turn>' + role + '\\n' + message['content'] | trim "
    "+ '<end_of_turn>\\n' }}{% endfor %}",
    "{%- set ns = namespace(index=0) %}\n{%- for m in messages | selectattr('role', 'equalto', "
    "'user') | list %}\n    {%- set ns.index = ns.index + 1 %}\n    {{- m.content | "
    "tojson(indent=2) "
    "}}\n{%- endfor %}\n{{- ns.index ~ (messages[1:] | length) }}{% macro f(x, y=2) %}{{ x * y "
    "}}{% endmacro %}{{ f(3) }}{{ 'a,b'.split(',') | join('-') }}{{ d.items() | list }}",
};

const char* const kFragments[] = {
    "{{",          "}}",
    "{%",          "%}",
    "{#",          "#}",
    "{%-",         "-%}",
    "{{-",         "-}}",
    "for ",        " in ",
    "if ",         "elif ",
    "else",        "endif",
    "endfor",      "set ",
    "macro ",      "endmacro",
    "raw",         "endraw",
    "break",       "(",
    ")",           "[",
    "]",           "{",
    "}",           "'",
    "\"",          "\\",
    "|",           "~",
    "+",           "-",
    "*",           "/",
    "//",          "%",
    "**",          ".",
    ",",           ":",
    "=",           "==",
    "<",           "not ",
    " and ",       " or ",
    " is ",        "defined",
    "none",        "true",
    "loop.index",  "messages",
    "messages[0]", "m.content",
    "ns",          "namespace(",
    "range(",      "99999",
    "-1",          "0",
    "1.5e9",       "x",
    " ",           "\n",
    "trim",        "tojson",
    "join",        "map",
    "selectattr(", "raise_exception(",
    "'ab' * 9999", "f(",
    "caller",      "\xff",
    "\xe3\x80",    "é",
    "filter",      "endfilter",
    "indent(",     "| indent(9999, true, true)",
};

ValueDict Variables() {
  ValueList messages;
  for (const char* role : {"system", "user", "assistant", "user"}) {
    messages.push_back(Value::Dict(
        {{"role", Value::String(role)}, {"content", Value::String(" {{ x }} content\n")}}));
  }
  return {{"messages", Value::List(std::move(messages))},
          {"add_generation_prompt", Value::Bool(true)},
          {"bos_token", Value::String("<s>")},
          {"d", Value::Dict({{"k", Value::Int(1)}})}};
}

std::string Mutate(Rng& rng) {
  std::string s;
  if (rng.Below(4) == 0) {  // a soup of fragments
    for (size_t n = 1 + rng.Below(40); n > 0; --n)
      s += kFragments[rng.Below(std::size(kFragments))];
    return s;
  }
  s = kSeeds[rng.Below(std::size(kSeeds))];
  for (size_t n = 1 + rng.Below(6); n > 0; --n) {
    const size_t at = rng.Below(s.size() + 1);
    switch (rng.Below(5)) {
      case 0:
        s.insert(at, kFragments[rng.Below(std::size(kFragments))]);
        break;
      case 1:
        s.erase(at, 1 + rng.Below(12));
        break;
      case 2:
        s.insert(at, s.substr(rng.Below(s.size() + 1), rng.Below(40)));
        break;
      case 3:
        if (at < s.size()) s[at] = static_cast<char>(rng.Next());
        break;
      default:
        s.insert(at, 1, static_cast<char>(rng.Next()));
        break;
    }
  }
  return s;
}

TEST(Robustness, RandomAndMutatedTemplatesNeverCrash) {
  Limits limits;
  limits.max_steps = 20000;
  limits.max_output_bytes = 16 << 10;
  const ValueDict vars = Variables();
  Rng rng(20240611);
  int rendered = 0, failed = 0;
  for (int i = 0; i < 4000; ++i) {
    const std::string source = Mutate(rng);
    auto tpl = Template::Parse(source, limits);
    if (!tpl.ok()) {
      EXPECT_FALSE(tpl.status().message().empty());
      ++failed;
      continue;
    }
    auto out = tpl->Render(vars, limits);
    if (out.ok()) {
      EXPECT_LE(out->size(), limits.max_output_bytes);
      ++rendered;
    } else {
      EXPECT_FALSE(out.status().message().empty()) << source;
      ++failed;
    }
  }
  // Both paths are exercised.
  EXPECT_GT(rendered, 100);
  EXPECT_GT(failed, 100);
}

TEST(Robustness, RandomBytesNeverCrash) {
  // Mostly template punctuation, so the lexer gets past the first character.
  constexpr std::string_view kPunctuation = "{}%#-+()[]'\"|.,~ \n\\x0a";
  Rng rng(7);
  for (int i = 0; i < 2000; ++i) {
    std::string source;
    for (size_t n = rng.Below(200); n > 0; --n) {
      source.push_back(rng.Below(2) ? kPunctuation[rng.Below(kPunctuation.size())]
                                    : static_cast<char>(rng.Next()));
    }
    auto tpl = Template::Parse(source);
    if (tpl.ok()) (void)tpl->Render(Variables());
  }
}

}  // namespace
}  // namespace tandem::tokenizer::jinja
