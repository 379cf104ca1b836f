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

namespace tandem::kernels {

// out[r] = x[r] / sqrt(mean(x[r]²) + eps) * weight          x, out: [rows][dim]
void RmsNorm(const float* x, const float* weight, int64_t rows, int64_t dim, float eps, float* out);
void RmsNormReference(const float* x, const float* weight, int64_t rows, int64_t dim, float eps,
                      float* out);

// How RoPE pairs dimensions: kAdjacent rotates (2i, 2i+1) (llama/mistral GGUF, whose
// Q/K weights are stored permuted); kHalves rotates (i, i + rope_dim/2) (qwen2, NeoX).
enum class RopeStyle { kAdjacent, kHalves };

struct RopeParams {
  int32_t head_dim = 0;
  int32_t rope_dim = 0;  // leading dims that rotate (≤ head_dim, even)
  float theta = 10000.0f;
  float position_scale = 1.0f;          // linear scaling: position / factor
  const float* freq_factors = nullptr;  // [rope_dim / 2] divisors (Llama 3), or null
  RopeStyle style = RopeStyle::kAdjacent;
};

// cos and sin of every (token, pair) angle: [n][rope_dim / 2] each. Built once per
// forward pass and shared by Q and K of every layer.
struct RopeTable {
  std::vector<float> cos, sin;
  int32_t half = 0;
};
void BuildRopeTable(std::span<const int32_t> positions, const RopeParams& p, RopeTable* table);

// Rotates x [n][n_heads][head_dim] in place with rows [first, first + n) of `table`.
void ApplyRope(float* x, int64_t n, int32_t n_heads, const RopeTable& table, int64_t first,
               const RopeParams& p);

// Rotates x [n][n_heads][head_dim] in place; token t sits at positions[t].
void Rope(float* x, int64_t n, int32_t n_heads, std::span<const int32_t> positions,
          const RopeParams& p);
void RopeReference(float* x, int64_t n, int32_t n_heads, std::span<const int32_t> positions,
                   const RopeParams& p);

// out = silu(gate) * up, silu(g) = g / (1 + e^-g)                   [n]
void SwiGlu(const float* gate, const float* up, int64_t n, float* out);
void SwiGluReference(const float* gate, const float* up, int64_t n, float* out);

// x += y                                                            [n]
void AddInPlace(float* x, const float* y, int64_t n);

}  // namespace tandem::kernels

#endif  // TANDEM_KERNELS_CPU_OPS_H_
