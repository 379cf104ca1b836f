#include "common/engine/sampler.h"

#include <cmath>
#include <map>
#include <numeric>
#include <random>
#include <vector>

#include "common/engine/philox.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"

namespace tandem::engine {
namespace {

const std::vector<float> kLogits = {2.0f, 1.5f, 1.5f, 0.3f, -0.7f, 0.9f, -2.0f, 1.1f, 0.0f, -0.2f};

// The distribution the parameters define, computed here from the definitions in
// sampler.h with plain sorting, independently of Sampler::Distribution.
std::vector<double> Analytic(const SamplingParams& p) {
  const size_t n = kLogits.size();
  std::vector<double> prob(n);
  double z = 0;
  for (size_t i = 0; i < n; ++i) z += prob[i] = std::exp(kLogits[i] / p.temperature);
  for (auto& x : prob) x /= z;
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return prob[a] > prob[b]; });
  std::vector<bool> keep(n, true);
  if (p.top_k > 0) {
    for (size_t r = p.top_k; r < n; ++r) keep[order[r]] = false;
  }
  double cum = 0;
  bool reached = false;
  for (size_t r = 0; r < n; ++r) {
    if (!keep[order[r]]) continue;
    if (reached) keep[order[r]] = false;
    cum += prob[order[r]];
    if (cum >= p.top_p) reached = true;
  }
  for (size_t i = 0; i < n; ++i) {
    if (prob[i] < p.min_p * prob[order[0]]) keep[i] = false;
  }
  double kept = 0;
  for (size_t i = 0; i < n; ++i) kept += keep[i] ? prob[i] : 0;
  for (size_t i = 0; i < n; ++i) prob[i] = keep[i] ? prob[i] / kept : 0;
  return prob;
}

// Pearson chi-square over the categories with positive expectation; any draw of a
// zero-probability token fails outright.
void ExpectMatches(const SamplingParams& p, uint64_t seed) {
  const int kDraws = 20000;
  const std::vector<double> want = Analytic(p);
  std::vector<int> counts(kLogits.size(), 0);
  for (int i = 0; i < kDraws; ++i) {
    counts[Sampler::Sample(kLogits, p, seed, i, {}, {}).token]++;
  }
  double chi2 = 0;
  int dof = -1;
  for (size_t t = 0; t < want.size(); ++t) {
    if (want[t] == 0) {
      EXPECT_EQ(counts[t], 0) << "token " << t << " is excluded but was drawn";
      continue;
    }
    const double e = want[t] * kDraws;
    chi2 += (counts[t] - e) * (counts[t] - e) / e;
    ++dof;
  }
  // Critical values of chi-square at p = 0.001 for 0..9 degrees of freedom.
  const double kCritical[] = {0, 10.83, 13.82, 16.27, 18.47, 20.52, 22.46, 24.32, 26.12, 27.88};
  ASSERT_GE(dof, 0);
  if (dof > 0) {
    EXPECT_LT(chi2, kCritical[dof]) << "dof " << dof;
  }
}

TEST(SamplerStatistics, Temperature) {
  SamplingParams p;
  p.temperature = 0.8;
  ExpectMatches(p, 1);
  p.temperature = 1.7;
  ExpectMatches(p, 2);
}

TEST(SamplerStatistics, TopK) {
  SamplingParams p;
  p.temperature = 1.0;
  p.top_k = 4;  // the tie at 1.5 sits inside the top 4
  ExpectMatches(p, 3);
}

TEST(SamplerStatistics, TopP) {
  SamplingParams p;
  p.temperature = 1.0;
  p.top_p = 0.6;
  ExpectMatches(p, 4);
}

TEST(SamplerStatistics, MinP) {
  SamplingParams p;
  p.temperature = 0.9;
  p.min_p = 0.3;
  ExpectMatches(p, 5);
}

TEST(SamplerStatistics, AllTogether) {
  SamplingParams p;
  p.temperature = 1.3;
  p.top_k = 6;
  p.top_p = 0.9;
  p.min_p = 0.1;
  ExpectMatches(p, 6);
}

TEST(Sampler, GreedyPicksTheLowestIdAmongTies) {
  SamplingParams p;
  p.temperature = 0;
  std::vector<float> l = {0.1f, 3.0f, 3.0f, -1.0f};
  EXPECT_EQ(Sampler::Sample(l, p, 0, 0, {}, {}).token, 1);
}

TEST(Sampler, SameSeedAndPositionGiveTheSameToken) {
  SamplingParams p;
  p.temperature = 1.0;
  for (int pos = 0; pos < 50; ++pos) {
    EXPECT_EQ(Sampler::Sample(kLogits, p, 77, pos, {}, {}).token,
              Sampler::Sample(kLogits, p, 77, pos, {}, {}).token);
  }
  // And different positions are not all the same draw.
  std::map<int32_t, int> seen;
  for (int pos = 0; pos < 50; ++pos) seen[Sampler::Sample(kLogits, p, 77, pos, {}, {}).token]++;
  EXPECT_GT(seen.size(), 3u);
}

