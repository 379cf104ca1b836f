#include "kernels/cpu/attention.h"

#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/vec_math.h"
#include "kernels/testing/paged_attention_fixture.h"

namespace tandem::kernels {
namespace {

using ::tandem::kernels::testing::Fixture;
using ::tandem::kernels::testing::MaxAbsError;

class PagedAttentionPaths : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override { ForcePortableKernels(GetParam()); }
  void TearDown() override { ForcePortableKernels(false); }
};

TEST_P(PagedAttentionPaths, MatchesReferenceAtAwkwardSizes) {
  std::mt19937 rng(5);
  ThreadPool pool(2);
  for (int32_t block_size : {1, 16, 32, 24}) {
    for (auto [nh, nkv] : {std::pair{9, 3}, std::pair{4, 4}, std::pair{8, 1}}) {
      // Decode rows (1 new), a whole prompt, a chunk at the end of a longer context.
      Fixture f(nh, nkv, 64, block_size, {{1, 1}, {15, 15}, {17, 1}, {100, 7}, {1000, 1}}, rng);
      std::vector<float> got(f.q.size(), NAN), want(f.q.size());
      PagedAttention(f.q.data(), f.batch(), f.shape, 1, *f.cache, got.data(), &pool);
      PagedAttentionReference(f.q.data(), f.batch(), f.shape, 1, *f.cache, want.data());
      for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], 2e-5) << i;
    }
  }
}

// 16-bit caches: the kernel reads the same rounded elements the reference does, so
// the tolerance is the float32 one; both paths.
TEST_P(PagedAttentionPaths, SixteenBitCachesMatchReference) {
  std::mt19937 rng(7);
  ThreadPool pool(2);
  for (kv::KvDtype dtype : {kv::KvDtype::kBF16, kv::KvDtype::kF16}) {
    for (int32_t block_size : {1, 16}) {
      Fixture f(8, 2, 64, block_size, {{1, 1}, {15, 15}, {17, 1}, {1000, 7}}, rng, dtype);
      std::vector<float> got(f.q.size(), NAN), want(f.q.size());
      PagedAttention(f.q.data(), f.batch(), f.shape, 1, *f.cache, got.data(), &pool);
      PagedAttentionReference(f.q.data(), f.batch(), f.shape, 1, *f.cache, want.data());
      for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], 2e-5) << i;
    }
  }
}

// Sliding windows (narrower than a block, a block, not a multiple of 16, wider than
// every sequence) and soft-capping, on both paths, against the float64 reference.
TEST_P(PagedAttentionPaths, WindowsAndSoftCappingMatchReference) {
  std::mt19937 rng(11);
  ThreadPool pool(2);
  for (int32_t block_size : {1, 16, 24}) {
    Fixture f(8, 2, 64, block_size, {{1, 1}, {15, 15}, {40, 40}, {300, 3}, {1000, 1}}, rng);
    std::vector<float> plain(f.q.size());
    PagedAttention(f.q.data(), f.batch(), f.shape, 1, *f.cache, plain.data(), &pool);
    for (int32_t window : {1, 5, 16, 37, 5000}) {
      for (float softcap : {0.0f, 0.5f}) {
        SCOPED_TRACE(::testing::Message()
                     << "block " << block_size << " window " << window << " softcap " << softcap);
        AttentionShape shape = f.shape;
        shape.window = window;
        shape.softcap = softcap;
        std::vector<float> got(f.q.size(), NAN), want(f.q.size());
        PagedAttention(f.q.data(), f.batch(), shape, 1, *f.cache, got.data(), &pool);
        PagedAttentionReference(f.q.data(), f.batch(), shape, 1, *f.cache, want.data());
        for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], 2e-5) << i;
        if (window == 5000 && softcap == 0) {
          // Wider than every sequence: the very same bits as no window.
          EXPECT_EQ(0, std::memcmp(got.data(), plain.data(), got.size() * sizeof(float)));
        } else {
          EXPECT_GT(MaxAbsError(got, plain), 1e-3);  // the window or the cap matters here
        }
      }
    }
  }
}

