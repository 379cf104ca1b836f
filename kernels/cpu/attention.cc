#include "kernels/cpu/attention.h"

#include <cmath>
#include <cstring>
#include <vector>

namespace tandem::kernels {

namespace {

// Cache row of (sequence position j, kv head h) in `part` (0 = K, 1 = V).
inline const float* CacheRow(const kv::KvCache& cache, std::span<const int32_t> table, int32_t j,
                             int32_t layer, int part, int32_t h) {
  const kv::KvLayout& L = cache.layout();
  const int32_t block = table[j / L.block_size];
  const int32_t slot = j % L.block_size;
  return cache.Part(block, layer, part) + (static_cast<int64_t>(slot) * L.n_kv_heads + h) * L.head_dim;
}

// Sequence index of each query row.
std::vector<int32_t> RowOwners(const PagedBatch& b) {
  std::vector<int32_t> owner(b.q_indptr.back());
  for (int32_t s = 0; s < b.num_seqs(); ++s)
    for (int32_t t = b.q_indptr[s]; t < b.q_indptr[s + 1]; ++t) owner[t] = s;
  return owner;
}

// Dot product with a fixed order: 16 lanes, then a pairwise lane sum.
inline float Dot(const float* a, const float* b, int32_t n) {
  float lanes[16] = {};
  int32_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int l = 0; l < 16; ++l) lanes[l] += a[i + l] * b[i + l];
  for (int w = 8; w >= 1; w /= 2)
    for (int l = 0; l < w; ++l) lanes[l] += lanes[l + w];
  float s = lanes[0];
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

}  // namespace

void WriteKv(const float* k, const float* v, const PagedBatch& batch, int32_t layer,
             kv::KvCache* cache) {
  const kv::KvLayout& L = cache->layout();
  const int64_t row = static_cast<int64_t>(L.n_kv_heads) * L.head_dim;
  for (int32_t s = 0; s < batch.num_seqs(); ++s) {
    const int32_t q0 = batch.q_indptr[s], n = batch.q_indptr[s + 1] - q0;
    const auto table = batch.block_ids.subspan(batch.block_indptr[s],
                                               batch.block_indptr[s + 1] - batch.block_indptr[s]);
    for (int32_t t = 0; t < n; ++t) {
      const int32_t pos = batch.kv_len[s] - n + t;
      const int32_t block = table[pos / L.block_size], slot = pos % L.block_size;
      std::memcpy(cache->Part(block, layer, 0) + slot * row, k + (q0 + t) * row, row * sizeof(float));
      std::memcpy(cache->Part(block, layer, 1) + slot * row, v + (q0 + t) * row, row * sizeof(float));
    }
  }
}

void PagedAttention(const float* q, const PagedBatch& batch, const AttentionShape& sh,
                    int32_t layer, const kv::KvCache& cache, float* out, ThreadPool* pool) {
  const std::vector<int32_t> owner = RowOwners(batch);
  const int64_t n_rows = static_cast<int64_t>(owner.size());
  const int32_t group = sh.n_heads / sh.n_kv_heads, hd = sh.head_dim;
  auto work = [&](int64_t begin, int64_t end, int) {
    std::vector<float> scores;
    std::vector<float> acc(hd);
    for (int64_t item = begin; item < end; ++item) {
      const int32_t t = static_cast<int32_t>(item / sh.n_heads);
      const int32_t h = static_cast<int32_t>(item % sh.n_heads);
      const int32_t s = owner[t];
      const int32_t n_new = batch.q_indptr[s + 1] - batch.q_indptr[s];
      const int32_t pos = batch.kv_len[s] - n_new + (t - batch.q_indptr[s]);
      const auto table = batch.block_ids.subspan(batch.block_indptr[s],
                                                 batch.block_indptr[s + 1] - batch.block_indptr[s]);
      const float* qv = q + (static_cast<int64_t>(t) * sh.n_heads + h) * hd;
      const int32_t kvh = h / group;
      scores.resize(pos + 1);
      float mx = -INFINITY;
      for (int32_t j = 0; j <= pos; ++j) {
        scores[j] = Dot(qv, CacheRow(cache, table, j, layer, 0, kvh), hd) * sh.scale;
        mx = std::max(mx, scores[j]);
      }
      float sum = 0;
      for (int32_t j = 0; j <= pos; ++j) {
        scores[j] = std::exp(scores[j] - mx);
        sum += scores[j];
      }
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int32_t j = 0; j <= pos; ++j) {
        const float* vv = CacheRow(cache, table, j, layer, 1, kvh);
        const float p = scores[j];
        for (int32_t d = 0; d < hd; ++d) acc[d] += p * vv[d];
      }
      float* o = out + (static_cast<int64_t>(t) * sh.n_heads + h) * hd;
      const float inv = 1.0f / sum;
      for (int32_t d = 0; d < hd; ++d) o[d] = acc[d] * inv;
    }
  };
  const int64_t items = n_rows * sh.n_heads;
  if (pool == nullptr) {
    work(0, items, 0);
  } else {
    pool->ParallelFor(items, work);
  }
}

void PagedAttentionReference(const float* q, const PagedBatch& batch, const AttentionShape& sh,
                             int32_t layer, const kv::KvCache& cache, float* out) {
  const int32_t group = sh.n_heads / sh.n_kv_heads, hd = sh.head_dim;
  for (int32_t s = 0; s < batch.num_seqs(); ++s) {
    const int32_t len = batch.kv_len[s];
    const auto table = batch.block_ids.subspan(batch.block_indptr[s],
                                               batch.block_indptr[s + 1] - batch.block_indptr[s]);
    const int32_t q0 = batch.q_indptr[s], n_new = batch.q_indptr[s + 1] - q0;
    for (int32_t h = 0; h < sh.n_heads; ++h) {
      // Gather this head's K and V contiguously.
      std::vector<double> K(static_cast<size_t>(len) * hd), V(static_cast<size_t>(len) * hd);
      for (int32_t j = 0; j < len; ++j) {
        const float* kr = CacheRow(cache, table, j, layer, 0, h / group);
        const float* vr = CacheRow(cache, table, j, layer, 1, h / group);
        for (int32_t d = 0; d < hd; ++d) {
          K[j * hd + d] = kr[d];
          V[j * hd + d] = vr[d];
        }
      }
      for (int32_t t = 0; t < n_new; ++t) {
        const int32_t pos = len - n_new + t;
        const float* qv = q + (static_cast<int64_t>(q0 + t) * sh.n_heads + h) * hd;
        std::vector<double> w(pos + 1);
        double mx = -INFINITY, sum = 0;
        for (int32_t j = 0; j <= pos; ++j) {
          double dot = 0;
          for (int32_t d = 0; d < hd; ++d) dot += qv[d] * K[j * hd + d];
          w[j] = dot * sh.scale;
          mx = std::max(mx, w[j]);
        }
        for (auto& x : w) sum += (x = std::exp(x - mx));
        float* o = out + (static_cast<int64_t>(q0 + t) * sh.n_heads + h) * hd;
        for (int32_t d = 0; d < hd; ++d) {
          double a = 0;
          for (int32_t j = 0; j <= pos; ++j) a += w[j] * V[j * hd + d];
          o[d] = static_cast<float>(a / sum);
        }
      }
    }
  }
}

}  // namespace tandem::kernels
