// MatMulQ8 (the integer path of `--cpu-math fast`) at awkward sizes:
//   - every ISA path present gives the bits of the scalar restatement
//     (QuantizeRowsQ8Reference, MatMulQ8Reference), threads or not;
//   - against float32 activations the error stays within the bound the quantization
//     itself sets: Σ_blocks (max|x_b| / 254) · Σ |w_e| per output, computed from the data
//     (an independent check of what the integers compute);
//   - a row's outputs do not depend on the other rows (batch invariance), and a group
//     gives what separate calls give.
#include "kernels/cpu/matmul_q8.h"

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "common/model/dequantize.h"
#include "common/util/half.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/vec_math.h"
#include "kernels/testing/numeric.h"
#include "tests/quant_blocks.h"

namespace tandem::kernels {
namespace {

using model::GgmlType;
using ::tandem::kernels::testing::Noise;

constexpr GgmlType kTypes[] = {
    GgmlType::kQ8_0,   GgmlType::kQ4_0,  GgmlType::kQ4_1,  GgmlType::kQ5_0, GgmlType::kQ5_1,
    GgmlType::kIQ4_NL, GgmlType::kMXFP4, GgmlType::kQ2_K,  GgmlType::kQ3_K, GgmlType::kQ4_K,
    GgmlType::kQ5_K,   GgmlType::kQ6_K,  GgmlType::kIQ4_XS};

bool Fits(GgmlType type, int64_t k) { return k % model::Traits(type).block_size == 0; }

// Activations with the hard cases mixed into the odd rows: an all-zero block, a block of
// tiny values, a huge block, exact ties of x · 127 / max (k ≥ 128).
std::vector<float> Activations(int64_t m, int64_t k, std::mt19937& rng) {
  std::vector<float> x = Noise(m * k, rng, 2.0f);
  if (k >= 128) {
    // In the odd rows only: a block of 1e30 would swamp every other term of its row.
    for (int64_t i = 1; i < m; i += 2) {
      float* r = x.data() + i * k;
      std::fill(r, r + 32, 0.0f);
      for (int e = 32; e < 64; ++e) r[e] = (e % 2 ? 1e-31f : -3e-33f);
      for (int e = 64; e < 96; ++e) r[e] *= 1e30f;
      // max 127: x · 127 / max is x itself, so the halves are exact ties.
      for (int e = 96; e < 128; ++e) r[e] = static_cast<float>(e % 8) - 3.5f;
      r[96] = 127.0f;
    }
  }
  return x;
}

// n × k random weights of `type` (scales ±0.05) and the matrix over them (which stays
// valid when the struct is moved: the vector keeps its buffer).
struct RandomMatrix {
  std::vector<uint8_t> bytes;
  WeightMatrix w;
};
RandomMatrix MakeRandomMatrix(GgmlType type, int64_t n, int64_t k, std::mt19937& rng) {
  RandomMatrix r{::tandem::testing::RandomQuantRows(type, n, k, 0.05f, rng), {}};
  r.w = WeightMatrix{type, n, k, r.bytes.data()};
  return r;
}

// Every path the machine has: the portable one always, AVX2 where there is AVX2 (capped
// to it where there is more), AVX-512 VNNI's batches where there is that (capped to it
// where there is AMX), AMX's where there is that.
template <class F>
void OnEveryPath(F&& f) {
  ForcePortableKernels(true);
  f("portable");
  ForcePortableKernels(false);
  if (HaveAvx512Vnni()) {
    ForceAvx2Kernels(true);
    f(MatMulQ8Isa());
    ForceAvx2Kernels(false);
  }
  if (HaveAmxInt8()) {
    ForceAvx512Kernels(true);
    f(MatMulQ8Isa());
    ForceAvx512Kernels(false);
  }
  if (HaveAvx2Fma()) f(MatMulQ8Isa());
}

TEST(MatMulQ8, QuantizationEqualsTheScalarStatement) {
  std::mt19937 rng(1);
  for (int64_t m : {1, 3, 17}) {
    for (int64_t k : {32, 128, 256, 4128, 4352}) {
      for (int64_t block : {kQ8Block, kQ8SuperBlock}) {
        if (k % block != 0) continue;
        const auto x = Activations(m, k, rng);
        QuantizedRows want;
        QuantizeRowsQ8Reference(x.data(), m, k, &want, block);
        OnEveryPath([&](const char* path) {
          QuantizedRows got;
          ThreadPool pool(2);
          QuantizeRowsQ8(x.data(), m, k, &got, &pool, block);
          ASSERT_EQ(got.rows, m);
          ASSERT_EQ(got.block, block);
          EXPECT_TRUE(std::equal(want.q.begin(), want.q.begin() + m * k, got.q.begin()))
              << path << " m " << m << " k " << k << " block " << block;
          EXPECT_TRUE(std::equal(want.d.begin(), want.d.begin() + m * k / block, got.d.begin()))
              << path;
          EXPECT_TRUE(
              std::equal(want.sums16.begin(), want.sums16.begin() + m * k / 16, got.sums16.begin()))
              << path;
          EXPECT_TRUE(std::equal(want.block_sums.begin(), want.block_sums.begin() + m * k / 32,
                                 got.block_sums.begin()))
              << path;
        });
        // Sums are the quants' own (the scalar statement's, checked once here).
        for (int64_t b = 0; b < m * k / 32; ++b) {
          int32_t total = 0;
          for (int e = 0; e < 32; ++e) total += want.q[static_cast<size_t>(32 * b + e)];
          ASSERT_EQ(want.block_sums[static_cast<size_t>(b)], static_cast<float>(total));
        }
        for (int64_t h = 0; h < m * k / 16; ++h) {
          int32_t total = 0;
          for (int e = 0; e < 16; ++e) total += want.q[static_cast<size_t>(16 * h + e)];
          ASSERT_EQ(want.sums16[static_cast<size_t>(h)], total);
        }
        if (block == kQ8SuperBlock) {
          // One scale per 256: the largest |x| of the super-block maps to ±127.
          for (int64_t b = 0; b < m * k / block; ++b) {
            int biggest = 0;
            for (int e = 0; e < block; ++e)
              biggest = std::max(biggest, std::abs(int{want.q[b * block + e]}));
            EXPECT_TRUE(biggest == 127 || want.d[b] == 0.0f) << b;
          }
          continue;
        }
        // The hard blocks of row 1: zeros, tiny values (below 1e-30: zeros too), ties to
        // even.
        if (k >= 128 && m >= 2) {
          const int8_t* q1 = want.q.data() + k;
          const float* d1 = want.d.data() + k / 32;
          for (int e = 0; e < 64; ++e) EXPECT_EQ(q1[e], 0);
          EXPECT_EQ(d1[0], 0.0f);
          EXPECT_EQ(d1[1], 0.0f);
          EXPECT_EQ(q1[96], 127);
          EXPECT_EQ(q1[97], -2);  // -2.5
          EXPECT_EQ(q1[100], 0);  // 0.5
          EXPECT_EQ(q1[101], 2);  // 1.5
          EXPECT_EQ(q1[103], 4);  // 3.5
          EXPECT_EQ(d1[3], 1.0f);
        }
      }
    }
  }
}

TEST(MatMulQ8, EveryPathGivesTheBitsOfTheScalarStatement) {
  std::mt19937 rng(2);
  for (GgmlType type : kTypes) {
    // The blocks of 32 at 32, 96, 1024, 4128; the super-blocks of 256 at 256, 1024, 4352.
    for (int64_t k : {32, 96, 256, 1024, 4128, 4352}) {
      if (!Fits(type, k) || (k == 256 && model::Traits(type).block_size == 32)) continue;
      for (int64_t n : {1, 5, 17, 64}) {
        const RandomMatrix r = MakeRandomMatrix(type, n, k, rng);
        const WeightMatrix& w = r.w;
        // m 33: three tiles of x, the last of one row (AMX takes Q4_K and Q5_K from 32).
        for (int64_t m : {1, 2, 3, 7, 17, 33}) {
          SCOPED_TRACE(::testing::Message()
                       << model::Traits(type).name << " m " << m << " n " << n << " k " << k);
          const auto x = Activations(m, k, rng);
          QuantizedRows q;
          QuantizeRowsQ8Reference(x.data(), m, k, &q, Q8ActivationBlock(type));
          std::vector<float> want(static_cast<size_t>(m * n));
          MatMulQ8Reference(q, w, want.data());
          OnEveryPath([&](const char* path) {
            for (bool threads : {false, true}) {
              ThreadPool pool(2);
              std::vector<float> got(want.size(), NAN);
              MatMulQ8(q, w, got.data(), threads ? &pool : nullptr);
              for (size_t i = 0; i < got.size(); ++i) {
                ASSERT_EQ(std::bit_cast<uint32_t>(got[i]), std::bit_cast<uint32_t>(want[i]))
                    << path << (threads ? " threads" : "") << " output " << i;
              }
            }
          });
        }
      }
    }
  }
}

// MXFP4's scale is an exponent byte: the SIMD paths read eight at a time, and e < 2
// (model::E8m0Half's subnormals) takes its own branch. Every path, exponents from 0 to
// 156, against the scalar statement bit for bit.
TEST(MatMulQ8, MxfpExponentsFromSubnormalUpGiveTheScalarBits) {
  std::mt19937 rng(7);
  const int64_t n = 23, k = 1024;  // 32 blocks a row: a decode step of eight and pairs
  RandomMatrix r = MakeRandomMatrix(GgmlType::kMXFP4, n, k, rng);
  const int64_t bb = model::Traits(GgmlType::kMXFP4).type_size;
  // Row j's blocks at exponents 7j, 7j + 1, 7j + 2 (0 … 156): within a row the blocks
  // weigh alike, so a wrong subnormal is not lost beside a larger block.
  const int64_t nb = k / 32;
  for (int64_t b = 0; b < n * nb; ++b) {
    r.bytes[static_cast<size_t>(b * bb)] = static_cast<uint8_t>(7 * (b / nb) + b % 3);
  }
  for (int64_t m : {1, 3, 9, 17}) {
    const std::vector<float> x = Noise(m * k, rng, 2.0f);
    QuantizedRows q;
    QuantizeRowsQ8Reference(x.data(), m, k, &q, kQ8Block);
    std::vector<float> want(static_cast<size_t>(m * n));
    MatMulQ8Reference(q, r.w, want.data());
    OnEveryPath([&](const char* path) {
      std::vector<float> got(want.size(), NAN);
      MatMulQ8(q, r.w, got.data(), nullptr);
      for (size_t i = 0; i < got.size(); ++i) {
        ASSERT_EQ(std::bit_cast<uint32_t>(got[i]), std::bit_cast<uint32_t>(want[i]))
            << path << " m " << m << " output " << i;
      }
    });
  }
}

TEST(MatMulQ8, ErrorAgainstFloatActivationsStaysWithinTheQuantizationBound) {
  std::mt19937 rng(3);
  for (GgmlType type : kTypes) {
    const int64_t m = 5, n = 33, k = 2048;
    const RandomMatrix r = MakeRandomMatrix(type, n, k, rng);
    const WeightMatrix& w = r.w;
    const auto x = Activations(m, k, rng);
    std::vector<float> exact(m * n), fast(m * n);
    MatMulReference(x.data(), m, w, exact.data());
    // The scalar statement (which every path equals, above) against float math.
    QuantizedRows q;
    const int64_t block = Q8ActivationBlock(type);
    QuantizeRowsQ8Reference(x.data(), m, k, &q, block);
    MatMulQ8Reference(q, w, fast.data());
    std::vector<float> row(k);
    double worst_ratio = 0;
    for (int64_t j = 0; j < n; ++j) {
      ASSERT_TRUE(model::Dequantize(type, {w.data + j * w.RowBytes(), w.RowBytes()}, row).ok());
      for (int64_t i = 0; i < m; ++i) {
        // Each activation is off by at most half a step of its block, max|x| / 254.
        double bound = 0, scale = 0;
        for (int64_t b = 0; b < k / block; ++b) {
          double amax = 0, wsum = 0;
          for (int64_t e = 0; e < block; ++e) {
            amax = std::max(amax, std::fabs(double{x[i * k + block * b + e]}));
            wsum += std::fabs(double{row[block * b + e]});
          }
          bound += amax / 254 * wsum;
          scale += amax * wsum;
        }
        const double err = std::fabs(double{fast[i * n + j]} - exact[i * n + j]);
        // The quantization's bound, plus float rounding of the block sums (far smaller).
        EXPECT_LE(err, bound + 1e-5 * scale) << model::Traits(type).name << " " << i << "," << j;
        worst_ratio = std::max(worst_ratio, err / (bound + 1e-30));
      }
    }
    // The bound is not vacuous: the error reaches a fair part of it somewhere.
    EXPECT_GT(worst_ratio, 0.01) << model::Traits(type).name;
  }
}

// Given the quantized activations, the integers and their combination lose nothing but
// float rounding: the scalar statement equals float math on the activations it
// quantized (q · d_x) and the dequantized weights to within 2e-6 of Σ |w · x̂| — far
// tighter than the quantization bound above, so a lost or doubled term (a chunk's min,
// a scale) shows.
TEST(MatMulQ8, IntegersEqualFloatMathOnTheQuantizedActivations) {
  std::mt19937 rng(7);
  for (GgmlType type : kTypes) {
    const int64_t m = 3, n = 17, k = 2048;
    const RandomMatrix r = MakeRandomMatrix(type, n, k, rng);
    const WeightMatrix& w = r.w;
    const auto x = Noise(m * k, rng, 2.0f);
    const int64_t block = Q8ActivationBlock(type);
    QuantizedRows q;
    QuantizeRowsQ8Reference(x.data(), m, k, &q, block);
    std::vector<double> xq(m * k);
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t e = 0; e < k; ++e) {
        xq[i * k + e] = static_cast<double>(q.q[i * k + e]) * q.d[i * (k / block) + e / block];
      }
    }
    std::vector<float> fast(m * n);
    MatMulQ8Reference(q, w, fast.data());
    std::vector<float> row(k);
    for (int64_t j = 0; j < n; ++j) {
      ASSERT_TRUE(model::Dequantize(type, {w.data + j * w.RowBytes(), w.RowBytes()}, row).ok());
      for (int64_t i = 0; i < m; ++i) {
        double want = 0, size = 0;
        for (int64_t e = 0; e < k; ++e) {
          want += double{row[e]} * xq[i * k + e];
          size += std::fabs(double{row[e]} * xq[i * k + e]);
        }
        EXPECT_NEAR(fast[i * n + j], want, 2e-6 * size)
            << model::Traits(type).name << " " << i << "," << j;
      }
    }
  }
}