// Attention sinks (gpt-oss): one logit per query head in each softmax's normaliser —
// small ones, and one that outweighs every key (the max is then the sink's) — with and
// without a window, against the float64 reference; they shrink the output.
TEST_P(PagedAttentionPaths, SinksMatchReference) {
  std::mt19937 rng(13);
  ThreadPool pool(2);
  for (int32_t block_size : {1, 16, 24}) {
    Fixture f(8, 2, 64, block_size, {{1, 1}, {15, 15}, {40, 40}, {300, 3}}, rng);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> sinks(8);
    for (float& s : sinks) s = normal(rng);
    sinks[3] = 30.0f;  // above every score
    std::vector<float> plain(f.q.size());
    PagedAttention(f.q.data(), f.batch(), f.shape, 1, *f.cache, plain.data(), &pool);
    for (int32_t window : {0, 7}) {
      SCOPED_TRACE(::testing::Message() << "block " << block_size << " window " << window);
      AttentionShape shape = f.shape;
      shape.window = window;
      std::vector<float> got(f.q.size(), NAN), want(f.q.size());
      PagedAttention(f.q.data(), f.batch(), shape, 1, *f.cache, got.data(), &pool, sinks.data());
      PagedAttentionReference(f.q.data(), f.batch(), shape, 1, *f.cache, want.data(), sinks.data());
      for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], 2e-5) << i;
      if (window == 0) EXPECT_GT(MaxAbsError(got, plain), 1e-2);
    }
  }
}

// A window of one key: each row's output is its own V row, exactly.
TEST_P(PagedAttentionPaths, WindowOfOneReturnsTheOwnValue) {
  std::mt19937 rng(12);
  Fixture f(4, 4, 64, 16, {{20, 20}}, rng);
  AttentionShape shape = f.shape;
  shape.window = 1;
  std::vector<float> got(f.q.size());
  PagedAttention(f.q.data(), f.batch(), shape, 0, *f.cache, got.data(), nullptr);
  for (int32_t t = 0; t < 20; ++t) {
    const float* v = f.cache->Part(f.block_ids[t / 16], 0, 1) + (t % 16) * 4 * 64;
    for (int32_t i = 0; i < 4 * 64; ++i) ASSERT_EQ(got[t * 4 * 64 + i], v[i]) << t << " " << i;
  }
}

TEST_P(PagedAttentionPaths, RowsDoNotDependOnTheBatch) {
  std::mt19937 rng(6);
  Fixture f(9, 3, 64, 16, {{40, 40}, {33, 1}, {64, 5}}, rng);
  std::vector<float> all(f.q.size());
  PagedAttention(f.q.data(), f.batch(), f.shape, 0, *f.cache, all.data(), nullptr);
  // Sequence 2 alone, same cache, same blocks.
  const int32_t rows = 5, first = f.q_indptr[2], row = 9 * 64;
  std::vector<int32_t> qi = {0, rows}, len = {64}, bi = {0, f.block_indptr[3] - f.block_indptr[2]};
  std::vector<int32_t> ids(f.block_ids.begin() + f.block_indptr[2],
                           f.block_ids.begin() + f.block_indptr[3]);
  std::vector<float> alone(rows * row);
  PagedAttention(f.q.data() + first * row, {qi, len, bi, ids}, f.shape, 0, *f.cache, alone.data(),
                 nullptr);
  EXPECT_EQ(0, std::memcmp(alone.data(), all.data() + first * row, alone.size() * sizeof(float)));
}

INSTANTIATE_TEST_SUITE_P(Kernels, PagedAttentionPaths, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "portable" : "native"; });

