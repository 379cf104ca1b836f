#include "kernels/cpu/attention.h"

#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/vec_math.h"

namespace tandem::kernels {
namespace {

// A batch of sequences with given cache lengths and new-token counts, blocks handed
// out in a shuffled order so tables are not contiguous.
struct Fixture {
  kv::KvLayout layout;
  std::unique_ptr<kv::KvCache> cache;
  std::vector<int32_t> q_indptr{0}, kv_len, block_indptr{0}, block_ids;
  std::vector<float> q;
  AttentionShape shape;

  Fixture(int32_t n_heads, int32_t n_kv_heads, int32_t head_dim, int32_t block_size,
          const std::vector<std::pair<int32_t, int32_t>>& seqs /* (kv_len, n_new) */,
          std::mt19937& rng) {
    layout = {2, n_kv_heads, head_dim, block_size};
    int32_t blocks = 0;
    for (auto [len, n_new] : seqs) blocks += (len + block_size - 1) / block_size;
    cache = *kv::KvCache::Create(layout, int64_t{blocks} * layout.BlockBytes());
    std::vector<int32_t> order(blocks);
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    int32_t next = 0;
    std::normal_distribution<float> g(0.0f, 1.0f);
    for (auto [len, n_new] : seqs) {
      kv_len.push_back(len);
      q_indptr.push_back(q_indptr.back() + n_new);
      for (int32_t b = 0; b < (len + block_size - 1) / block_size; ++b)
        block_ids.push_back(order[next++]);
      block_indptr.push_back(static_cast<int32_t>(block_ids.size()));
    }
    // Fill the whole cache with noise: only the right rows may be read.
    for (int64_t i = 0; i < int64_t{blocks} * layout.BlockElements(); ++i)
      cache->Block(0)[i] = g(rng);
    q.resize(static_cast<size_t>(q_indptr.back()) * n_heads * head_dim);
    for (auto& v : q) v = g(rng);
    shape = {n_heads, n_kv_heads, head_dim, 1.0f / std::sqrt(static_cast<float>(head_dim))};
  }
  PagedBatch batch() const { return {q_indptr, kv_len, block_indptr, block_ids}; }
};

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

TEST(WriteKv, PlacesRowsAtTheirPositions) {
  std::mt19937 rng(8);
  Fixture f(2, 2, 16, 4, {{6, 3}}, rng);
  std::vector<float> k(3 * 2 * 16), v(3 * 2 * 16);
  std::iota(k.begin(), k.end(), 0.0f);
  std::iota(v.begin(), v.end(), 1000.0f);
  WriteKv(k.data(), v.data(), f.batch(), 1, f.cache.get());
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

}  // namespace
}  // namespace tandem::kernels
