// The CUDA paged attention against PagedAttentionReference (double) at awkward sizes:
// batch 1/7/17, cache lengths 1/15/17/1000/4097, block sizes 1 and 16, head dims 64
// and 128, GQA, split-K on and off. Outputs start poisoned (NaN) so an unwritten row
// fails. Skips where no CUDA device is present.
#include <cuda_runtime.h>

#include <cmath>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cuda/attention_cuda.h"
#include "kernels/cuda/cuda_device.h"
#include "kernels/testing/paged_attention_fixture.h"

namespace tandem::kernels::cuda {
namespace {

using ::tandem::kernels::testing::Fixture;

template <class T>
T* Upload(const std::vector<T>& host) {
  T* d = nullptr;
  EXPECT_EQ(cudaMalloc(&d, host.size() * sizeof(T)), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(d, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice),
            cudaSuccess);
  return d;
}

// Runs `f` on the device and returns max |Δ| against the reference.
double MaxError(const Fixture& f, int32_t layer, const AttentionTuning& tuning) {
  std::vector<float> want(f.q.size());
  PagedAttentionReference(f.q.data(), f.batch(), f.shape, layer, *f.cache, want.data());
  const int64_t cache_floats = int64_t{f.cache->num_blocks} * f.layout.BlockElements();
  std::vector<float> cache_host(f.cache->Part(0, 0, 0), f.cache->Part(0, 0, 0) + cache_floats);
  float* d_cache = Upload(cache_host);
  float* d_q = Upload(f.q);
  float* d_out = Upload(std::vector<float>(f.q.size(), NAN));
  DeviceScratch scratch;
  absl::Status st = PagedAttentionCuda(d_q, f.batch(), f.shape, layer, f.layout, d_cache, d_out,
                                       &scratch, tuning);
  EXPECT_TRUE(st.ok()) << st;
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<float> got(f.q.size());
  EXPECT_EQ(cudaMemcpy(got.data(), d_out, got.size() * sizeof(float), cudaMemcpyDeviceToHost),
            cudaSuccess);
  cudaFree(d_cache);
  cudaFree(d_q);
  cudaFree(d_out);
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double e = std::abs(double{got[i]} - want[i]);
    worst = std::isnan(e) ? INFINITY : std::max(worst, e);
  }
  return worst;
}

TEST(AttentionGpu, MatchesReferenceAtAwkwardSizes) {
  auto n = DeviceCount();
  if (!n.ok()) GTEST_SKIP() << "no CUDA device: " << n.status();
  std::mt19937 rng(21);
  for (int32_t head_dim : {64, 128}) {
    for (int32_t block_size : {1, 16}) {
      Fixture f(8, 2, head_dim, block_size, {{1, 1}, {15, 15}, {17, 17}, {1000, 7}, {4097, 1}},
                rng);
      for (AttentionTuning t :
           {AttentionTuning{512, 1}, AttentionTuning{256, 32}, AttentionTuning{15, 64}}) {
        SCOPED_TRACE(::testing::Message() << "head_dim " << head_dim << " block " << block_size
                                          << " split " << t.keys_per_split << "/" << t.max_splits);
        EXPECT_LT(MaxError(f, 1, t), 1e-4);
      }
    }
  }
}

TEST(AttentionGpu, DecodeBatches1_7_17) {
  auto n = DeviceCount();
  if (!n.ok()) GTEST_SKIP() << "no CUDA device: " << n.status();
  std::mt19937 rng(22);
  for (int32_t batch : {1, 7, 17}) {
    std::vector<std::pair<int32_t, int32_t>> seqs;
    for (int32_t i = 0; i < batch; ++i) seqs.push_back({1 + (i * 613 + 17) % 4097, 1});
    Fixture f(32, 8, 128, 16, seqs, rng);
    SCOPED_TRACE(::testing::Message() << "batch " << batch);
    EXPECT_LT(MaxError(f, 0, {}), 1e-4);
  }
}

}  // namespace
}  // namespace tandem::kernels::cuda
