#include "cli/machine_limits.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <span>
#include <vector>

#include "common/util/huge_pages.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/thread_pool.h"

namespace tandem::cli {

namespace {
using Clock = std::chrono::steady_clock;
double Since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}
}  // namespace

double ReadBandwidthGBs(int threads) {
  // 1 GiB, one contiguous slice per thread (each core one sequential stream, as decode
  // reads its rows), read by kernels::StreamSum; the best of five passes. In memory
  // advised for transparent huge pages, as the engine's weights are by default
  // (common/util/huge_pages.h): the fastest this machine streams, 4 KiB pages being
  // slower (a TLB miss and a prefetcher stop per page).
  const size_t n = size_t{1} << 28;  // floats
  absl::StatusOr<HugePageRegion> region = HugePageRegion::Allocate(n * sizeof(float));
  if (!region.ok()) return 0;
  const std::span<float> buf(reinterpret_cast<float*>(region->data()), n);
  std::fill(buf.begin(), buf.end(), 1.0f);
  kernels::ThreadPool pool(threads);
  const int64_t slice = (static_cast<int64_t>(n) + threads - 1) / threads;
  std::vector<double> sums(threads);
  double best = 0;
  for (int rep = 0; rep < 5; ++rep) {
    const auto t0 = Clock::now();
    pool.ParallelFor(
        static_cast<int64_t>(n),
        [&](int64_t b, int64_t e, int t) { sums[t] += kernels::StreamSum(buf.data() + b, e - b); },
        slice);
    best = std::max(best, n * sizeof(float) / Since(t0) / 1e9);
  }
  return best;
}

double GemmGflops(int threads) {
  const int64_t m = 512, n = 2048, k = 2048;
  std::vector<float> x(m * k, 0.5f), w(n * k, 0.25f), out(m * n);
  kernels::WeightMatrix wm{model::GgmlType::kF32, n, k, reinterpret_cast<const uint8_t*>(w.data())};
  kernels::ThreadPool pool(threads);
  double best = 0;
  for (int rep = 0; rep < 3; ++rep) {
    const auto t0 = Clock::now();
    kernels::MatMul(x.data(), m, wm, out.data(), &pool);
    best = std::max(best, 2.0 * m * n * k / Since(t0) / 1e9);
  }
  return best;
}

double ModelGemmGflops(const engine::ModelWeights& weights, int threads) {
  const engine::LayerWeights& l = weights.layers().front();
  const int64_t m = 512;
  kernels::ThreadPool pool(threads);
  double best = 0;
  for (int rep = 0; rep < 3; ++rep) {
    double flops = 0, seconds = 0;
    for (const kernels::WeightMatrix* w :
         {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down}) {
      std::vector<float> x(m * w->cols, 0.01f), out(m * w->rows);
      const auto t0 = Clock::now();
      kernels::MatMul(x.data(), m, *w, out.data(), &pool);
      seconds += Since(t0);
      flops += 2.0 * m * w->rows * w->cols;
    }
    best = std::max(best, flops / seconds / 1e9);
  }
  return best;
}

double MatmulParams(const model::ModelConfig& c) {
  double n = double(c.vocab_size) * c.hidden_size;
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const double ffn = c.LayerIsMoe(l) ? double(c.moe.used) * c.moe.ffn_size + c.moe.shared_ffn_size
                                       : double(c.ffn_size);
    n += double(c.hidden_size) * (2.0 * c.n_heads * c.head_dim + 2.0 * c.n_kv_heads * c.head_dim +
                                  3.0 * ffn + (c.LayerIsMoe(l) ? double(c.moe.experts) : 0.0));
  }
  return n;
}

}  // namespace tandem::cli