TEST(MatMulQ8, ARowsOutputsDoNotDependOnTheOtherRowsAndGroupsEqualSeparateCalls) {
  std::mt19937 rng(4);
  const int64_t n = 40, k = 512, m = 13;
  const auto a = ::tandem::testing::RandomQuantRows(GgmlType::kQ4_0, n, k, 0.05f, rng);
  const auto b = ::tandem::testing::RandomQuantRows(GgmlType::kQ8_0, n + 7, k, 0.05f, rng);
  const WeightMatrix wa{GgmlType::kQ4_0, n, k, a.data()}, wb{GgmlType::kQ8_0, n + 7, k, b.data()};
  const auto x = Activations(m, k, rng);
  ThreadPool pool(2);
  std::vector<float> oa(m * n), ob(m * (n + 7));
  float* pa = oa.data();
  float* pb = ob.data();
  MatMulQ8Group(x.data(), m, {&wa, &wb}, {&pa, &pb}, &pool);
  for (int64_t i : {0, 6, 12}) {
    std::vector<float> alone(n);
    float* p = alone.data();
    MatMulQ8Group(x.data() + i * k, 1, {&wa}, {&p}, nullptr);
    EXPECT_TRUE(std::equal(alone.begin(), alone.end(), oa.begin() + i * n)) << "row " << i;
  }
  std::vector<float> sep(m * (n + 7));
  float* ps = sep.data();
  MatMulQ8Group(x.data(), m, {&wb}, {&ps}, &pool);
  EXPECT_EQ(sep, ob);
}

