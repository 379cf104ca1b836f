// Every CUDA kernel the CPU shim covers (ops_kernels.cu, attention_kernels.cu, built by
// the host compiler: on_cpu/), run through its launcher on host memory and compared
// with its CPU reference, at awkward sizes — as llama.cpp's test-backend-ops runs each
// op on each backend. Outputs are poisoned with NaN first, so an element a kernel never
// writes fails. Tolerances: bit-exact where the arithmetic is the same (lookups,
// copies, conversions, element-wise products), ~1e-6 relative where only a reduction
// order differs, 1e-5 for attention (float32 online softmax against a double
// reference). The shim computes __sincosf and rsqrtf exactly, so the tolerances that
// hold here are the ones a GPU must meet too (cuda_backend_test.cc, on a device).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "common/kv/kv_layout.h"
#include "common/util/half.h"
#include "gtest/gtest.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/ops.h"
#include "kernels/cuda/attention_kernels.h"
#include "kernels/cuda/ops_kernels.h"
#include "kernels/select.h"
#include "kernels/testing/numeric.h"

namespace tandem::kernels::cuda {
namespace {

using ::tandem::kernels::testing::MaxRelError;
using ::tandem::kernels::testing::Noise;

constexpr int64_t kRows[] = {1, 7, 17};
constexpr int64_t kDims[] = {1, 15, 17, 1000, 4100};

TEST(KernelsOnCpu, EmbeddingReadsEveryTableTypeAndFlagsBadIds) {
  std::mt19937 rng(1);
  const int64_t vocab = 1001;
  for (int64_t cols : {1, 15, 17, 1000}) {
    const auto values = Noise(static_cast<size_t>(vocab * cols), rng);
    std::vector<uint16_t> bf16(values.size()), f16(values.size());
    for (size_t i = 0; i < values.size(); ++i) {
      bf16[i] = FloatToBf16(values[i]);
      f16[i] = FloatToHalf(values[i]);
    }
    const std::vector<int32_t> ids = {0, 1000, 17, 17, 5, 999, 3};
    for (Elem type : {Elem::kF32, Elem::kBF16, Elem::kF16}) {
      SCOPED_TRACE(::testing::Message() << "cols " << cols << " type " << static_cast<int>(type));
      const void* table = type == Elem::kF32    ? static_cast<const void*>(values.data())
                          : type == Elem::kBF16 ? static_cast<const void*>(bf16.data())
                                                : static_cast<const void*>(f16.data());
      auto value = [&](int64_t i) {
        return type == Elem::kF32    ? values[i]
               : type == Elem::kBF16 ? Bf16ToFloat(bf16[i])
                                     : HalfToFloat(f16[i]);
      };
      std::vector<float> out(ids.size() * cols, NAN);
      int32_t error = kDeviceOk;
      ASSERT_EQ(LaunchEmbedding(table, type, vocab, cols, ids.data(),
                                static_cast<int64_t>(ids.size()), out.data(), &error, nullptr),
                0);
      EXPECT_EQ(error, kDeviceOk);
      for (size_t r = 0; r < ids.size(); ++r) {
        for (int64_t c = 0; c < cols; ++c) ASSERT_EQ(out[r * cols + c], value(ids[r] * cols + c));
      }
      // An id outside the table: its row is zeros and the error word says why.
      const std::vector<int32_t> bad = {3, 1001, -1};
      std::fill(out.begin(), out.end(), NAN);
      ASSERT_EQ(
          LaunchEmbedding(table, type, vocab, cols, bad.data(), 3, out.data(), &error, nullptr), 0);
      EXPECT_EQ(error, kBadTokenId);
      EXPECT_EQ(out[0], value(3 * cols));
      for (int64_t c = 0; c < 2 * cols; ++c) EXPECT_EQ(out[cols + c], 0.f);
    }
  }
}

TEST(KernelsOnCpu, RmsNormAndAddRmsNormMatchTheReference) {
  std::mt19937 rng(2);
  for (int64_t rows : kRows) {
    for (int64_t dim : kDims) {
      SCOPED_TRACE(::testing::Message() << rows << "x" << dim);
      const size_t n = static_cast<size_t>(rows * dim);
      const auto x = Noise(n, rng), y = Noise(n, rng), w = Noise(static_cast<size_t>(dim), rng);
      std::vector<float> out(n, NAN), want(n);
      ASSERT_EQ(LaunchRmsNorm(x.data(), w.data(), rows, dim, 1e-5f, out.data(), nullptr), 0);
      RmsNormReference(x.data(), w.data(), rows, dim, 1e-5f, want.data());
      EXPECT_LT(MaxRelError(out, want), 2e-6);

      std::vector<float> sum = x;
      std::fill(out.begin(), out.end(), NAN);
      ASSERT_EQ(
          LaunchAddRmsNorm(sum.data(), y.data(), w.data(), rows, dim, 1e-6f, out.data(), nullptr),
          0);
      std::vector<float> added(n);
      for (size_t i = 0; i < n; ++i) added[i] = x[i] + y[i];
      EXPECT_EQ(sum, added);  // the residual stream itself, exactly
      RmsNormReference(added.data(), w.data(), rows, dim, 1e-6f, want.data());
      EXPECT_LT(MaxRelError(out, want), 2e-6);
    }
  }
}

TEST(KernelsOnCpu, RopeTableAndRotationMatchTheCpu) {
  std::mt19937 rng(3);
  const std::vector<int32_t> positions = {0, 1, 17, 4095, 8191, 100000, 131071};
  const int64_t n = static_cast<int64_t>(positions.size());
  struct Case {
    int32_t head_dim, rope_dim;
    float theta, position_scale;
    bool factors;
    RopeStyle style;
    float attention_factor = 1.0f;  // YaRN's
  };
  for (const Case& k : {Case{64, 64, 10000.f, 1.f, false, RopeStyle::kAdjacent},
                        Case{128, 128, 500000.f, 1.f, true, RopeStyle::kHalves, 1.3466f},
                        Case{80, 32, 10000.f, 4.f, false, RopeStyle::kHalves},
                        Case{2, 2, 10000.f, 1.f, false, RopeStyle::kAdjacent}}) {
    SCOPED_TRACE(::testing::Message() << "head_dim " << k.head_dim << " rope_dim " << k.rope_dim);
    const RopeParams p{k.head_dim,       k.rope_dim, k.theta,
                       k.position_scale, k.style,    k.attention_factor};
    std::vector<float> factors;
    if (k.factors) {
      std::uniform_real_distribution<float> u(1.f, 8.f);
      for (int32_t i = 0; i < k.rope_dim / 2; ++i) factors.push_back(u(rng));
    }
    const float* ff = k.factors ? factors.data() : nullptr;
    std::vector<float> table(static_cast<size_t>(n * k.rope_dim), NAN), want(table.size());
    ASSERT_EQ(LaunchRopeTable(positions.data(), n, ff, k.rope_dim, k.theta, k.position_scale,
                              k.attention_factor, table.data(), nullptr),
              0);
    BuildRopeTable(positions, p, ff, want.data());
    // The angle is the same float on both sides; the kernel reduces it to [-π, π] in
    // double before its sine and cosine.
    EXPECT_LT(MaxRelError(table, want), 1e-6);
    for (int32_t heads : {1, 3}) {
      const auto x = Noise(static_cast<size_t>(n * heads * k.head_dim), rng);
      std::vector<float> got = x, ref = x;
      ASSERT_EQ(LaunchRope(got.data(), n, heads, k.head_dim, k.rope_dim,
                           k.style == RopeStyle::kHalves, want.data(), nullptr),
                0);
      ApplyRope(ref.data(), n, heads, want.data(), 0, p);
      EXPECT_LT(MaxRelError(got, ref), 1e-6) << heads << " heads";
    }
  }
}

TEST(KernelsOnCpu, ElementwiseOpsMatchTheCpu) {
  std::mt19937 rng(4);
  for (int64_t n : {1, 15, 17, 1000, 100003}) {
    SCOPED_TRACE(n);
    const size_t m = static_cast<size_t>(n);
    const auto g = Noise(m, rng, 3.f), u = Noise(m, rng);
    std::vector<float> out(m, NAN), want(m);
    ASSERT_EQ(LaunchSwiGlu(g.data(), u.data(), n, out.data(), nullptr), 0);
    SwiGluReference(g.data(), u.data(), n, want.data());
    EXPECT_LT(MaxRelError(out, want), 1e-6);
    std::vector<float> in_place = g;  // out may be gate
    ASSERT_EQ(LaunchGeGlu(in_place.data(), u.data(), n, in_place.data(), nullptr), 0);
    GeGluReference(g.data(), u.data(), n, want.data());
    EXPECT_LT(MaxRelError(in_place, want), 1e-6);

    std::vector<float> x = g;
    ASSERT_EQ(LaunchScale(x.data(), n, 0.37f, nullptr), 0);
    for (size_t i = 0; i < m; ++i) ASSERT_EQ(x[i], g[i] * 0.37f);
    x = g;
    ASSERT_EQ(LaunchSoftCap(x.data(), n, 2.5f, nullptr), 0);
    want = g;
    SoftCap(want.data(), n, 2.5f);
    EXPECT_LT(MaxRelError(x, want), 1e-6);
    x = g;
    ASSERT_EQ(LaunchAdd(x.data(), u.data(), n, nullptr), 0);
    for (size_t i = 0; i < m; ++i) ASSERT_EQ(x[i], g[i] + u[i]);
  }
  for (int64_t rows : kRows) {
    for (int64_t dim : {1, 17, 1000}) {
      const auto x0 = Noise(static_cast<size_t>(rows * dim), rng);
      const auto bias = Noise(static_cast<size_t>(dim), rng);
      std::vector<float> x = x0;
      ASSERT_EQ(LaunchAddBias(x.data(), bias.data(), rows, dim, nullptr), 0);
      for (int64_t i = 0; i < rows * dim; ++i) ASSERT_EQ(x[i], x0[i] + bias[i % dim]);
    }
  }
}

// Past 65,535 blocks of 256 threads the grid is capped and each thread strides on:
// every element is still visited exactly once.
TEST(KernelsOnCpu, GridStrideLoopsCoverPastTheGridCap) {
  const int64_t n = int64_t{65535} * 256 + 301;
  std::vector<float> x(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) x[i] = static_cast<float>(i % 4093);
  ASSERT_EQ(LaunchScale(x.data(), n, 2.f, nullptr), 0);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(x[i], 2.f * static_cast<float>(i % 4093)) << i;
}

TEST(KernelsOnCpu, GatherRowsCopiesAndFlagsBadRows) {
  std::mt19937 rng(5);
  for (int64_t row_bytes : {4, 60, 4096}) {
    const int64_t src_rows = 9;
    std::vector<uint8_t> src(static_cast<size_t>(src_rows * row_bytes));
    for (auto& b : src) b = static_cast<uint8_t>(rng());
    const std::vector<int32_t> idx = {8, 0, 3, 3, 7};
    std::vector<uint8_t> dst(idx.size() * row_bytes, 0xAB);
    int32_t error = kDeviceOk;
    ASSERT_EQ(LaunchGatherRows(src.data(), src_rows, row_bytes, idx.data(),
                               static_cast<int64_t>(idx.size()), dst.data(), &error, nullptr),
              0);
    EXPECT_EQ(error, kDeviceOk);
    for (size_t r = 0; r < idx.size(); ++r) {
      ASSERT_EQ(std::memcmp(&dst[r * row_bytes], &src[idx[r] * row_bytes], row_bytes), 0) << r;
    }
    const std::vector<int32_t> bad = {1, 9};
    ASSERT_EQ(LaunchGatherRows(src.data(), src_rows, row_bytes, bad.data(), 2, dst.data(), &error,
                               nullptr),
              0);
    EXPECT_EQ(error, kBadRowIndex);
    EXPECT_EQ(std::memcmp(&dst[0], &src[row_bytes], row_bytes), 0);
    EXPECT_TRUE(std::all_of(dst.begin() + row_bytes, dst.begin() + 2 * row_bytes,
                            [](uint8_t b) { return b == 0; }));
  }
  int32_t error = 0;
  std::vector<uint8_t> buf(64);
  const int32_t one = 0;
  EXPECT_NE(LaunchGatherRows(buf.data(), 1, 6, &one, 1, buf.data(), &error, nullptr), 0);
}

tile::KvGeometry Geometry(const kv::KvLayout& l) {
  return {l.BlockElements(), l.LayerStride(), l.PartStride(),
          l.block_size,      l.n_kv_heads,    l.head_dim};
}

Elem ElemOf(kv::KvDtype d) {
  return d == kv::KvDtype::kBF16 ? Elem::kBF16 : d == kv::KvDtype::kF16 ? Elem::kF16 : Elem::kF32;
}

TEST(KernelsOnCpu, WriteKvFillsTheSameBytesAsTheCpu) {
  std::mt19937 rng(6);
  for (kv::KvDtype dtype : {kv::KvDtype::kF32, kv::KvDtype::kBF16, kv::KvDtype::kF16}) {
    for (int32_t block_size : {1, 16}) {
      for (auto [heads, head_dim] : {std::pair{1, 32}, {3, 64}}) {
        SCOPED_TRACE(::testing::Message() << kv::KvDtypeName(dtype) << " block " << block_size
                                          << " heads " << heads << " dim " << head_dim);
        const kv::KvLayout layout{2, heads, head_dim, block_size, dtype};
        const int32_t num_blocks = 40 / block_size + 3;
        const int64_t n = 17;
        // Distinct slots, scattered over the storage.
        std::vector<int32_t> slots(static_cast<size_t>(num_blocks * block_size));
        std::iota(slots.begin(), slots.end(), 0);
        std::shuffle(slots.begin(), slots.end(), rng);
        slots.resize(n);
        const auto k = Noise(static_cast<size_t>(n * heads * head_dim), rng);
        const auto v = Noise(k.size(), rng);
        std::vector<uint8_t> got(static_cast<size_t>(num_blocks * layout.BlockBytes()), 0x5A);
        std::vector<uint8_t> want = got;
        int32_t error = kDeviceOk;
        ASSERT_EQ(LaunchWriteKv(k.data(), v.data(), slots.data(), n, 1, Geometry(layout),
                                num_blocks, ElemOf(dtype), got.data(), &error, nullptr),
                  0);
        EXPECT_EQ(error, kDeviceOk);
        WriteKv(k.data(), v.data(), slots, 1, {layout, num_blocks, want.data()});
        EXPECT_TRUE(got == want);
        // A slot past the storage (or negative) is reported and writes nothing.
        std::vector<int32_t> bad = {slots[0], num_blocks * block_size, -1};
        std::vector<uint8_t> again = got;
        ASSERT_EQ(LaunchWriteKv(k.data(), v.data(), bad.data(), 3, 0, Geometry(layout), num_blocks,
                                ElemOf(dtype), again.data(), &error, nullptr),
                  0);
        EXPECT_EQ(error, kBadSlot);
        WriteKv(k.data(), v.data(), std::span<const int32_t>(bad.data(), 1), 0,
                {layout, num_blocks, got.data()});
        EXPECT_TRUE(again == got);
      }
    }
  }
}

// select.h's rule, restated: the largest value, the lowest id on ties, NaN never wins,
// 0 for a row with no number.
int32_t ArgMaxRule(const float* row, int64_t cols) {
  int32_t best = -1;
  for (int64_t c = 0; c < cols; ++c) {
    if (std::isnan(row[c])) continue;
    if (best < 0 || row[c] > row[best]) best = static_cast<int32_t>(c);
  }
  return best < 0 ? 0 : best;
}

TEST(KernelsOnCpu, ArgMaxFollowsTheSelectionRule) {
  std::mt19937 rng(7);
  for (int64_t rows : kRows) {
    for (int64_t cols : {1, 15, 17, 1000, 32000}) {
      SCOPED_TRACE(::testing::Message() << rows << "x" << cols);
      auto logits = Noise(static_cast<size_t>(rows * cols), rng);
      for (int64_t r = 0; r < rows; ++r) {
        float* row = logits.data() + r * cols;
        switch (r % 4) {
          case 1:  // a tie for the maximum: the lower id wins
            row[cols / 2] = row[cols - 1] = 50.f;
            break;
          case 2:  // NaNs and infinities around
            for (int64_t c = 0; c < cols; c += 3) row[c] = NAN;
            row[cols - 1] = -INFINITY;
            break;
          case 3:  // no number at all
            std::fill(row, row + cols, NAN);
            break;
        }
      }
      std::vector<int32_t> ids(static_cast<size_t>(rows), -7);
      ASSERT_EQ(LaunchArgMax(logits.data(), rows, cols, ids.data(), nullptr), 0);
      for (int64_t r = 0; r < rows; ++r) {
        EXPECT_EQ(ids[r], ArgMaxRule(logits.data() + r * cols, cols)) << "row " << r;
      }
    }
  }
}

TEST(KernelsOnCpu, ToBf16RoundsToNearestEven) {
  std::mt19937 rng(8);
  auto x = Noise(100003, rng, 1e3f);
  x[0] = std::bit_cast<float>(0x3f808000u);  // a tie: stays even
  x[1] = std::bit_cast<float>(0x3f818000u);  // a tie: goes up to even
  x[2] = 3.4028235e38f;                      // overflows to infinity
  std::vector<uint16_t> out(x.size(), 0xFFFF);
  ASSERT_EQ(LaunchToBf16(x.data(), static_cast<int64_t>(x.size()), out.data(), nullptr), 0);
  for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(out[i], FloatToBf16(x[i])) << i;
}

// --- paged attention (split-K) ---------------------------------------------------------

struct AttentionCase {
  int32_t n_heads, n_kv_heads, head_dim, block_size;
  kv::KvDtype dtype;
  int32_t window = 0;
  float softcap = 0;
  int32_t keys_per_split = 512, max_splits = 32;
  int32_t q_len = 1;  // new rows per sequence (> 1: prompt rows through split-K)
};

// The split-K kernel and its merge against PagedAttentionReference, over sequences of
// 1, 15, 17, 300 and 1,000 keys with scattered block tables.
void CheckAttention(const AttentionCase& k, std::mt19937& rng) {
  const std::vector<int32_t> kv_len = {1, 15, 17, 300, 1000};
  const int32_t seqs = static_cast<int32_t>(kv_len.size());
  const kv::KvLayout layout{2, k.n_kv_heads, k.head_dim, k.block_size, k.dtype};
  std::vector<int32_t> q_indptr = {0}, block_indptr = {0}, positions;
  int32_t total_blocks = 0;
  for (int32_t s = 0; s < seqs; ++s) {
    const int32_t q = std::min(k.q_len, kv_len[s]);
    q_indptr.push_back(q_indptr.back() + q);
    for (int32_t i = 0; i < q; ++i) positions.push_back(kv_len[s] - q + i);
    const int32_t blocks = (kv_len[s] + k.block_size - 1) / k.block_size;
    block_indptr.push_back(block_indptr.back() + blocks);
    total_blocks += blocks;
  }
  const int32_t num_blocks = total_blocks + 5;
  std::vector<int32_t> block_ids(static_cast<size_t>(num_blocks));
  std::iota(block_ids.begin(), block_ids.end(), 0);
  std::shuffle(block_ids.begin(), block_ids.end(), rng);
  block_ids.resize(static_cast<size_t>(total_blocks));
  // The cache: random bytes turned into values of its type (every slot written).
  std::vector<uint8_t> cache(static_cast<size_t>(num_blocks * layout.BlockBytes()));
  const int64_t elements = num_blocks * layout.BlockElements();
  const auto values = Noise(static_cast<size_t>(elements), rng);
  for (int64_t i = 0; i < elements; ++i) {
    if (k.dtype == kv::KvDtype::kF32) {
      std::memcpy(&cache[i * 4], &values[i], 4);
    } else {
      const uint16_t h =
          k.dtype == kv::KvDtype::kBF16 ? FloatToBf16(values[i]) : FloatToHalf(values[i]);
      std::memcpy(&cache[i * 2], &h, 2);
    }
  }
  const int32_t rows = q_indptr.back();
  const auto q = Noise(static_cast<size_t>(rows) * k.n_heads * k.head_dim, rng);
  std::vector<float> out(q.size(), NAN), want(q.size());
  std::vector<float> workspace(
      static_cast<size_t>(AttentionWorkspaceFloats(rows, k.n_heads, k.max_splits, k.head_dim)),
      NAN);
  AttentionLaunch a;
  a.q = q.data();
  a.cache = cache.data();
  a.cache_type = ElemOf(k.dtype);
  a.geometry = Geometry(layout);
  a.layer = 1;
  a.q_indptr = q_indptr.data();
  a.positions = positions.data();
  a.seqs = seqs;
  a.block_indptr = block_indptr.data();
  a.block_ids = block_ids.data();
  a.rows = rows;
  a.n_heads = k.n_heads;
  a.n_kv_heads = k.n_kv_heads;
  a.head_dim = k.head_dim;
  a.scale = 1.0f / std::sqrt(static_cast<float>(k.head_dim));
  a.window = k.window;
  a.softcap = k.softcap;
  a.keys_per_split = k.keys_per_split;
  a.max_splits = k.max_splits;
  a.workspace = workspace.data();
  a.out = out.data();
  ASSERT_EQ(LaunchPagedAttention(a), 0);
  const AttentionShape shape{k.n_heads, k.n_kv_heads, k.head_dim, a.scale, k.window, k.softcap};
  PagedAttentionReference(q.data(), {q_indptr, kv_len, block_indptr, block_ids}, shape, 1,
                          {layout, num_blocks, cache.data()}, want.data());
  EXPECT_LT(MaxRelError(out, want), 1e-5);
}

TEST(KernelsOnCpu, PagedAttentionMatchesTheReference) {
  std::mt19937 rng(9);
  using D = kv::KvDtype;
  for (const AttentionCase& k : {
           // GQA groups of 1, 4 and 16 (the kernel's limit), head dims 32 to 256.
           AttentionCase{4, 4, 32, 16, D::kF32},
           AttentionCase{8, 2, 64, 16, D::kBF16},
           AttentionCase{16, 1, 128, 1, D::kF16},
           AttentionCase{2, 1, 256, 16, D::kF32},
           // Many splits (and a split count that divides no length), a sliding window,
           // soft-capping, prompt rows.
           AttentionCase{8, 2, 64, 16, D::kF32, 0, 0.f, 64, 32},
           AttentionCase{8, 2, 64, 16, D::kBF16, 0, 0.f, 100, 3},
           AttentionCase{4, 2, 32, 1, D::kF32, 100, 0.f, 64, 8},
           AttentionCase{4, 2, 32, 16, D::kF32, 0, 30.f, 128, 4},
           AttentionCase{4, 2, 64, 16, D::kF16, 33, 50.f, 64, 32, 7},
       }) {
    SCOPED_TRACE(::testing::Message()
                 << "heads " << k.n_heads << "/" << k.n_kv_heads << " dim " << k.head_dim
                 << " block " << k.block_size << " " << kv::KvDtypeName(k.dtype) << " window "
                 << k.window << " softcap " << k.softcap << " split " << k.keys_per_split << "x"
                 << k.max_splits << " q_len " << k.q_len);
    CheckAttention(k, rng);
  }
}

TEST(KernelsOnCpu, PagedAttentionRefusesShapesItHasNoKernelFor) {
  AttentionLaunch a;
  a.rows = 1;
  a.n_heads = 32;
  a.n_kv_heads = 1;  // a group of 32 > 16
  a.head_dim = 64;
  EXPECT_NE(LaunchPagedAttention(a), 0);
  a.n_kv_heads = 8;
  a.head_dim = 512;
  EXPECT_NE(LaunchPagedAttention(a), 0);
  a.head_dim = 64;
  a.max_splits = 0;
  EXPECT_NE(LaunchPagedAttention(a), 0);
}

}  // namespace
}  // namespace tandem::kernels::cuda
