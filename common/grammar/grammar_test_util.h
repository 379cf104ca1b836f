// Helpers the grammar tests share: compiling GBNF that must compile, whether a grammar
// accepts a whole text, and a wide enum.
#ifndef TANDEM_COMMON_GRAMMAR_GRAMMAR_TEST_UTIL_H_
#define TANDEM_COMMON_GRAMMAR_GRAMMAR_TEST_UTIL_H_

#include <cstdio>
#include <memory>
#include <string>
#include <string_view>

#include "common/grammar/grammar.h"
#include "common/grammar/grammar_matcher.h"
#include "gtest/gtest.h"

namespace tandem::grammar {

// The grammar, or null after a test failure naming the error.
inline std::shared_ptr<const Grammar> MustCompile(std::string_view gbnf) {
  auto g = Grammar::Compile(gbnf);
  EXPECT_TRUE(g.ok()) << gbnf << ": " << g.status();
  return g.ok() ? std::make_shared<const Grammar>(*std::move(g)) : nullptr;
}

// Whether `g` accepts exactly `text`.
inline bool Matches(const std::shared_ptr<const Grammar>& g, std::string_view text) {
  GrammarMatcher m(g);
  return m.Accept(text) && m.CanEnd();
}

// GBNF of `prefix`, then one of `values` values v00000, v00001, … (five digits), then
// `suffix`: an alternation as wide as asked after a shared first byte.
inline std::string WideEnumGbnf(std::string_view prefix, int values, std::string_view suffix) {
  std::string gbnf = "root ::= ";
  gbnf += GbnfLiteral(prefix);
  gbnf += " (";
  for (int i = 0; i < values; ++i) {
    char value[32];
    std::snprintf(value, sizeof value, "%s\"v%05d\"", i == 0 ? "" : " | ", i);
    gbnf += value;
  }
  gbnf += ")";
  if (!suffix.empty()) {
    gbnf += ' ';
    gbnf += GbnfLiteral(suffix);
  }
  gbnf += '\n';
  return gbnf;
}

}  // namespace tandem::grammar

#endif  // TANDEM_COMMON_GRAMMAR_GRAMMAR_TEST_UTIL_H_