// MatMulJobs: products with inputs of their own (m 1, 2, 7, one m 0), two sharing an
// x, types with an integer path (Q4_K, Q4_0) and without one (F16) — each job's output
// the bits of that product alone, in fast and in exact math.
TEST(MatMulJobs, EachJobGivesTheBitsOfItsProductAlone) {
  std::mt19937 rng(6);
  const int64_t k = 512;
  const auto qk = ::tandem::testing::RandomQuantRows(GgmlType::kQ4_K, 37, k, 0.05f, rng);
  const auto q4 = ::tandem::testing::RandomQuantRows(GgmlType::kQ4_0, 16, k, 0.05f, rng);
  std::vector<uint16_t> h;
  for (float v : Noise(24 * k, rng, 0.05f)) h.push_back(FloatToHalf(v));
  const WeightMatrix wk{GgmlType::kQ4_K, 37, k, qk.data()}, w4{GgmlType::kQ4_0, 16, k, q4.data()},
      wh{GgmlType::kF16, 24, k, reinterpret_cast<const uint8_t*>(h.data())};
  const auto x1 = Activations(1, k, rng), x2 = Activations(2, k, rng), x7 = Activations(7, k, rng);
  struct Spec {
    const std::vector<float>* x;
    int64_t m;
    const WeightMatrix* w;
  };
  const Spec specs[] = {{&x1, 1, &wk}, {&x2, 2, &w4}, {&x7, 7, &wk},
                        {&x7, 7, &w4}, {&x2, 2, &wh}, {&x1, 0, &w4}};
  ThreadPool pool(2);
  for (bool q8 : {true, false}) {
    SCOPED_TRACE(q8 ? "fast" : "exact");
    std::vector<std::vector<float>> outs;
    std::vector<MatMulJob> jobs;
    for (const Spec& sp : specs) outs.emplace_back(std::max<int64_t>(sp.m, 1) * sp.w->rows, NAN);
    for (size_t i = 0; i < std::size(specs); ++i) {
      jobs.push_back({specs[i].x->data(), specs[i].m, specs[i].w, outs[i].data()});
    }
    MatMulJobs(jobs, q8, &pool);
    for (size_t i = 0; i < std::size(specs); ++i) {
      const Spec& sp = specs[i];
      if (sp.m == 0) {
        EXPECT_TRUE(std::isnan(outs[i][0])) << "a job of no rows writes nothing";
        continue;
      }
      std::vector<float> alone(sp.m * sp.w->rows);
      float* p = alone.data();
      if (q8 && Q8Supports(sp.w->type)) {
        MatMulQ8Group(sp.x->data(), sp.m, {sp.w}, {&p}, nullptr);
      } else {
        MatMul(sp.x->data(), sp.m, *sp.w, p, nullptr);
      }
      EXPECT_EQ(0, std::memcmp(alone.data(), outs[i].data(), alone.size() * sizeof(float)))
          << "job " << i;
    }
  }
}

