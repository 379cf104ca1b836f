#include "common/tokenizer/jinja/parser.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tandem::tokenizer::jinja {
namespace {

using ::testing::HasSubstr;

// A compact prefix rendering of an expression tree, to check precedence.
std::string Show(const Expr& e) {
  std::string out;
  switch (e.kind) {
    case Expr::Kind::kLiteral:
      AppendRepr(e.value, &out, 1000).IgnoreError();
      return out;
    case Expr::Kind::kName:
      return e.name;
    case Expr::Kind::kGetAttr:
      return Show(*e.args[0]) + "." + e.name;
    case Expr::Kind::kAnd:
      out = "(and";
      break;
    case Expr::Kind::kOr:
      out = "(or";
      break;
    case Expr::Kind::kCond:
      out = "(if";
      break;
    case Expr::Kind::kFilter:
      out = "(|" + e.name;
      break;
    case Expr::Kind::kTest:
      out = "(is " + e.name;
      break;
    case Expr::Kind::kGetItem:
      out = "([]";
      break;
    case Expr::Kind::kSlice:
      out = "([:]";
      break;
    case Expr::Kind::kCall:
      out = "(call";
      break;
    case Expr::Kind::kList:
      out = "(" + std::string(e.name == "tuple" ? "tuple" : "list");
      break;
    case Expr::Kind::kDict:
      out = "(dict";
      break;
    case Expr::Kind::kCompare:
      out = "(chain";
      for (const auto& op : e.ops) out += " " + op;
      break;
    default:
      out = "(" + e.name;
      break;
  }
  for (const ExprPtr& a : e.args) out += " " + (a ? Show(*a) : std::string("_"));
  for (const auto& [k, v] : e.kwargs) out += " " + k + "=" + Show(*v);
  return out + ")";
}

std::string ShowOutput(std::string_view source) {
  auto program = Parse(source, 100);
  EXPECT_TRUE(program.ok()) << program.status();
  if (!program.ok() || program->size() != 1 || (*program)[0].kind != Stmt::Kind::kOutput) {
    return "?";
  }
  return Show(*(*program)[0].expr);
}

TEST(Parser, PrecedenceIsJinja2s) {
  EXPECT_EQ(ShowOutput("{{ a + b * c }}"), "(+ a (* b c))");
  EXPECT_EQ(ShowOutput("{{ a + b ~ c }}"), "(+ a (~ b c))");  // ~ binds tighter than +
  EXPECT_EQ(ShowOutput("{{ 'x' + m.content | trim + 'y' }}"), "(+ (+ 'x' (|trim m.content)) 'y')");
  EXPECT_EQ(ShowOutput("{{ -x | abs }}"), "(|abs (- x))");
  EXPECT_EQ(ShowOutput("{{ not a is defined and b or c }}"), "(or (and (not (is defined a)) b) c)");
  EXPECT_EQ(ShowOutput("{{ x is not none }}"), "(not (is none x))");
  EXPECT_EQ(ShowOutput("{{ a if b else c if d }}"), "(if b a (if d c _))");
  EXPECT_EQ(ShowOutput("{{ a not in b }}"), "(not in a b)");
  EXPECT_EQ(ShowOutput("{{ a < b <= c in d }}"), "(chain < <= in a b c d)");
  EXPECT_EQ(ShowOutput("{{ 2 ** 3 ** 2 }}"), "(** (** 2 3) 2)");  // jinja2 is left-associative
  EXPECT_EQ(ShowOutput("{{ x[1:] }}"), "([:] x 1 _ _)");
  EXPECT_EQ(ShowOutput("{{ x[::-1] }}"), "([:] x _ _ (- 1))");
  EXPECT_EQ(ShowOutput("{{ f(1, k=2)[0] }}"), "([] (call f 1 k=2) 0)");
  EXPECT_EQ(ShowOutput("{{ x | join(', ') | length > 3 }}"), "(> (|length (|join x ', ')) 3)");
  EXPECT_EQ(ShowOutput("{{ 1, 2 }}"), "(tuple 1 2)");
  EXPECT_EQ(ShowOutput("{{ [1, (2,), {'k': v}] }}"), "(list 1 (tuple 2) (dict 'k' v))");
  EXPECT_EQ(ShowOutput("{{ x is divisibleby 3 }}"), "(is divisibleby x 3)");
}

TEST(Parser, Statements) {
  auto program = Parse(
      "{% for k, v in d | items if v %}{% break %}{% else %}e{% endfor %}"
      "{% if a %}1{% elif b %}2{% else %}3{% endif %}"
      "{% set ns.x = 1 %}{% set y %}body{% endset %}{% macro m(a, b=1) %}{% endmacro %}",
      100);
  ASSERT_TRUE(program.ok()) << program.status();
  ASSERT_EQ(program->size(), 5u);
  const Stmt& loop = (*program)[0];
  EXPECT_EQ(loop.kind, Stmt::Kind::kFor);
  EXPECT_THAT(loop.names, ::testing::ElementsAre("k", "v"));
  EXPECT_NE(loop.filter, nullptr);
  EXPECT_EQ(loop.body[0].kind, Stmt::Kind::kBreak);
  EXPECT_EQ(loop.else_body[0].text, "e");
  const Stmt& branch = (*program)[1];
  ASSERT_EQ(branch.else_body.size(), 1u);  // elif nests
  EXPECT_EQ(branch.else_body[0].kind, Stmt::Kind::kIf);
  EXPECT_EQ(branch.else_body[0].else_body[0].text, "3");
  EXPECT_EQ((*program)[2].text, "x");
  EXPECT_EQ((*program)[3].kind, Stmt::Kind::kSetBlock);
  EXPECT_EQ((*program)[4].defaults.size(), 1u);
}

TEST(Parser, MalformedTemplatesNameLineAndColumn) {
  const struct {
    const char* source;
    const char* message;
  } kCases[] = {
      {"{% if %}", "line 1, column 7: expected an expression, got '%}'"},
      {"a\n{% for x in y %}", "unexpected end of template, expected 'endfor'"},
      {"{% endfor %}", "line 1, column 4: unknown or unexpected tag 'endfor'"},
      {"{% frobnicate %}", "unknown or unexpected tag 'frobnicate'"},
      {"{{ }}", "expected an expression"},
      {"{{ a b }}", "expected '}}'"},
      {"{% break %}", "'break' outside a loop"},
      {"{% for x in y %}{% macro m() %}{% break %}{% endmacro %}{% endfor %}", "outside a loop"},
      {"{{ f(a=1, 2) }}", "positional argument follows keyword"},
      {"{{ 99999999999999999999 }}", "integer literal out of range"},
      {"{% set x %}", "unexpected end of template, expected 'endset'"},
      {"{% macro m(a=1, b) %}{% endmacro %}", "without a default"},
  };
  for (const auto& c : kCases) {
    auto program = Parse(c.source, 100);
    ASSERT_FALSE(program.ok()) << c.source;
    EXPECT_EQ(program.status().code(), absl::StatusCode::kInvalidArgument) << c.source;
    EXPECT_THAT(std::string(program.status().message()), HasSubstr(c.message)) << c.source;
  }
  for (const char* unsupported :
       {"{% include 'x' %}", "{% extends 'x' %}", "{% call m() %}{% endcall %}",
        "{% for x in y recursive %}{% endfor %}"}) {
    EXPECT_EQ(Parse(unsupported, 100).status().code(), absl::StatusCode::kUnimplemented)
        << unsupported;
  }
}

TEST(Parser, DeepNestingIsAnErrorNotAStackOverflow) {
  const int n = 100000;
  for (const std::string& source :
       {std::string("{{ ") + std::string(n, '(') + "1" + std::string(n, ')') + " }}",
        std::string("{{ ") + std::string(n, '[') + std::string(n, ']') + " }}",
        std::string("{{ ") + std::string(n, '-') + "1 }}",
        "{{ " +
            [&] {
              std::string s;
              for (int i = 0; i < n; ++i) s += "not ";
              return s;
            }() +
            "x }}",
        "{{ 1" +
            [&] {
              std::string s;
              for (int i = 0; i < n; ++i) s += " + 1";
              return s;
            }() +
            " }}",
        "{{ x" +
            [&] {
              std::string s;
              for (int i = 0; i < n; ++i) s += " | trim";
              return s;
            }() +
            " }}",
        [&] {
          std::string s;
          for (int i = 0; i < n; ++i) s += "{% if x %}";
          return s;
        }(),
        "{% if a %}" +
            [&] {
              std::string s;
              for (int i = 0; i < n; ++i) s += "{% elif b %}";
              return s;
            }() +
            "{% endif %}"}) {
    auto program = Parse(source, 100);
    ASSERT_FALSE(program.ok()) << source.substr(0, 40);
    EXPECT_THAT(std::string(program.status().message()), HasSubstr("nested too deeply"))
        << source.substr(0, 40);
  }
}

}  // namespace
}  // namespace tandem::tokenizer::jinja