TEST(Sampler, PenaltiesChangeLogitsExactlyAsSpecified) {
  std::vector<float> l = {2.0f, -1.0f, 0.5f, 3.0f, -2.0f};
  SamplingParams p;
  p.repetition_penalty = 2.0;
  p.frequency_penalty = 0.25;
  p.presence_penalty = 0.5;
  const std::vector<int32_t> prompt = {0, 1};
  const std::vector<int32_t> output = {3, 3, 4, 3};
  Sampler::ApplyPenalties(l, p, prompt, output);
  EXPECT_FLOAT_EQ(l[0], 1.0f);                         // seen in prompt, positive: ÷ 2
  EXPECT_FLOAT_EQ(l[1], -2.0f);                        // seen in prompt, negative: × 2
  EXPECT_FLOAT_EQ(l[2], 0.5f);                         // unseen
  EXPECT_FLOAT_EQ(l[3], 3.0f / 2 - 0.25f * 3 - 0.5f);  // 3 times in output
  EXPECT_FLOAT_EQ(l[4], -2.0f * 2 - 0.25f - 0.5f);     // once in output
}

TEST(Sampler, LogitBiasComesBeforeThePenalties) {
  std::vector<float> l = {2.0f, -1.0f, 0.5f, 3.0f};
  SamplingParams p;
  p.repetition_penalty = 2.0;
  p.logit_bias = {{1, 3.0f}, {2, -0.5f}, {3, -100.0f}};
  const std::vector<int32_t> prompt = {1};
  Sampler::ApplyPenalties(l, p, prompt, {});
  EXPECT_FLOAT_EQ(l[0], 2.0f);
  EXPECT_FLOAT_EQ(l[1], (-1.0f + 3.0f) / 2);  // biased to 2, then seen in the prompt: ÷ 2
  EXPECT_FLOAT_EQ(l[2], 0.0f);
  EXPECT_FLOAT_EQ(l[3], -97.0f);
  // Greedy follows the bias: no longer the backend's plain arg-max.
  EXPECT_FALSE(Sampler::IsPlainGreedy(p));
  p = {};
  p.temperature = 0;
  p.logit_bias = {{0, -100.0f}};  // the arg-max, banned in effect
  EXPECT_EQ(Sampler::Sample(kLogits, p, 0, 0, {}, {}).token, 1);
  p.temperature = 1.0;
  p.logit_bias = {{9, 100.0f}};
  for (int64_t pos = 0; pos < 50; ++pos)
    EXPECT_EQ(Sampler::Sample(kLogits, p, 7, pos, {}, {}).token, 9);
}

// A valid but tiny repetition penalty divides positive logits past float's range (found
// by prefill_service_fuzzer): they stay finite, so sampling and logprobs still see a
// distribution — the seen tokens hold it all — and never an index of −1. Logits that are
// not finite at all (NaN from a broken model) fall back to the arg-max.
TEST(Sampler, ExtremePenaltiesAndNonFiniteLogitsStillGiveAToken) {
  SamplingParams p;
  p.repetition_penalty = 1e-119;
  p.logprobs = 2;
  const std::vector<int32_t> prompt = {2, 5};  // logits 1.5 and 0.5: both > 0
  for (int64_t pos = 0; pos < 20; ++pos) {
    const SampleResult r = Sampler::Sample(kLogits, p, 3, pos, prompt, {});
    EXPECT_TRUE(r.token == 2 || r.token == 5) << r.token;
    EXPECT_TRUE(std::isfinite(r.logprob)) << r.logprob;
  }
  std::vector<float> bad(kLogits.begin(), kLogits.end());
  for (float& l : bad) l = std::nanf("");
  bad[4] = 1.0f;
  p = {};
  p.logprobs = 1;
  EXPECT_EQ(Sampler::Sample(bad, p, 3, 0, {}, {}).token, 4);
}

TEST(Sampler, LogprobsAreLogSoftmaxAfterPenalties) {
  SamplingParams p;
  p.temperature = 0;
  p.logprobs = 3;
  SampleResult r = Sampler::Sample(kLogits, p, 0, 0, {}, {});
  double z = 0;
  for (float l : kLogits) z += std::exp(l);
  EXPECT_EQ(r.token, 0);
  EXPECT_NEAR(r.logprob, 2.0 - std::log(z), 1e-5);
  ASSERT_EQ(r.top.size(), 3u);
  EXPECT_EQ(r.top[0].token, 0);
  EXPECT_EQ(r.top[1].token, 1);  // tie 1.5: lower id first
  EXPECT_EQ(r.top[2].token, 2);
}

