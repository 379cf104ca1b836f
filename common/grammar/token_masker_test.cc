#include "common/grammar/token_masker.h"

#include <functional>
#include <memory>
#include <random>
#include <string>

#include "common/grammar/constraint.h"
#include "common/grammar/grammar_test_util.h"
#include "common/grammar/mask_cache.h"
#include "gtest/gtest.h"

namespace tandem::grammar {
namespace {

constexpr std::string_view kJsonish = R"gbnf(
  root   ::= object
  object ::= "{" ws (pair ("," ws pair)*)? "}" ws
  pair   ::= string ":" ws value ws
  value  ::= object | string | [0-9]+ | "true" | "false"
  string ::= "\"" [^"\\]* "\""
  ws     ::= [ \n]*
)gbnf";

// A vocabulary like a real one: all 256 single bytes, random pieces from a JSON-ish
// alphabet (duplicates and prefixes of each other included), multi-byte characters
// split across tokens, an empty control token and an end token.
std::vector<std::string> Vocabulary(int pieces, uint32_t seed) {
  std::vector<std::string> v;
  for (int b = 0; b < 256; ++b) v.emplace_back(1, static_cast<char>(b));
  std::mt19937 rng(seed);
  const std::vector<std::string> parts = {"{",  "}", "\"",  ":",    ",",        " ",  "\n",
                                          "a",  "b", "key", "true", "fal",      "se", "1",
                                          "23", "é", "世",  "\xE4", "\xB8\x96", "\\"};
  for (int i = 0; i < pieces; ++i) {
    std::string t;
    const int n = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < n; ++k) t += parts[rng() % parts.size()];
    v.push_back(t);
  }
  v.push_back("");      // control token
  v.push_back("</s>");  // end token's text is not what it adds: it adds nothing
  return v;
}

// Walks `g` by random allowed tokens of `vocab` (the last id an end token adding no
// bytes), checking at every step that the mask equals checking each token alone on a
// matcher stepped byte by byte (no trie, no memo). Returns the steps taken.
int WalkCheckingMasks(std::shared_ptr<const Grammar> g, std::vector<std::string> vocab,
                      uint32_t seed, int max_steps) {
  const int32_t eos = static_cast<int32_t>(vocab.size()) - 1;
  vocab[eos] = "";  // an end token adds no bytes
  TokenMasker masker(vocab, {eos});
  std::mt19937 rng(seed);
  GrammarMatcher m(g);
  GrammarMatcher plain(g);
  // Whether `plain`'s current state takes all of `bytes` (its state is left alone).
  auto takes = [&](std::string_view bytes) {
    GrammarMatcher::State cur = plain.state(), next;
    for (char b : bytes) {
      plain.Step(cur, static_cast<uint8_t>(b), &next);
      if (!next.Alive()) return false;
      std::swap(cur, next);
    }
    return true;
  };
  TokenMask mask;
  int steps = 0;
  for (; steps < max_steps; ++steps) {
    masker.Fill(m, m.state(), &mask);
    std::vector<int32_t> allowed;
    for (int32_t id = 0; id < masker.vocab_size(); ++id) {
      const bool want = id == eos ? plain.CanEnd() : !vocab[id].empty() && takes(vocab[id]);
      EXPECT_EQ(Allowed(mask, id), want) << "token " << id << " after step " << steps;
      if (Allowed(mask, id) != want) return steps;
      if (want) allowed.push_back(id);
    }
    EXPECT_FALSE(allowed.empty()) << "the grammar can always go on or end";
    if (allowed.empty()) return steps;
    const int32_t pick = allowed[rng() % allowed.size()];
    if (pick == eos) break;
    EXPECT_TRUE(m.Accept(vocab[pick]));
    EXPECT_TRUE(plain.Accept(vocab[pick]));
  }
  EXPECT_FALSE(m.exhausted());
  return steps;
}

TEST(TokenMasker, MaskEqualsCheckingEveryTokenAlone) {
  auto g = MustCompile(kJsonish);
  ASSERT_NE(g, nullptr);
  EXPECT_GT(WalkCheckingMasks(g, Vocabulary(3000, 11), 3, 150), 5);
}

// An enum far wider than GrammarMatcher::kMaxHeads after a prefix (issue #41: such a
// constraint used to be refused mid-stream): masks stay exact and the walk ends with a
// whole value.
TEST(TokenMasker, WideEnumMasksAreExact) {
  constexpr int kValues = 40000;
  const std::string gbnf = WideEnumGbnf("{\"k\": \"", kValues, "\"}");
  auto g = MustCompile(gbnf);
  ASSERT_NE(g, nullptr);
  std::vector<std::string> vocab;
  for (int b = 0; b < 256; ++b) vocab.emplace_back(1, static_cast<char>(b));
  for (int i = 0; i < 100; ++i) vocab.push_back(std::to_string(i / 10) + std::to_string(i % 10));
  for (const char* t : {"v", "v0", "v1", "v3", "\"v", ": \"", "\"}", "{\"k"}) vocab.push_back(t);
  vocab.push_back("</s>");
  for (uint32_t seed = 1; seed <= 3; ++seed) {
    const int steps = WalkCheckingMasks(g, vocab, seed, 40);
    EXPECT_GT(steps, 4);
    EXPECT_LT(steps, 40) << "the walk ends once a value and the closing bytes are out";
  }
}

TEST(TokenMasker, EndTokensOnlyWhereTheGrammarEnds) {
  auto g = MustCompile(R"gbnf(root ::= "ab")gbnf");
  ASSERT_NE(g, nullptr);
  TokenMasker masker({"a", "b", "ab", "", "abc"}, {3});
  GrammarMatcher m(g);
  TokenMask mask;
  masker.Fill(m, m.state(), &mask);
  EXPECT_TRUE(Allowed(mask, 0));
  EXPECT_FALSE(Allowed(mask, 1));
  EXPECT_TRUE(Allowed(mask, 2));
  EXPECT_FALSE(Allowed(mask, 3));
  EXPECT_FALSE(Allowed(mask, 4));
  ASSERT_TRUE(m.Accept(std::string_view("ab")));
  masker.Fill(m, m.state(), &mask);
  for (int32_t id : {0, 1, 2, 4}) EXPECT_FALSE(Allowed(mask, id));
  EXPECT_TRUE(Allowed(mask, 3));
}

// Walks `c` for up to `steps` tokens chosen by `pick(step, allowed)`, checking every
// mask against a fresh walk of a trie-free matcher fed the same bytes.
void WalkCheckingMasks(const std::shared_ptr<const Grammar>& g,
                       const std::vector<std::string>& vocab, int32_t eos,
                       const TokenMasker& masker, int steps, Constraint* c,
                       const std::function<int32_t(int, const std::vector<int32_t>&)>& pick) {
  GrammarMatcher fresh(g);
  TokenMask want;
  for (int step = 0; step < steps; ++step) {
    const TokenMask& got = c->Allowed();
    masker.Fill(fresh, fresh.state(), &want);
    ASSERT_EQ(got, want) << "step " << step;
    std::vector<int32_t> allowed;
    for (int32_t id = 0; id < masker.vocab_size(); ++id) {
      if (Allowed(got, id)) allowed.push_back(id);
    }
    ASSERT_FALSE(allowed.empty());
    const int32_t id = pick(step, allowed);
    ASSERT_TRUE(c->Accept(id).ok());
    if (id == eos) return;
    ASSERT_TRUE(fresh.Accept(vocab[id]));
  }
}

// The state cache never changes an answer: along random paths, every cached mask
// equals a fresh walk, and the cache does answer the states a loop returns to.
TEST(Constraint, CachedMasksEqualFreshOnes) {
  auto g = MustCompile(kJsonish);
  ASSERT_NE(g, nullptr);
  std::vector<std::string> vocab = Vocabulary(2000, 5);
  const int32_t eos = static_cast<int32_t>(vocab.size()) - 1;
  vocab[eos] = "";
  auto masker = std::make_shared<const TokenMasker>(vocab, std::vector<int32_t>{eos});
  std::mt19937 rng(8);
  int64_t hits = 0, masks = 0;
  for (int run = 0; run < 5; ++run) {
    Constraint c(g, masker);
    ASSERT_NO_FATAL_FAILURE(WalkCheckingMasks(
        g, vocab, eos, *masker, 150, &c,
        [&](int, const std::vector<int32_t>& allowed) { return allowed[rng() % allowed.size()]; }));
    hits += c.stats().cache_hits;
    masks += c.stats().masks;
  }
  EXPECT_GT(hits, masks / 4);
}

// Sequences of one grammar share masks through a MaskCache keyed by state content: what
// one has walked the others find, and every mask still equals a fresh walk of its own.
TEST(Constraint, SequencesShareMasksByStateContent) {
  auto g = MustCompile(kJsonish);
  ASSERT_NE(g, nullptr);
  std::vector<std::string> vocab = Vocabulary(2000, 6);
  const int32_t eos = static_cast<int32_t>(vocab.size()) - 1;
  vocab[eos] = "";
  auto masker = std::make_shared<const TokenMasker>(vocab, std::vector<int32_t>{eos});
  auto shared = std::make_shared<MaskCache>();
  std::mt19937 rng(9);
  int64_t shared_hits = 0;
  for (int run = 0; run < 6; ++run) {
    Constraint c(g, masker, shared);
    // Runs walk the same first steps (shared states), then go their own ways.
    ASSERT_NO_FATAL_FAILURE(WalkCheckingMasks(
        g, vocab, eos, *masker, 120, &c, [&](int step, const std::vector<int32_t>& allowed) {
          return step < 6 ? allowed[step % allowed.size()] : allowed[rng() % allowed.size()];
        }));
    if (run == 0) {
      EXPECT_EQ(c.stats().shared_hits, 0);
    }
    shared_hits += c.stats().shared_hits;
  }
  EXPECT_GE(shared_hits, 5 * 6);  // at least the common opening, in every later run
  EXPECT_GT(shared->size(), 0u);
}

// A state's key is its content: two matchers given the same bytes agree, whatever
// other states either has interned on the way; different continuations differ.
TEST(GrammarMatcher, StateKeysCompareContentAcrossMatchers) {
  auto g = MustCompile(kJsonish);
  ASSERT_NE(g, nullptr);
  GrammarMatcher a(g), b(g);
  GrammarMatcher::State walk = b.state(), next;  // b makes other nodes first
  for (char ch : std::string_view("{\"zz\": {\"q\": {\"r\": 12}}, \"k\": true}")) {
    b.Step(walk, static_cast<uint8_t>(ch), &next);
    ASSERT_TRUE(next.Alive());
    walk = next;
  }
  ASSERT_TRUE(b.Accept(std::string_view("{\"k\": ")));
  GrammarMatcher c(g);
  ASSERT_TRUE(a.Accept(std::string_view("{\"x\": ")));
  ASSERT_TRUE(c.Accept(std::string_view("{\"other key\":  ")));
  std::vector<int32_t> ka, kb, kc;
  a.StateKey(a.state(), &ka);
  b.StateKey(b.state(), &kb);
  c.StateKey(c.state(), &kc);
  EXPECT_EQ(ka, kb);
  EXPECT_EQ(ka, kc);
  ASSERT_TRUE(a.Accept(std::string_view("\"in a string")));
  a.StateKey(a.state(), &ka);
  EXPECT_NE(ka, kb);
}

TEST(Constraint, RefusedTokensLeaveTheStateAlone) {
  auto g = MustCompile(R"gbnf(root ::= "ab" | "abab")gbnf");
  ASSERT_NE(g, nullptr);
  auto masker = std::make_shared<const TokenMasker>(
      std::vector<std::string>{"a", "b", "ab", "", "x"}, std::vector<int32_t>{3});
  Constraint c(g, masker);
  EXPECT_EQ(c.Accept(4).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(c.Accept(3).code(), absl::StatusCode::kFailedPrecondition);  // cannot end yet
  EXPECT_EQ(c.Accept(9).code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(c.Accept(2).ok());
  EXPECT_TRUE(c.CanEnd());
  EXPECT_FALSE(c.MustEnd());
  EXPECT_TRUE(Allowed(c.Allowed(), 3));
  EXPECT_TRUE(Allowed(c.Allowed(), 0));
  ASSERT_TRUE(c.Accept(0).ok());
  ASSERT_TRUE(c.Accept(1).ok());
  EXPECT_TRUE(c.MustEnd());
  EXPECT_TRUE(c.Accept(3).ok());
}

}  // namespace
}  // namespace tandem::grammar
