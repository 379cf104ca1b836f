// What this machine and this model allow, measured or computed the same way by every
// benchmark: read bandwidth, tandem's own GEMM throughput (the prefill kernel), and a
// model's matmul parameter count and weight bytes (for the 2 × parameters × tokens
// estimate and roofline arithmetic intensities).
#ifndef TANDEM_CLI_MACHINE_LIMITS_H_
#define TANDEM_CLI_MACHINE_LIMITS_H_

#include "common/engine/model_weights.h"
#include "common/model/model_config.h"

namespace tandem::cli {

// GB/s: every thread streams its contiguous slice of a 1 GiB buffer in memory advised
// for transparent huge pages (kernels::StreamSum), best of 5; 0 if it cannot be allocated.
double ReadBandwidthGBs(int threads);
// GFLOP/s of kernels::MatMul (float32) on a 512 × 2048 × 2048 problem, best of 3.
double GemmGflops(int threads);
// GFLOP/s of the model's own matmuls as prefill runs them: a 512-token batch through
// every weight matrix of layer 0 (their GGUF types, tandem's kernels), best of 3.
double ModelGemmGflops(const engine::ModelWeights& weights, int threads);
// Parameters in the matmuls one token goes through (Q, K, V, O, gate, up, down per
// layer — of a mixture of experts the router, the picked experts and the shared one —
// and the output projection): each costs 2 FLOPs per token. Attention's own FLOPs are
// not included.
double MatmulParams(const model::ModelConfig& config);

}  // namespace tandem::cli

#endif  // TANDEM_CLI_MACHINE_LIMITS_H_
