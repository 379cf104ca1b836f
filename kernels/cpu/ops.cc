#include "kernels/cpu/ops.h"

#include <cmath>

namespace tandem::kernels {

void RmsNorm(const float* x, const float* weight, int64_t rows, int64_t dim, float eps, float* out) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * dim;
    float lanes[16] = {};
    int64_t i = 0;
    for (; i + 16 <= dim; i += 16)
      for (int l = 0; l < 16; ++l) lanes[l] += xr[i + l] * xr[i + l];
    float ss = 0;
    for (int l = 0; l < 16; ++l) ss += lanes[l];
    for (; i < dim; ++i) ss += xr[i] * xr[i];
    const float scale = 1.0f / std::sqrt(ss / static_cast<float>(dim) + eps);
    float* o = out + r * dim;
    for (int64_t j = 0; j < dim; ++j) o[j] = xr[j] * scale * weight[j];
  }
}

void RmsNormReference(const float* x, const float* weight, int64_t rows, int64_t dim, float eps,
                      float* out) {
  for (int64_t r = 0; r < rows; ++r) {
    double ss = 0;
    for (int64_t i = 0; i < dim; ++i) ss += static_cast<double>(x[r * dim + i]) * x[r * dim + i];
    const double scale = 1.0 / std::sqrt(ss / dim + eps);
    for (int64_t i = 0; i < dim; ++i) out[r * dim + i] = static_cast<float>(x[r * dim + i] * scale * weight[i]);
  }
}

namespace {

// The inverse frequency of pair i, computed in float32 as the reference
// implementations (Hugging Face, llama.cpp) do.
float InvFreq(const RopeParams& p, int32_t i) {
  float f = 1.0f / std::pow(p.theta, static_cast<float>(2 * i) / static_cast<float>(p.rope_dim));
  if (p.freq_factors != nullptr) f /= p.freq_factors[i];
  return f;
}

template <typename Real>
void RopeImpl(float* x, int64_t n, int32_t n_heads, std::span<const int32_t> positions,
              const RopeParams& p) {
  const int32_t half = p.rope_dim / 2;
  for (int64_t t = 0; t < n; ++t) {
    const float pos = static_cast<float>(positions[t]) / p.position_scale;
    for (int32_t i = 0; i < half; ++i) {
      const float angle = pos * InvFreq(p, i);
      const Real c = std::cos(static_cast<Real>(angle)), s = std::sin(static_cast<Real>(angle));
      for (int32_t h = 0; h < n_heads; ++h) {
        float* v = x + (t * n_heads + h) * p.head_dim;
        const int32_t a = p.style == RopeStyle::kAdjacent ? 2 * i : i;
        const int32_t b = p.style == RopeStyle::kAdjacent ? 2 * i + 1 : i + half;
        const Real x0 = v[a], x1 = v[b];
        v[a] = static_cast<float>(x0 * c - x1 * s);
        v[b] = static_cast<float>(x0 * s + x1 * c);
      }
    }
  }
}

}  // namespace

void Rope(float* x, int64_t n, int32_t n_heads, std::span<const int32_t> positions,
          const RopeParams& p) {
  RopeImpl<float>(x, n, n_heads, positions, p);
}

void RopeReference(float* x, int64_t n, int32_t n_heads, std::span<const int32_t> positions,
                   const RopeParams& p) {
  RopeImpl<double>(x, n, n_heads, positions, p);
}

void SwiGlu(const float* gate, const float* up, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

void SwiGluReference(const float* gate, const float* up, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) {
    const double g = gate[i];
    out[i] = static_cast<float>(g / (1.0 + std::exp(-g)) * up[i]);
  }
}

void AddInPlace(float* x, const float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] += y[i];
}

}  // namespace tandem::kernels
