// Helpers the grammar tests share: compiling GBNF that must compile, and whether a
// grammar accepts a whole text.
#ifndef TANDEM_COMMON_GRAMMAR_GRAMMAR_TEST_UTIL_H_
#define TANDEM_COMMON_GRAMMAR_GRAMMAR_TEST_UTIL_H_

#include <memory>
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

}  // namespace tandem::grammar

#endif  // TANDEM_COMMON_GRAMMAR_GRAMMAR_TEST_UTIL_H_
