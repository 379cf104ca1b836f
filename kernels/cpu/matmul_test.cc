#include "kernels/cpu/matmul.h"

#include <bit>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "common/model/dequantize.h"
#include "common/util/half.h"
#include "gtest/gtest.h"
#include "kernels/cpu/vec_math.h"
#include "tests/quant_blocks.h"

namespace tandem::kernels {
namespace {

using model::GgmlType;

// Random weights of `type`: random quant bytes, finite random scales (smaller for the
// 256-element types, whose 6-bit sub-block scales multiply them again).
std::vector<uint8_t> RandomWeights(GgmlType type, int64_t n, int64_t k, std::mt19937& rng) {
  if (type == GgmlType::kF16 || type == GgmlType::kBF16) {
    std::vector<uint8_t> data(n * k * 2);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (int64_t i = 0; i < n * k; ++i) {
      const uint16_t h = type == GgmlType::kF16 ? FloatToHalf(u(rng)) : FloatToBf16(u(rng));
      std::memcpy(data.data() + 2 * i, &h, 2);
    }
    return data;
  }
  if (type != GgmlType::kF32) {
    return ::tandem::testing::RandomQuantRows(
        type, n, k, model::Traits(type).block_size == 256 ? 0.002f : 0.05f, rng);
  }
  std::vector<uint8_t> data(n * k * 4);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (int64_t i = 0; i < n * k; ++i) {
    float f = u(rng);
    std::memcpy(data.data() + 4 * i, &f, 4);
  }
  return data;
}

// Row lengths to try: awkward multiples of the type's block.
std::vector<int64_t> Widths(GgmlType type, std::initializer_list<int64_t> blocks_of_32) {
  const int64_t unit = std::max<int64_t>(32, model::Traits(type).block_size);
  std::vector<int64_t> out;
  for (int64_t b : blocks_of_32) out.push_back(std::max<int64_t>(unit, b * 32 / unit * unit));
  return out;
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
  for (int64_t k : Widths(type(), {1, 2, 18})) {
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
  const int64_t k = Widths(type(), {18})[0], n = 37, m = 23;
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

// The SIMD kernels' arithmetic as matmul.h states it, in scalar code: weights from
// model::Dequantize; 16 lanes, each a chain of correctly rounded fused multiply-adds;
// the lanes summed as (l + l⊕8), (+ l⊕4), (+ l⊕2), (+ l⊕1).
std::vector<float> LaneModel(const float* x, int64_t m, GgmlType type, const uint8_t* data,
                             int64_t n, int64_t k) {
  const WeightMatrix w{type, n, k, data};
  std::vector<float> out(m * n), row(k);
  for (int64_t j = 0; j < n; ++j) {
    EXPECT_TRUE(model::Dequantize(type, {data + j * w.RowBytes(), w.RowBytes()}, row).ok());
    for (int64_t i = 0; i < m; ++i) {
      float lanes[16] = {};
      for (int64_t t = 0; t < k; t += 16)
        for (int l = 0; l < 16; ++l) lanes[l] = std::fma(x[i * k + t + l], row[t + l], lanes[l]);
      for (int width = 8; width >= 1; width /= 2)
        for (int l = 0; l < width; ++l) lanes[l] = lanes[l] + lanes[l + width];
      out[i * n + j] = lanes[0];
    }
  }
  return out;
}

// (type, cap the kernels to AVX2 + FMA)
class MatMulSimdTest : public ::testing::TestWithParam<std::tuple<GgmlType, bool>> {
 protected:
  void SetUp() override { ForceAvx2Kernels(std::get<1>(GetParam())); }
  void TearDown() override { ForceAvx2Kernels(false); }
  GgmlType type() const { return std::get<0>(GetParam()); }
};

// AVX-512 where the CPU has it, and AVX2 + FMA: both give the stated bits.
TEST_P(MatMulSimdTest, GivesTheStatedArithmeticsBits) {
  if (!HaveAvx512() && !HaveAvx2Fma()) GTEST_SKIP() << "no AVX2 + FMA on this CPU";
  std::mt19937 rng(11);
  ThreadPool two(2);
  for (int64_t k : Widths(type(), {1, 18})) {
    const int64_t n = 37;
    auto wdata = RandomWeights(type(), n, k, rng);
    WeightMatrix w{type(), n, k, wdata.data()};
    for (int64_t m : {1, 2, 3, 4, 7, 8, 19}) {  // direct tiles of every height, then panels
      auto x = RandomX(m, k, rng);
      std::vector<float> got(m * n, NAN);
      MatMul(x.data(), m, w, got.data(), &two);
      const std::vector<float> want = LaneModel(x.data(), m, type(), wdata.data(), n, k);
      for (int64_t i = 0; i < m * n; ++i) {
        ASSERT_EQ(std::bit_cast<uint32_t>(got[i]), std::bit_cast<uint32_t>(want[i]))
            << MatMulIsa() << " m=" << m << " k=" << k << " output " << i << ": " << got[i]
            << " vs " << want[i];
      }
    }
  }
}

// Every type MatMul takes: the hand-vectorized ones and the chunk-decoded ones.
const GgmlType kTypes[] = {GgmlType::kF32,    GgmlType::kF16,  GgmlType::kBF16,   GgmlType::kQ8_0,
                           GgmlType::kQ4_0,   GgmlType::kQ4_1, GgmlType::kQ5_0,   GgmlType::kQ5_1,
                           GgmlType::kIQ4_NL, GgmlType::kQ2_K, GgmlType::kQ3_K,   GgmlType::kQ4_K,
                           GgmlType::kQ5_K,   GgmlType::kQ6_K, GgmlType::kIQ4_XS, GgmlType::kMXFP4};

INSTANTIATE_TEST_SUITE_P(Types, MatMulTest,
                         ::testing::Combine(::testing::ValuesIn(kTypes),
                                            ::testing::Values(false, true)),
                         [](const auto& info) {
                           return std::string(model::GgmlTypeName(std::get<0>(info.param))) +
                                  (std::get<1>(info.param) ? "_portable" : "_native");
                         });
INSTANTIATE_TEST_SUITE_P(Types, MatMulSimdTest,
                         ::testing::Combine(::testing::ValuesIn(kTypes),
                                            ::testing::Values(false, true)),
                         [](const auto& info) {
                           return std::string(model::GgmlTypeName(std::get<0>(info.param))) +
                                  (std::get<1>(info.param) ? "_avx2" : "_native");
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
