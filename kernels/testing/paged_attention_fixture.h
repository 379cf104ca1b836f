// A paged-attention test batch shared by the CPU, tile-emulation and GPU attention
// tests: sequences with given cache lengths and new-token counts, blocks handed out in
// a shuffled order (tables are not contiguous), the whole cache and q filled with
// Gaussian noise (only the right rows may be read).
#ifndef TANDEM_KERNELS_TESTING_PAGED_ATTENTION_FIXTURE_H_
#define TANDEM_KERNELS_TESTING_PAGED_ATTENTION_FIXTURE_H_

#include <algorithm>
#include <cmath>
#include <memory>
#include <numeric>
#include <random>
#include <utility>
#include <vector>

#include "common/kv/kv_layout.h"
#include "common/util/half.h"
#include "kernels/cpu/attention.h"

namespace tandem::kernels::testing {

struct Fixture {
  kv::KvLayout layout;
  std::vector<float> storage;     // the cache's bytes (float-aligned)
  std::unique_ptr<KvView> cache;  // over `storage`
  std::vector<int32_t> q_indptr{0}, kv_len, block_indptr{0}, block_ids;
  std::vector<float> q;
  AttentionShape shape;

  Fixture(int32_t n_heads, int32_t n_kv_heads, int32_t head_dim, int32_t block_size,
          const std::vector<std::pair<int32_t, int32_t>>& seqs /* (kv_len, n_new) */,
          std::mt19937& rng, kv::KvDtype dtype = kv::KvDtype::kF32) {
    layout = {2, n_kv_heads, head_dim, block_size, dtype};
    int32_t blocks = 0;
    for (auto [len, n_new] : seqs) blocks += (len + block_size - 1) / block_size;
    storage.resize(static_cast<size_t>(blocks) * layout.BlockBytes() / sizeof(float) + 1);
    cache = std::make_unique<KvView>(
        KvView{layout, blocks, reinterpret_cast<uint8_t*>(storage.data())});
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
    for (int64_t i = 0; i < int64_t{blocks} * layout.BlockElements(); ++i) {
      const float x = g(rng);
      if (dtype == kv::KvDtype::kF32) {
        cache->Block<float>(0)[i] = x;
      } else {
        cache->Block<uint16_t>(0)[i] =
            dtype == kv::KvDtype::kBF16 ? FloatToBf16(x) : FloatToHalf(x);
      }
    }
    q.resize(static_cast<size_t>(q_indptr.back()) * n_heads * head_dim);
    for (auto& v : q) v = g(rng);
    shape = {n_heads, n_kv_heads, head_dim, 1.0f / std::sqrt(static_cast<float>(head_dim))};
  }
  PagedBatch batch() const { return {q_indptr, kv_len, block_indptr, block_ids}; }
};

// max |got - want|; a NaN anywhere (an unwritten, poisoned output) is infinite.
inline double MaxAbsError(const std::vector<float>& got, const std::vector<float>& want) {
  double worst = got.size() == want.size() ? 0 : INFINITY;
  for (size_t i = 0; i < got.size() && i < want.size(); ++i) {
    const double e = std::abs(double{got[i]} - want[i]);
    worst = std::isnan(e) ? INFINITY : std::max(worst, e);
  }
  return worst;
}

}  // namespace tandem::kernels::testing

#endif  // TANDEM_KERNELS_TESTING_PAGED_ATTENTION_FIXTURE_H_
