// The GPU attention algorithms, run on the CPU with the very tile functions the CUDA
// kernels use (attention_tile.h): FlashAttention-style tiled causal prefill over paged
// KV, and split-K decode with a merge. Compared with PagedAttentionReference (double)
// at awkward sizes. What only a device can check (shared memory, warp shuffles,
// timing) is left to attention_gpu_test.cc.
#include "kernels/cuda/attention_tile.h"

#include <algorithm>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/testing/paged_attention_fixture.h"

namespace tandem::kernels {
namespace {

using ::tandem::kernels::testing::Fixture;

tile::KvGeometry Geometry(const kv::KvLayout& l) {
  return {l.BlockElements(), l.LayerStride(), l.PartStride(),
          l.block_size,      l.n_kv_heads,    l.head_dim};
}

// One query row over keys [k_begin, k_end) of its sequence, in tiles of `tile_keys`;
// returns the unnormalized state (m, l, acc). Keys past `q_pos` are masked.
struct Partial {
  tile::OnlineSoftmax sm;
  std::vector<float> acc;
};

Partial AttendRange(const float* q, int32_t q_pos, int32_t k_begin, int32_t k_end,
                    const int32_t* table, int32_t kvh, int32_t layer, const Fixture& f,
                    int32_t tile_keys) {
  const tile::KvGeometry g = Geometry(f.layout);
  const float* cache = f.cache->Part(0, 0, 0);
  const int32_t d = f.shape.head_dim;
  Partial p;
  p.acc.assign(d, 0.f);
  std::vector<float> s(tile_keys);
  for (int32_t t0 = k_begin; t0 < k_end; t0 += tile_keys) {
    const int32_t n = std::min(tile_keys, k_end - t0);
    float tile_max = -INFINITY;
    for (int32_t j = 0; j < n; ++j) {
      const int32_t pos = t0 + j;
      if (pos > q_pos) {
        s[j] = -INFINITY;
        continue;
      }
      int32_t block, slot;
      tile::Locate(table, pos, f.layout.block_size, &block, &slot);
      float dot = 0.f;
      for (int32_t i = 0; i < d; ++i) dot += q[i] * cache[g.K(block, layer, kvh, i, slot)];
      s[j] = dot * f.shape.scale;
      tile_max = std::max(tile_max, s[j]);
    }
    const float factor = p.sm.Rescale(tile_max);
    for (float& a : p.acc) a *= factor;
    for (int32_t j = 0; j < n; ++j) {
      const float w = p.sm.Weight(s[j]);
      if (w == 0.f) continue;
      p.sm.Add(w);
      int32_t block, slot;
      tile::Locate(table, t0 + j, f.layout.block_size, &block, &slot);
      for (int32_t i = 0; i < d; ++i) p.acc[i] += w * cache[g.V(block, layer, kvh, i, slot)];
    }
  }
  return p;
}

// mode: 0 = tiled prefill (one range), otherwise split-K with `splits` ranges merged.
std::vector<float> TiledAttention(const Fixture& f, int32_t layer, int32_t tile_keys,
                                  int32_t keys_per_split, int32_t max_splits) {
  const AttentionShape& sh = f.shape;
  std::vector<float> out(f.q.size(), 0.f);
  for (int32_t s = 0; s < static_cast<int32_t>(f.kv_len.size()); ++s) {
    const int32_t q_begin = f.q_indptr[s], q_len = f.q_indptr[s + 1] - q_begin;
    const int32_t* table = f.block_ids.data() + f.block_indptr[s];
    for (int32_t r = 0; r < q_len; ++r) {
      const int32_t q_pos = f.kv_len[s] - q_len + r;
      for (int32_t h = 0; h < sh.n_heads; ++h) {
        const float* q =
            f.q.data() + (static_cast<int64_t>(q_begin + r) * sh.n_heads + h) * sh.head_dim;
        const int32_t kvh = tile::KvHeadOf(h, sh.n_heads, sh.n_kv_heads);
        const int32_t keys = q_pos + 1;
        const int32_t splits = tile::NumSplits(keys, keys_per_split, max_splits);
        const int32_t per = (keys + splits - 1) / splits;
        Partial total;
        total.acc.assign(sh.head_dim, 0.f);
        for (int32_t sp = 0; sp < splits; ++sp) {
          const int32_t b = sp * per, e = std::min(keys, b + per);
          if (b >= e) continue;
          Partial part = AttendRange(q, q_pos, b, e, table, kvh, layer, f, tile_keys);
          float m, l, wa, wb;
          tile::MergeWeights(total.sm.m, total.sm.l, part.sm.m, part.sm.l, &m, &l, &wa, &wb);
          for (int32_t i = 0; i < sh.head_dim; ++i)
            total.acc[i] = wa * total.acc[i] + wb * part.acc[i];
          total.sm.m = m;
          total.sm.l = l;
        }
        float* o = out.data() + (static_cast<int64_t>(q_begin + r) * sh.n_heads + h) * sh.head_dim;
        const float inv = total.sm.Normalizer();
        for (int32_t i = 0; i < sh.head_dim; ++i) o[i] = total.acc[i] * inv;
      }
    }
  }
  return out;
}

void ExpectClose(const std::vector<float>& got, const std::vector<float>& want) {
  ASSERT_EQ(got.size(), want.size());
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i)
    worst = std::max(worst, std::abs(double{got[i]} - want[i]));
  EXPECT_LT(worst, 2e-5) << "max |Δ| over " << got.size() << " outputs";
}

TEST(AttentionTile, TiledPrefillMatchesReference) {
  std::mt19937 rng(11);
  for (int32_t head_dim : {64, 128}) {
    for (int32_t block_size : {1, 16}) {
      for (auto [nh, nkv] : {std::pair{4, 4}, std::pair{9, 3}, std::pair{8, 1}}) {
        SCOPED_TRACE(::testing::Message() << "head_dim " << head_dim << " block " << block_size
                                          << " heads " << nh << "/" << nkv);
        // Prompts in one pass, a chunk after a cached prefix, and decode rows.
        Fixture f(nh, nkv, head_dim, block_size, {{1, 1}, {15, 15}, {17, 17}, {100, 7}, {1000, 1}},
                  rng);
        std::vector<float> want(f.q.size());
        PagedAttentionReference(f.q.data(), f.batch(), f.shape, 1, *f.cache, want.data());
        for (int32_t tile_keys : {1, 16, 32, 64}) {
          ExpectClose(TiledAttention(f, 1, tile_keys, /*keys_per_split=*/1 << 30, 1), want);
        }
      }
    }
  }
}

TEST(AttentionTile, SplitKDecodeMatchesReferenceAtBatch1_7_17) {
  std::mt19937 rng(12);
  for (int32_t batch : {1, 7, 17}) {
    std::vector<std::pair<int32_t, int32_t>> seqs;
    for (int32_t i = 0; i < batch; ++i) seqs.push_back({1 + (i * 613 + 17) % 4097, 1});
    Fixture f(8, 2, 128, 16, seqs, rng);
    std::vector<float> want(f.q.size());
    PagedAttentionReference(f.q.data(), f.batch(), f.shape, 0, *f.cache, want.data());
    for (int32_t keys_per_split : {15, 256, 1024}) {
      SCOPED_TRACE(::testing::Message()
                   << "batch " << batch << ", " << keys_per_split << " keys per split");
      ExpectClose(TiledAttention(f, 0, 32, keys_per_split, 64), want);
    }
  }
}

TEST(AttentionTile, MergeIsOrderFreeAndHandlesEmptyParts) {
  float m, l, wa, wb;
  tile::MergeWeights(-INFINITY, 0.f, 2.f, 3.f, &m, &l, &wa, &wb);
  EXPECT_EQ(m, 2.f);
  EXPECT_EQ(l, 3.f);
  EXPECT_EQ(wa, 0.f);
  EXPECT_EQ(wb, 1.f);
  tile::MergeWeights(1.f, 2.f, 3.f, 4.f, &m, &l, &wa, &wb);
  float m2, l2, wa2, wb2;
  tile::MergeWeights(3.f, 4.f, 1.f, 2.f, &m2, &l2, &wa2, &wb2);
  EXPECT_EQ(m, m2);
  EXPECT_FLOAT_EQ(l, l2);
  EXPECT_EQ(wa, wb2);
  tile::OnlineSoftmax sm;
  EXPECT_EQ(sm.Rescale(-INFINITY), 0.f);
  EXPECT_EQ(sm.Normalizer(), 0.f);
  // The CUDA kernel locates a key's V row once and indexes dimensions from it.
  const tile::KvGeometry g{1000, 100, 50, 16, 3, 64};
  for (int32_t d : {0, 1, 63}) EXPECT_EQ(g.V(7, 2, 1, d, 5), g.V(7, 2, 1, 0, 5) + d);
  EXPECT_EQ(tile::NumSplits(1, 256, 64), 1);
  EXPECT_EQ(tile::NumSplits(8192, 256, 64), 32);
  EXPECT_EQ(tile::NumSplits(100000, 256, 64), 64);
}

}  // namespace
}  // namespace tandem::kernels