// Without AVX-512 the portable kernel runs in its AVX2 + FMA build: the same bits as its
// plain build, at every block size and cache type.
TEST(PagedAttentionAvx2, GivesThePlainPortableBits) {
  if (!HaveAvx2Fma()) GTEST_SKIP() << "no AVX2 + FMA on this CPU";
  std::mt19937 rng(9);
  // Groups of 3, 1, 8 and 6 query heads (the grouped kernel takes four at a time), head
  // dims it takes (64, 128) and one it leaves to the per-head loop (40); block sizes
  // under, at and past a run of eight keys; windows, soft-capping and sinks.
  struct Heads {
    int32_t nh, nkv, hd;
  };
  for (kv::KvDtype dtype : {kv::KvDtype::kF32, kv::KvDtype::kBF16, kv::KvDtype::kF16}) {
    for (int32_t block_size : {1, 8, 16, 24, 32}) {
      for (Heads h : {Heads{9, 3, 64}, Heads{4, 4, 64}, Heads{8, 1, 128}, Heads{12, 2, 64},
                      Heads{6, 2, 40}}) {
        Fixture f(h.nh, h.nkv, h.hd, block_size, {{1, 1}, {40, 40}, {300, 3}}, rng, dtype);
        for (auto [window, softcap] :
             {std::pair{0, 0.0f}, std::pair{37, 0.0f}, std::pair{0, 0.5f}, std::pair{5, 0.5f}}) {
          AttentionShape shape = f.shape;
          shape.window = window;
          shape.softcap = softcap;
          // Attention sinks with the soft-cap runs (one of them above every score).
          std::vector<float> sinks(h.nh);
          for (int32_t i = 0; i < h.nh; ++i) sinks[i] = i == 1 ? 30.0f : 0.25f * (i % 5) - 0.5f;
          const float* sk = softcap > 0 ? sinks.data() : nullptr;
          std::vector<float> avx2(f.q.size()), plain(f.q.size());
          ForceAvx2Kernels(true);
          PagedAttention(f.q.data(), f.batch(), shape, 1, *f.cache, avx2.data(), nullptr, sk);
          ForcePortableKernels(true);
          PagedAttention(f.q.data(), f.batch(), shape, 1, *f.cache, plain.data(), nullptr, sk);
          ForcePortableKernels(false);
          EXPECT_EQ(0, std::memcmp(avx2.data(), plain.data(), avx2.size() * sizeof(float)))
              << kv::KvDtypeName(dtype) << " block " << block_size << " heads " << h.nh << "/"
              << h.nkv << " head_dim " << h.hd << " window " << window << " softcap " << softcap;
        }
      }
    }
  }
}

TEST(WriteKv, PlacesRowsAtTheirPositions) {
  std::mt19937 rng(8);
  Fixture f(2, 2, 16, 4, {{6, 3}}, rng);
  std::vector<float> k(3 * 2 * 16), v(3 * 2 * 16);
  std::iota(k.begin(), k.end(), 0.0f);
  std::iota(v.begin(), v.end(), 1000.0f);
  WriteKv(k.data(), v.data(), SlotMapping(f.batch(), 4), 1, *f.cache);
  // New rows are positions 3, 4, 5: block table entries 0 (slot 3) and 1 (slots 0, 1).
  // K is stored [kv_head][d][slot]: element (head 1, d 15) of position 3 is k[0][31].
  const float* kt0 = f.cache->Part(f.block_ids[0], 1, 0);
  EXPECT_EQ(kt0[(0 * 16 + 0) * 4 + 3], 0.0f);
  EXPECT_EQ(kt0[(1 * 16 + 15) * 4 + 3], 31.0f);
  const float* kt1 = f.cache->Part(f.block_ids[1], 1, 0);
  EXPECT_EQ(kt1[(0 * 16 + 1) * 4 + 1], 2 * 32 + 1.0f);             // position 5, head 0, d 1
  const float* v5 = f.cache->Part(f.block_ids[1], 1, 1) + 1 * 32;  // V: [slot][head][d]
  EXPECT_EQ(v5[0], 1000.0f + 64);
}

TEST(WriteKv, RoundsToSixteenBitElements) {
  std::mt19937 rng(9);
  for (kv::KvDtype dtype : {kv::KvDtype::kBF16, kv::KvDtype::kF16}) {
    Fixture f(2, 2, 16, 4, {{6, 3}}, rng, dtype);
    std::normal_distribution<float> g(0.0f, 3.0f);
    std::vector<float> k(3 * 2 * 16), v(3 * 2 * 16);
    for (auto& x : k) x = g(rng);
    for (auto& x : v) x = g(rng);
    WriteKv(k.data(), v.data(), SlotMapping(f.batch(), 4), 1, *f.cache);
    auto round = [&](float x) {
      return dtype == kv::KvDtype::kBF16 ? FloatToBf16(x) : FloatToHalf(x);
    };
    // Position 4 = block table entry 1, slot 0; head 1, d 3 is element 16 + 3 of its row.
    const uint16_t* kt = f.cache->Part<uint16_t>(f.block_ids[1], 1, 0);
    EXPECT_EQ(kt[(1 * 16 + 3) * 4 + 0], round(k[1 * 32 + 16 + 3]));
    const uint16_t* vr = f.cache->Part<uint16_t>(f.block_ids[1], 1, 1);
    EXPECT_EQ(vr[16 + 3], round(v[1 * 32 + 16 + 3]));
  }
}

}  // namespace
}  // namespace tandem::kernels