// SampleRows answers plain greedy rows with the backend's arg-max and samples the rest
// on the host: every row's token (and logprobs) must equal Sample() on that row alone.
TEST(Sampler, SampleRowsMixesDeviceArgMaxAndHostSampling) {
  kernels::CpuBackend backend({.num_threads = 2, .fence = true});
  const int64_t rows = 6, vocab = 1000;
  std::vector<float> logits(rows * vocab);
  std::mt19937 rng(5);
  std::normal_distribution<float> g(0.f, 2.f);
  for (float& x : logits) x = std::round(g(rng) * 4) / 4;  // many exact ties
  auto buffer = *backend.Allocate(kernels::MemoryKind::kActivations, rows * vocab * 4 + 64);
  backend.CopyToDevice(logits.data(), *buffer, 0, rows * vocab * 4);
  const kernels::Tensor t{buffer.get(), 0, model::GgmlType::kF32, rows, vocab};
  const kernels::Tensor ids{buffer.get(), rows * vocab * 4, model::GgmlType::kI32, 1, 16};
  std::vector<SamplingParams> params(rows);
  params[1].temperature = 0.7;         // sampled
  params[2].repetition_penalty = 1.3;  // greedy with a penalty
  params[3].logprobs = 2;              // greedy with logprobs
  params[5].temperature = 1.0;
  params[5].top_k = 5;
  for (int r : {0, 2, 3, 4}) params[r].temperature = 0;
  const std::vector<int32_t> prompt = {3, 4, 5}, output = {7};
  std::vector<SampleRow> sample_rows;
  for (int64_t r = 0; r < rows; ++r)
    sample_rows.push_back({&params[r], 11 + static_cast<uint64_t>(r), 40, prompt, output});
  auto got = Sampler::SampleRows(backend, t, ids, sample_rows);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(Sampler::IsPlainGreedy(params[0]));
  EXPECT_FALSE(Sampler::IsPlainGreedy(params[2]));
  for (int64_t r = 0; r < rows; ++r) {
    const SampleResult want = Sampler::Sample({logits.data() + r * vocab, size_t(vocab)}, params[r],
                                              11 + r, 40, prompt, output);
    EXPECT_EQ((*got)[r].token, want.token) << r;
    EXPECT_EQ((*got)[r].logprob, want.logprob) << r;
    ASSERT_EQ((*got)[r].top.size(), want.top.size()) << r;
    for (size_t i = 0; i < want.top.size(); ++i) {
      EXPECT_EQ((*got)[r].top[i].token, want.top[i].token) << r;
      EXPECT_EQ((*got)[r].top[i].logprob, want.top[i].logprob) << r;
    }
  }
}

TEST(SamplingParams, ValidationNamesTheField) {
  auto msg = [](SamplingParams p) { return std::string(p.Validate(100, 1000).message()); };
  SamplingParams p;
  EXPECT_TRUE(p.Validate(100, 1000).ok());
  p.max_tokens = 0;
  EXPECT_THAT(msg(p), ::testing::StartsWith("max_tokens"));
  p = {};
  p.max_tokens = 5000;
  EXPECT_THAT(msg(p), ::testing::StartsWith("max_tokens"));
  p = {};
  p.temperature = -0.1;
  EXPECT_THAT(msg(p), ::testing::StartsWith("temperature"));
  p.temperature = NAN;
  EXPECT_THAT(msg(p), ::testing::StartsWith("temperature"));
  p = {};
  p.top_p = 0;
  EXPECT_THAT(msg(p), ::testing::StartsWith("top_p"));
  p.top_p = 1.01;
  EXPECT_THAT(msg(p), ::testing::StartsWith("top_p"));
  p = {};
  p.min_p = 1.5;
  EXPECT_THAT(msg(p), ::testing::StartsWith("min_p"));
  p = {};
  p.top_k = -2;
  EXPECT_THAT(msg(p), ::testing::StartsWith("top_k"));
  p = {};
  p.repetition_penalty = 0;
  EXPECT_THAT(msg(p), ::testing::StartsWith("repetition_penalty"));
  p = {};
  p.presence_penalty = 2.5;
  EXPECT_THAT(msg(p), ::testing::StartsWith("presence_penalty"));
  p = {};
  p.frequency_penalty = -3;
  EXPECT_THAT(msg(p), ::testing::StartsWith("frequency_penalty"));
  p = {};
  p.logprobs = 21;
  EXPECT_THAT(msg(p), ::testing::StartsWith("logprobs"));
  p = {};
  p.stop_token_ids = {100};
  EXPECT_THAT(msg(p), ::testing::StartsWith("stop_token_ids"));
  p = {};
  p.logit_bias = {{100, 1.0f}};
  EXPECT_THAT(msg(p), ::testing::StartsWith("logit_bias"));
  p.logit_bias = {{1, 100.5f}};
  EXPECT_THAT(msg(p), ::testing::StartsWith("logit_bias"));
  p.logit_bias = {{2, 1.0f}, {1, 1.0f}};
  EXPECT_THAT(msg(p), ::testing::StartsWith("logit_bias"));
  p.logit_bias = {{1, NAN}};
  EXPECT_THAT(msg(p), ::testing::StartsWith("logit_bias"));
}

TEST(Philox, MatchesTheKnownAnswerVector) {
  // Random123's kat_vectors: philox4x32-10 with counter and key all ones.
  auto r = Philox4x32({0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff});
  EXPECT_THAT(r, ::testing::ElementsAre(0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu));
  auto z = Philox4x32({0, 0, 0, 0}, {0, 0});
  EXPECT_THAT(z, ::testing::ElementsAre(0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u));
}

}  // namespace
}  // namespace tandem::engine
