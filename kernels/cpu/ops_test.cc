#include "kernels/cpu/ops.h"

#include <cmath>
#include <fstream>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/vec_math.h"
#include "kernels/testing/numeric.h"
#include "nlohmann/json.hpp"
#include "tests/test_paths.h"

namespace tandem::kernels {
namespace {

using ::tandem::kernels::testing::Noise;

// The bandwidth probe's sum is a sum: small integers (every partial sum exact in float,
// whatever the order) at lengths that end mid-vector, on every path the CPU has.
TEST(Ops, StreamSumIsTheSumOnEveryPath) {
  for (int64_t n : {0, 1, 15, 31, 64, 65, 1000, 4099, 100003}) {
    std::vector<float> x(static_cast<size_t>(n));
    int64_t want = 0;
    for (int64_t i = 0; i < n; ++i) {
      x[static_cast<size_t>(i)] = static_cast<float>(i % 7 - 2);
      want += i % 7 - 2;
    }
    ForcePortableKernels(true);
    EXPECT_EQ(StreamSum(x.data(), n), static_cast<float>(want)) << "portable n " << n;
    ForcePortableKernels(false);
    ForceAvx2Kernels(true);
    EXPECT_EQ(StreamSum(x.data(), n), static_cast<float>(want)) << "avx2 n " << n;
    ForceAvx2Kernels(false);
    EXPECT_EQ(StreamSum(x.data(), n), static_cast<float>(want)) << "n " << n;
  }
}

TEST(Ops, RmsNormMatchesReference) {
  std::mt19937 rng(1);
  for (int64_t dim : {1, 15, 17, 64, 576, 1000}) {
    for (int64_t rows : {1, 7, 17}) {
      auto x = Noise(rows * dim, rng, 3.0f), w = Noise(dim, rng);
      std::vector<float> got(rows * dim), want(rows * dim);
      RmsNorm(x.data(), w.data(), rows, dim, 1e-5f, got.data());
      RmsNormReference(x.data(), w.data(), rows, dim, 1e-5f, want.data());
      for (size_t i = 0; i < got.size(); ++i)
        ASSERT_NEAR(got[i], want[i], 1e-5 * (1 + std::fabs(want[i])));
    }
  }
}

TEST(Ops, RopeMatchesReferenceForBothStylesAndScalings) {
  std::mt19937 rng(2);
  std::vector<float> factors = {1, 1, 2, 4, 8, 1, 1, 3};
  for (RopeStyle style : {RopeStyle::kAdjacent, RopeStyle::kHalves}) {
    for (int32_t head_dim : {16, 64}) {
      RopeParams p;
      p.head_dim = head_dim;
      p.rope_dim = head_dim;
      p.theta = 100000.0f;
      p.style = style;
      const float* ff = nullptr;
      if (head_dim == 16) {
        ff = factors.data();
        p.position_scale = 2.0f;
      }
      std::vector<int32_t> pos = {0, 1, 15, 17, 1000, 4097, 8191};
      auto x = Noise(pos.size() * 3 * head_dim, rng);
      auto y = x;
      Rope(x.data(), pos.size(), 3, pos, p, ff);
      RopeReference(y.data(), pos.size(), 3, pos, p, ff);
      // The two round the inverse frequency each its own way (powf; exp and log in
      // double): one float32 rounding apart, times the position.
      for (size_t t = 0; t < pos.size(); ++t) {
        const double tol = 2e-6 + 2.5e-7 * pos[t] / p.position_scale;
        for (int32_t k = 0; k < 3 * head_dim; ++k) {
          const size_t i = t * 3 * head_dim + k;
          ASSERT_NEAR(x[i], y[i], tol * (1 + std::fabs(y[i])));
        }
      }
    }
  }
}

// RoPE against transformers' own (tests/data/rope_golden.json, made by
// tests/reference/make_rope_golden.py): the default rotation, Llama 3's scaled
// frequencies (given as the divisors a GGUF's rope_freqs carries), linear position
// scaling and YaRN with gpt-oss's and Qwen3's parameters (YarnFreqFactors' divisors,
// whose frequencies are transformers' within 1e-6 relative, and its attention factor),
// at positions 0 to 8191, in both pair orders — halves (NeoX: pairs (i, i + d/2),
// transformers' layout) and adjacent (pairs (2i, 2i + 1), GGUF's permuted llama layout,
// the golden rows permuted to match) — for the kernel and the reference. Both sides
// compute the angle in float32, so the bound grows with the position: one float32
// rounding of the inverse frequency, times the position.
TEST(Ops, RopeMatchesTransformersInBothPairOrders) {
  std::ifstream in(::tandem::testing::TestDataPath("rope_golden.json"));
  ASSERT_TRUE(in.good());
  const nlohmann::json golden = nlohmann::json::parse(in);
  ASSERT_EQ(golden.at("cases").size(), 5u);
  int yarn_cases = 0;
  for (const auto& c : golden.at("cases")) {
    SCOPED_TRACE(c.at("name").get<std::string>());
    const int32_t d = c.at("head_dim"), half = d / 2;
    const std::vector<int32_t> pos = c.at("positions");
    std::vector<float> factors;
    if (!c.at("freq_factors").is_null()) factors = c.at("freq_factors").get<std::vector<float>>();
    float attention_factor = 1.0f;
    if (c.contains("yarn")) {
      ++yarn_cases;
      const nlohmann::json& y = c.at("yarn");
      const YarnParams params{y.at("factor"), y.at("original_max_position_embeddings"),
                              y.at("beta_fast"), y.at("beta_slow"), y.at("truncate")};
      factors = YarnFreqFactors(params, c.at("theta"), d);
      const std::vector<double> want = c.at("inv_freq");
      ASSERT_EQ(factors.size(), want.size());
      for (int32_t i = 0; i < half; ++i) {
        const float plain =
            1.0f / std::pow(c.at("theta").get<float>(), static_cast<float>(2 * i) / d);
        EXPECT_NEAR(plain / factors[i], want[i], 1e-6 * want[i]) << "pair " << i;
      }
      attention_factor = static_cast<float>(YarnAttentionFactor(y.at("factor")));
      EXPECT_NEAR(attention_factor, c.at("attention_factor").get<double>(), 1e-7);
    }
    for (RopeStyle style : {RopeStyle::kHalves, RopeStyle::kAdjacent}) {
      RopeParams p;
      p.attention_factor = attention_factor;
      p.head_dim = d;
      p.rope_dim = d;
      p.theta = c.at("theta");
      p.position_scale = c.at("position_scale");
      p.style = style;
      // Element j of a golden row sits at slot(j) in this style's layout.
      auto slot = [&](int32_t j) {
        if (style == RopeStyle::kHalves) return j;
        return j < half ? 2 * j : 2 * (j - half) + 1;
      };
      std::vector<float> x(pos.size() * d);
      for (size_t t = 0; t < pos.size(); ++t)
        for (int32_t j = 0; j < d; ++j) x[t * d + slot(j)] = c.at("x")[t][j];
      for (bool reference : {false, true}) {
        SCOPED_TRACE(reference ? "RopeReference" : "Rope");
        std::vector<float> y = x;
        (reference ? RopeReference : Rope)(y.data(), pos.size(), 1, pos, p,
                                           factors.empty() ? nullptr : factors.data());
        for (size_t t = 0; t < pos.size(); ++t) {
          const double tol = 2e-6 + 2.5e-7 * pos[t] / p.position_scale;
          for (int32_t j = 0; j < d; ++j) {
            const float want = c.at("out")[t][j];
            ASSERT_NEAR(y[t * d + slot(j)], want, tol * (1 + std::fabs(want)))
                << "position " << pos[t] << ", element " << j;
          }
        }
      }
    }
  }
  EXPECT_EQ(yarn_cases, 2);
}

TEST(Ops, RopeAtPositionZeroIsIdentityAndPreservesNorms) {
  std::mt19937 rng(3);
  RopeParams p{64, 64, 10000.0f};
  auto x = Noise(2 * 64, rng);
  auto y = x;
  std::vector<int32_t> pos = {0, 77};
  Rope(y.data(), 2, 1, pos, p);
  for (int i = 0; i < 64; ++i) EXPECT_EQ(x[i], y[i]);
  double n0 = 0, n1 = 0;
  for (int i = 64; i < 128; ++i) n0 += x[i] * x[i], n1 += y[i] * y[i];
  EXPECT_NEAR(n0, n1, 1e-4 * n0);
}

TEST(Ops, SwiGluMatchesReference) {
  std::mt19937 rng(4);
  for (int64_t n : {1, 15, 17, 1536}) {
    auto g = Noise(n, rng, 4.0f), u = Noise(n, rng);
    std::vector<float> got(n), want(n);
    SwiGlu(g.data(), u.data(), n, got.data());
    SwiGluReference(g.data(), u.data(), n, want.data());
    for (int64_t i = 0; i < n; ++i) ASSERT_NEAR(got[i], want[i], 1e-6 * (1 + std::fabs(want[i])));
  }
}

// gpt-oss's clamped SwiGLU, on values well past its clamps (±7): against the
// double-precision reference, and at the clamps themselves.
TEST(Ops, SwigluOaiMatchesReferenceAndClamps) {
  std::mt19937 rng(24);
  for (int64_t n : {1, 17, 1536}) {
    auto g = Noise(n, rng, 12.0f), u = Noise(n, rng, 12.0f);
    std::vector<float> got(n), want(n);
    SwigluOai(g.data(), u.data(), n, got.data());
    SwigluOaiReference(g.data(), u.data(), n, want.data());
    for (int64_t i = 0; i < n; ++i) ASSERT_NEAR(got[i], want[i], 1e-6 * (1 + std::fabs(want[i])));
  }
  // gate 20 acts as 7; up 20 as 7 and −20 as −7 (so (u + 1) = −6).
  const float g[3] = {20.0f, 7.0f, 1.0f}, u[3] = {0.0f, 20.0f, -20.0f};
  float out[3];
  SwigluOai(g, u, 3, out);
  const float at7 = 7.0f / (1.0f + std::exp(-1.702f * 7.0f));
  EXPECT_EQ(out[0], at7);
  EXPECT_EQ(out[1], 8.0f * at7);
  EXPECT_NEAR(out[2], -6.0f / (1.0f + std::exp(-1.702f)), 1e-6);
}

TEST(Ops, GeGluMatchesReference) {
  std::mt19937 rng(14);
  for (int64_t n : {1, 15, 17, 1536}) {
    auto g = Noise(n, rng, 4.0f), u = Noise(n, rng);
    std::vector<float> got(n), want(n);
    GeGlu(g.data(), u.data(), n, got.data());
    GeGluReference(g.data(), u.data(), n, want.data());
    for (int64_t i = 0; i < n; ++i) ASSERT_NEAR(got[i], want[i], 1e-6 * (1 + std::fabs(want[i])));
  }
  // gelu(0) = 0, gelu(x) → x for large x and → 0 for very negative x.
  const float g[3] = {0.0f, 10.0f, -10.0f}, u[3] = {1.0f, 1.0f, 1.0f};
  float out[3];
  GeGlu(g, u, 3, out);
  EXPECT_EQ(out[0], 0.0f);
  EXPECT_NEAR(out[1], 10.0f, 1e-5);
  EXPECT_NEAR(out[2], 0.0f, 1e-5);
}

TEST(Ops, SoftCapBoundsAndKeepsSmallValues) {
  float x[4] = {0.0f, 1e-3f, 100.0f, -1e6f};
  SoftCap(x, 4, 30.0f);
  EXPECT_EQ(x[0], 0.0f);
  EXPECT_NEAR(x[1], 1e-3f, 1e-9);
  EXPECT_NEAR(x[2], 30.0 * std::tanh(100.0 / 30.0), 1e-4);
  EXPECT_EQ(x[3], -30.0f);
}

}  // namespace
}  // namespace tandem::kernels
