#include "common/engine/speculative.h"

#include <cmath>
#include <random>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tandem::engine {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

TEST(PromptLookup, ProposesWhatFollowedTheMostRecentLongestMatch) {
  //                               0  1  2  3  4  5  6  7  8  9 10
  const std::vector<int32_t> t = {5, 6, 7, 1, 5, 6, 8, 9, 2, 5, 6};
  // The tail "5 6" occurs at 4 (most recent) and 0: what followed at 4 is 8 9 2.
  EXPECT_THAT(ProposeByPromptLookup(t, 3, 1, 3), ElementsAre(8, 9, 2));
  EXPECT_THAT(ProposeByPromptLookup(t, 2, 1, 3), ElementsAre(8, 9));
  // A longer match wins over a more recent shorter one: "1 2 3" at 0 beats "3" at 5.
  const std::vector<int32_t> u = {1, 2, 3, 4, 4, 3, 7, 1, 2, 3};
  EXPECT_THAT(ProposeByPromptLookup(u, 2, 1, 3), ElementsAre(4, 4));
  EXPECT_THAT(ProposeByPromptLookup(u, 2, 1, 1), ElementsAre(7, 1));
  // Nothing to match, or no room after the match.
  EXPECT_THAT(ProposeByPromptLookup(std::vector<int32_t>{1, 2, 3}, 4, 1, 3), IsEmpty());
  EXPECT_THAT(ProposeByPromptLookup(std::vector<int32_t>{4}, 4, 1, 3), IsEmpty());
  EXPECT_THAT(ProposeByPromptLookup(std::vector<int32_t>{7, 7}, 4, 1, 3), ElementsAre(7));
  EXPECT_THAT(ProposeByPromptLookup(t, 0, 1, 3), IsEmpty());
  // min_n above every match: none.
  EXPECT_THAT(ProposeByPromptLookup(t, 3, 3, 3), IsEmpty());
}

std::vector<float> RandomLogits(std::mt19937& rng, int rows, int vocab, float scale = 1.5f) {
  std::normal_distribution<float> n(0.0f, scale);
  std::vector<float> l(static_cast<size_t>(rows) * vocab);
  for (float& x : l) x = n(rng);
  return l;
}

// VerifyDraft gives the tokens plain decoding gives, position by position, up to and
// including the first one the draft got wrong — at any temperature, with penalties
// that read the accepted tokens as context.
TEST(VerifyDraft, EqualsPlainDecodingUpToTheFirstWrongDraftToken) {
  std::mt19937 rng(11);
  const int vocab = 12, k = 5;
  const std::vector<int32_t> prompt = {1, 2, 3};
  const std::vector<int32_t> output = {4};
  for (double temperature : {0.0, 0.8, 1.5}) {
    SamplingParams p;
    p.temperature = temperature;
    p.repetition_penalty = 1.3;
    p.top_p = 0.95;
    for (int trial = 0; trial < 200; ++trial) {
      const std::vector<float> logits = RandomLogits(rng, k + 1, vocab);
      // Plain decoding of the same rows.
      std::vector<int32_t> plain, context = output;
      for (int i = 0; i <= k; ++i) {
        const SampleResult r = Sampler::Sample(std::span(logits).subspan(i * vocab, vocab), p, 77,
                                               10 + i, prompt, context);
        plain.push_back(r.token);
        context.push_back(r.token);
      }
      // A draft right for its first `good` tokens, then wrong.
      const int good = static_cast<int>(rng() % (k + 1));
      std::vector<int32_t> draft(plain.begin(), plain.begin() + k);
      if (good < k)
        draft[good] = (draft[good] + 1 + static_cast<int32_t>(rng() % (vocab - 1))) % vocab;
      const auto got = VerifyDraft(logits, vocab, draft, p, 77, 10, prompt, output);
      ASSERT_EQ(got.size(), static_cast<size_t>(good + 1)) << "T " << temperature;
      for (int i = 0; i <= good; ++i) EXPECT_EQ(got[i].token, plain[i]) << "position " << i;
    }
  }
}

// Pearson's chi-square of `counts` against `want` (probabilities), over the cells with
// positive expectation; a draw in a zero-probability cell fails outright. The bound is
// the chi-square quantile at p = 0.001 (Wilson–Hilferty).
void ExpectDistribution(const std::vector<int64_t>& counts, const std::vector<double>& want,
                        int64_t draws) {
  double chi2 = 0;
  int dof = -1;
  for (size_t c = 0; c < want.size(); ++c) {
    if (want[c] <= 0) {
      EXPECT_EQ(counts[c], 0) << "cell " << c << " has probability 0 but was drawn";
      continue;
    }
    const double e = want[c] * static_cast<double>(draws);
    chi2 += (counts[c] - e) * (counts[c] - e) / e;
    ++dof;
  }
  ASSERT_GE(dof, 3) << "too few tokens kept for the test to mean anything";
  const double h = 2.0 / (9.0 * dof);
  const double critical = dof * std::pow(1 - h + 3.0902 * std::sqrt(h), 3);
  EXPECT_LT(chi2, critical) << "dof " << dof;
}

std::vector<double> Softmax(std::span<const float> logits) {
  std::vector<double> q(logits.size());
  double z = 0;
  for (size_t t = 0; t < logits.size(); ++t) z += q[t] = std::exp(logits[t]);
  for (double& x : q) x /= z;
  return q;
}

