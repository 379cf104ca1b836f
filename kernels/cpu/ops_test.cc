#include "kernels/cpu/ops.h"

#include <cmath>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace tandem::kernels {
namespace {

std::vector<float> Random(size_t n, std::mt19937& rng, float scale = 1.0f) {
  std::normal_distribution<float> g(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = g(rng);
  return v;
}

TEST(Ops, RmsNormMatchesReference) {
  std::mt19937 rng(1);
  for (int64_t dim : {1, 15, 17, 64, 576, 1000}) {
    for (int64_t rows : {1, 7, 17}) {
      auto x = Random(rows * dim, rng, 3.0f), w = Random(dim, rng);
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
      auto x = Random(pos.size() * 3 * head_dim, rng);
      auto y = x;
      Rope(x.data(), pos.size(), 3, pos, p, ff);
      RopeReference(y.data(), pos.size(), 3, pos, p, ff);
      for (size_t i = 0; i < x.size(); ++i) ASSERT_NEAR(x[i], y[i], 2e-6 * (1 + std::fabs(y[i])));
    }
  }
}

TEST(Ops, RopeAtPositionZeroIsIdentityAndPreservesNorms) {
  std::mt19937 rng(3);
  RopeParams p{64, 64, 10000.0f};
  auto x = Random(2 * 64, rng);
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
    auto g = Random(n, rng, 4.0f), u = Random(n, rng);
    std::vector<float> got(n), want(n);
    SwiGlu(g.data(), u.data(), n, got.data());
    SwiGluReference(g.data(), u.data(), n, want.data());
    for (int64_t i = 0; i < n; ++i) ASSERT_NEAR(got[i], want[i], 1e-6 * (1 + std::fabs(want[i])));
  }
}

}  // namespace
}  // namespace tandem::kernels
