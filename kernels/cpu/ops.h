// Element-wise and row-wise ops of the Llama forward pass, on float32 host buffers.
//
// Each op has the fast form the engine runs and a `...Reference` form (plain loops,
// double accumulation where it matters) that ops_test.cc compares it with. All are
// pure functions of their inputs; distinct outputs may be computed concurrently.
// Row results never depend on how many rows are processed together.
#ifndef TANDEM_KERNELS_CPU_OPS_H_
#define TANDEM_KERNELS_CPU_OPS_H_

#include <cstdint>
#include <span>
#include <vector>

#include "kernels/backend.h"

namespace tandem::kernels {

// out[r] = x[r] / sqrt(mean(x[r]²) + eps) * weight          x, out: [rows][dim]
void RmsNorm(const float* x, const float* weight, int64_t rows, int64_t dim, float eps, float* out);
void RmsNormReference(const float* x, const float* weight, int64_t rows, int64_t dim, float eps,
                      float* out);

// RoPE (RopeParams and RopeStyle: kernels/backend.h). `freq_factors` [rope_dim / 2]
// divides the frequencies (Llama 3, YaRN) or is null; cos and sin are multiplied by
// p.attention_factor.
//
// table [n][rope_dim]: cos of every (token, pair) angle in the first rope_dim / 2
// columns, sin in the rest. Built once per forward pass and shared by Q and K of
// every layer.
void BuildRopeTable(std::span<const int32_t> positions, const RopeParams& p,
                    const float* freq_factors, float* table);

// YaRN (transformers' _compute_yarn_parameters): the inverse frequency of pair i
// blends the interpolated θ^(−2i/d) / factor and the extrapolated θ^(−2i/d) by a ramp
// that is 0 below the correction dim of beta_fast rotations over the original context
// and 1 above that of beta_slow (bounds floored / ceiled when `truncate`), in float32
// as transformers computes it; returned as the divisors `freq_factors` of the plain
// inverse frequencies that BuildRopeTable applies ([rope_dim / 2]).
struct YarnParams {
  double factor = 1.0;
  double original_context = 0;
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  bool truncate = true;
};
std::vector<float> YarnFreqFactors(const YarnParams& y, float theta, int32_t rope_dim);
// YaRN's default attention factor: 1 + 0.1 · ln(factor) (1 for factor ≤ 1).
double YarnAttentionFactor(double factor);

// Rotates x [n][n_heads][head_dim] in place with rows [first, first + n) of `table`.
void ApplyRope(float* x, int64_t n, int32_t n_heads, const float* table, int64_t first,
               const RopeParams& p);

// Rotates x [n][n_heads][head_dim] in place; token t sits at positions[t].
void Rope(float* x, int64_t n, int32_t n_heads, std::span<const int32_t> positions,
          const RopeParams& p, const float* freq_factors = nullptr);
void RopeReference(float* x, int64_t n, int32_t n_heads, std::span<const int32_t> positions,
                   const RopeParams& p, const float* freq_factors = nullptr);

// out = silu(gate) * up, silu(g) = g / (1 + e^-g)                   [n]
void SwiGlu(const float* gate, const float* up, int64_t n, float* out);
void SwiGluReference(const float* gate, const float* up, int64_t n, float* out);

// out = gelu_tanh(gate) * up, gelu_tanh(g) = g/2 · (1 + tanh(√(2/π) · (g + 0.044715 g³)))
//                                                                   [n]
void GeGlu(const float* gate, const float* up, int64_t n, float* out);
void GeGluReference(const float* gate, const float* up, int64_t n, float* out);

// gpt-oss's clamped SwiGLU: g = min(gate, 7), u = clamp(up, −7, 7),
// out = (u + 1) · g · sigmoid(1.702 g)                                  [n]
void SwigluOai(const float* gate, const float* up, int64_t n, float* out);
void SwigluOaiReference(const float* gate, const float* up, int64_t n, float* out);

// x = cap · tanh(x / cap)                                           [n]
void SoftCap(float* x, int64_t n, float cap);

// x += y                                                            [n]
void AddInPlace(float* x, const float* y, int64_t n);

// Σ x[i] read as one stream, as fast as this core reads memory: the widest vector loads
// (AVX-512, else AVX2), four independent sums, the lines 2 KiB ahead prefetched — what
// cli/machine_limits.cc times as the machine's read bandwidth, the roof decode is held
// to. The order of the additions is unspecified (within float rounding of the sum).
float StreamSum(const float* x, int64_t n);

}  // namespace tandem::kernels

#endif  // TANDEM_KERNELS_CPU_OPS_H_