int32_t Draw(const std::vector<double>& q, double u) {
  double cum = 0;
  for (size_t t = 0; t < q.size(); ++t) {
    cum += q[t];
    if (u < cum) return static_cast<int32_t>(t);
  }
  return static_cast<int32_t>(q.size()) - 1;
}

struct Setting {
  double temperature, top_p, min_p;
  SamplingParams Params() const {
    SamplingParams p;
    p.temperature = temperature;
    p.top_p = top_p;
    p.min_p = min_p;
    return p;
  }
};
constexpr Setting kSettings[] = {{0.8, 0.9, 0.0}, {1.5, 1.0, 0.05}};

// The next token with a stochastic draft (x ~ q, q another model's softmax) has the
// target's distribution: 40,000 draws per setting.
TEST(RejectionSample, NextTokenIsDistributedAsPlainSampling) {
  std::mt19937 rng(3);
  std::mt19937_64 u(4);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  const int vocab = 10;
  // Flat enough that top-p 0.9 and min-p 0.05 keep several tokens.
  const std::vector<float> target = RandomLogits(rng, 1, vocab, 0.6f);
  const std::vector<float> drafter = RandomLogits(rng, 1, vocab, 0.6f);
  const std::vector<double> q = Softmax(drafter);
  for (const Setting& s : kSettings) {
    const SamplingParams p = s.Params();
    const std::vector<double> want = TargetProbabilities(target, p);
    const int64_t draws = 40000;
    std::vector<int64_t> counts(vocab, 0);
    int64_t accepted = 0;
    for (int64_t i = 0; i < draws; ++i) {
      const int32_t x = Draw(q, uniform(u));
      const RejectionResult r = RejectionSample(want, q, x, uniform(u), uniform(u));
      accepted += r.accepted;
      ++counts[r.token];
    }
    ExpectDistribution(counts, want, draws);
    // And the acceptance rate is the theory's, sum over t of min(p, q).
    double expected = 0;
    for (int t = 0; t < vocab; ++t) expected += std::min(want[t], q[t]);
    EXPECT_NEAR(static_cast<double>(accepted) / draws, expected, 0.01);
  }
}

// Two tokens: the second target row depends on the first token, and so does the draft's
// second proposal. The joint distribution of the two tokens speculation emits is the
// target's p1(a) · p2(b | a), over all vocab² cells.
TEST(RejectionSample, TwoTokenJointIsDistributedAsPlainSampling) {
  std::mt19937 rng(5);
  std::mt19937_64 u(6);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  const int vocab = 6;
  const std::vector<float> target1 = RandomLogits(rng, 1, vocab, 0.6f);
  const std::vector<float> target2 = RandomLogits(rng, vocab, vocab, 0.6f);  // row a: after a
  const std::vector<float> draft1 = RandomLogits(rng, 1, vocab, 0.6f);
  const std::vector<float> draft2 = RandomLogits(rng, vocab, vocab, 0.6f);
  for (const Setting& s : kSettings) {
    const SamplingParams p = s.Params();
    const std::vector<double> p1 = TargetProbabilities(target1, p);
    std::vector<std::vector<double>> p2, q2;
    for (int a = 0; a < vocab; ++a) {
      p2.push_back(TargetProbabilities(std::span(target2).subspan(a * vocab, vocab), p));
      q2.push_back(Softmax(std::span(draft2).subspan(a * vocab, vocab)));
    }
    const std::vector<double> q1 = Softmax(draft1);
    std::vector<double> want(vocab * vocab);
    for (int a = 0; a < vocab; ++a) {
      for (int b = 0; b < vocab; ++b) want[a * vocab + b] = p1[a] * p2[a][b];
    }
    const int64_t draws = 60000;
    std::vector<int64_t> counts(vocab * vocab, 0);
    for (int64_t i = 0; i < draws; ++i) {
      // The drafter proposes two tokens; the target checks them in order.
      const int32_t x1 = Draw(q1, uniform(u));
      const int32_t x2 = Draw(q2[x1], uniform(u));
      const RejectionResult r1 = RejectionSample(p1, q1, x1, uniform(u), uniform(u));
      int32_t second;
      if (r1.accepted) {
        second = RejectionSample(p2[x1], q2[x1], x2, uniform(u), uniform(u)).token;
      } else {
        second = Draw(p2[r1.token], uniform(u));  // the draft's rest is dropped: plain
      }
      ++counts[r1.token * vocab + second];
    }
    ExpectDistribution(counts, want, draws);
  }
}

// Deterministic drafts through VerifyDraft: the first token is plain sampling's, whatever
// is proposed, so its distribution is the target's (the identity the engine relies on).
TEST(VerifyDraft, FirstTokenIsDistributedAsPlainSampling) {
  std::mt19937 rng(7);
  const int vocab = 10;
  const std::vector<float> logits = RandomLogits(rng, 2, vocab, 0.6f);
  for (const Setting& s : kSettings) {
    const SamplingParams p = s.Params();
    const std::vector<double> want = TargetProbabilities(std::span(logits).first(vocab), p);
    const int64_t draws = 20000;
    std::vector<int64_t> counts(vocab, 0);
    for (int64_t i = 0; i < draws; ++i) {
      const std::vector<int32_t> draft = {static_cast<int32_t>(i % vocab)};
      counts[VerifyDraft(logits, vocab, draft, p, 99, i, {}, {})[0].token]++;
    }
    ExpectDistribution(counts, want, draws);
  }
}

}  // namespace
}  // namespace tandem::engine
