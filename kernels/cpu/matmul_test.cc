#include "kernels/cpu/matmul.h"

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "common/util/half.h"
#include "gtest/gtest.h"
#include "kernels/cpu/vec_math.h"

namespace tandem::kernels {
namespace {

using model::GgmlType;

// Random weights of `type`: random quant bytes, finite random scales.
std::vector<uint8_t> RandomWeights(GgmlType type, int64_t n, int64_t k, std::mt19937& rng) {
  WeightMatrix w{type, n, k, nullptr};
  std::vector<uint8_t> data(n * w.RowBytes());
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  if (type == GgmlType::kF32) {
    for (int64_t i = 0; i < n * k; ++i) {
      float f = u(rng);
      std::memcpy(data.data() + 4 * i, &f, 4);
    }
    return data;
  }
  for (auto& b : data) b = static_cast<uint8_t>(rng());
  const auto& t = model::Traits(type);
  for (int64_t blk = 0; blk < n * k / t.block_size; ++blk) {
    uint16_t* scales = reinterpret_cast<uint16_t*>(data.data() + blk * t.type_size);
    scales[0] = FloatToHalf(u(rng) * 0.05f);
    if (type == GgmlType::kQ4_1) scales[1] = FloatToHalf(u(rng) * 0.2f);
  }
  return data;
}

std::vector<float> RandomX(int64_t m, int64_t k, std::mt19937& rng) {
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> x(m * k);
  for (auto& v : x) v = g(rng);
  return x;
}

// (type, force the portable kernels)
class MatMulTest : public ::testing::TestWithParam<std::tuple<GgmlType, bool>> {
 protected:
  void SetUp() override { ForcePortableKernels(std::get<1>(GetParam())); }
  void TearDown() override { ForcePortableKernels(false); }
  GgmlType type() const { return std::get<0>(GetParam()); }
};

TEST_P(MatMulTest, MatchesReferenceAtAwkwardSizes) {
  std::mt19937 rng(42);
  ThreadPool pool(2);
  for (int64_t k : {32, 64, 576}) {
    for (int64_t n : {1, 3, 4, 5, 17, 64}) {
      auto wdata = RandomWeights(type(), n, k, rng);
      WeightMatrix w{type(), n, k, wdata.data()};
      for (int64_t m : {1, 5, 7, 8, 17, 33}) {
        auto x = RandomX(m, k, rng);
        std::vector<float> got(m * n, NAN), want(m * n);
        MatMul(x.data(), m, w, got.data(), &pool);
        MatMulReference(x.data(), m, w, want.data());
        for (int64_t i = 0; i < m * n; ++i) {
          // float32 accumulation of k products: error ≲ k·eps·Σ|x·w|; bound it loosely.
          ASSERT_NEAR(got[i], want[i],
                      1e-4 * std::sqrt(static_cast<double>(k)) * (1 + std::fabs(want[i])))
              << "m=" << m << " n=" << n << " k=" << k << " i=" << i;
        }
      }
    }
  }
}

TEST_P(MatMulTest, EachRowIsIndependentOfTheBatchAndThreads) {
  std::mt19937 rng(7);
  const int64_t k = 576, n = 37, m = 23;
  auto wdata = RandomWeights(type(), n, k, rng);
  WeightMatrix w{type(), n, k, wdata.data()};
  auto x = RandomX(m, k, rng);
  ThreadPool two(2);
  std::vector<float> batched(m * n);
  MatMul(x.data(), m, w, batched.data(), &two);  // panel path (m ≥ 8)
  for (int64_t i = 0; i < m; ++i) {
    std::vector<float> alone(n), small(3 * n);
    MatMul(x.data() + i * k, 1, w, alone.data(), nullptr);  // direct path, one thread
    ASSERT_EQ(0, std::memcmp(alone.data(), batched.data() + i * n, n * sizeof(float)))
        << "row " << i;
    if (i + 3 <= m) {
      MatMul(x.data() + i * k, 3, w, small.data(), &two);
      ASSERT_EQ(0, std::memcmp(small.data(), batched.data() + i * n, 3 * n * sizeof(float)));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Types, MatMulTest,
                         ::testing::Combine(::testing::Values(GgmlType::kF32, GgmlType::kQ8_0,
                                                              GgmlType::kQ4_0, GgmlType::kQ4_1),
                                            ::testing::Values(false, true)),
                         [](const auto& info) {
                           return std::string(model::GgmlTypeName(std::get<0>(info.param))) +
                                  (std::get<1>(info.param) ? "_portable" : "_native");
                         });

}  // namespace
}  // namespace tandem::kernels

namespace tandem::kernels {
namespace {

TEST(ReduceAdd512x4, IsBitIdenticalToFourSingleSums) {
  if (!HaveAvx512()) GTEST_SKIP() << "no AVX-512 on this CPU";
  std::mt19937 rng(9);
  std::normal_distribution<float> g(0.0f, 1e3f);
  for (int trial = 0; trial < 1000; ++trial) {
    alignas(64) float v[4][16];
    for (auto& row : v)
      for (float& x : row) x = g(rng) * (trial % 2 ? 1e-6f : 1.0f);
    float got[4], want[4];
    [&]() TANDEM_AVX512 {
      __m512 a = _mm512_load_ps(v[0]), b = _mm512_load_ps(v[1]);
      __m512 c = _mm512_load_ps(v[2]), d = _mm512_load_ps(v[3]);
      ReduceAdd512x4(a, b, c, d, got);
      want[0] = ReduceAdd512(a);
      want[1] = ReduceAdd512(b);
      want[2] = ReduceAdd512(c);
      want[3] = ReduceAdd512(d);
    }();
    ASSERT_EQ(0, std::memcmp(got, want, sizeof(got))) << "trial " << trial;
  }
}

}  // namespace
}  // namespace tandem::kernels