// The CPU backend under --cpu-math fast: a group whose matrices all have the integer
// path takes it (x quantized once), a group with one that has not (F16 here) takes the
// float path for all, and exact math never takes it.
TEST(CpuBackendFastMath, TakesTheIntegerPathWhereTheWholeGroupHasIt) {
  std::mt19937 rng(5);
  const int64_t m = 3, n = 24, k = 256;
  const auto q8 = ::tandem::testing::RandomQuantRows(GgmlType::kQ8_0, n, k, 0.05f, rng);
  const auto q4 = ::tandem::testing::RandomQuantRows(GgmlType::kQ4_0, n, k, 0.05f, rng);
  std::vector<uint16_t> qk;  // F16 weights: no integer path
  for (float v : Noise(n * k, rng, 0.05f)) qk.push_back(FloatToHalf(v));
  const auto x = Activations(m, k, rng);
  const WeightMatrix w8{GgmlType::kQ8_0, n, k, q8.data()}, w4{GgmlType::kQ4_0, n, k, q4.data()},
      wk{GgmlType::kF16, n, k, reinterpret_cast<const uint8_t*>(qk.data())};
  // What each path gives, computed here.
  auto integer = [&](const WeightMatrix& w) {
    std::vector<float> out(m * n);
    float* p = out.data();
    MatMulQ8Group(x.data(), m, {&w}, {&p}, nullptr);
    return out;
  };
  auto floats = [&](const WeightMatrix& w) {
    std::vector<float> out(m * n);
    MatMul(x.data(), m, w, out.data(), nullptr);
    return out;
  };
  for (CpuMath math : {CpuMath::kExact, CpuMath::kFast}) {
    CpuBackend b(CpuBackendOptions{.num_threads = 2, .math = math});
    auto tensor = [&](const void* data, GgmlType type, int64_t rows, int64_t cols) {
      const int64_t bytes = static_cast<int64_t>(model::Traits(type).type_size) * rows * cols /
                            model::Traits(type).block_size;
      auto buf = *b.BorrowHost(data, bytes);
      const Tensor t{buf.get(), 0, type, rows, cols};
      return std::pair{std::move(buf), t};
    };
    auto [xb, xt] = tensor(x.data(), GgmlType::kF32, m, k);
    auto [b8, t8] = tensor(q8.data(), GgmlType::kQ8_0, n, k);
    auto [b4, t4] = tensor(q4.data(), GgmlType::kQ4_0, n, k);
    auto [bk, tk] = tensor(qk.data(), GgmlType::kF16, n, k);
    std::vector<float> o0(m * n), o1(m * n), o2(m * n);
    auto [ob0, ot0] = tensor(o0.data(), GgmlType::kF32, m, n);
    auto [ob1, ot1] = tensor(o1.data(), GgmlType::kF32, m, n);
    auto [ob2, ot2] = tensor(o2.data(), GgmlType::kF32, m, n);
    const bool fast = math == CpuMath::kFast;
    b.MatMul2(xt, t8, ot0, t4, ot1);
    ASSERT_TRUE(b.Synchronize().ok());
    EXPECT_EQ(o0, fast ? integer(w8) : floats(w8)) << CpuMathName(math);
    EXPECT_EQ(o1, fast ? integer(w4) : floats(w4)) << CpuMathName(math);
    b.MatMul3(xt, t8, ot0, t4, ot1, tk, ot2);
    ASSERT_TRUE(b.Synchronize().ok());
    EXPECT_EQ(o0, floats(w8)) << CpuMathName(math);  // the group has an F16: floats for all
    EXPECT_EQ(o2, floats(wk)) << CpuMathName(math);
  }
}

}  // namespace
}  // namespace tandem::kernels
