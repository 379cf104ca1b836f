#include "kernels/cpu/ops.h"

#include <algorithm>
#include <cmath>
#include <complex>

#include "kernels/cpu/vec_math.h"

namespace tandem::kernels {

void RmsNorm(const float* x, const float* weight, int64_t rows, int64_t dim, float eps,
             float* out) {
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
    for (int64_t i = 0; i < dim; ++i)
      out[r * dim + i] = static_cast<float>(x[r * dim + i] * scale * weight[i]);
  }
}

namespace {

// The inverse frequency of pair i, computed in float32 as the reference
// implementations (Hugging Face, llama.cpp) do.
float InvFreq(const RopeParams& p, const float* freq_factors, int32_t i) {
  float f = 1.0f / std::pow(p.theta, static_cast<float>(2 * i) / static_cast<float>(p.rope_dim));
  if (freq_factors != nullptr) f /= freq_factors[i];
  return f;
}

}  // namespace

void BuildRopeTable(std::span<const int32_t> positions, const RopeParams& p,
                    const float* freq_factors, float* table) {
  const int32_t half = p.rope_dim / 2;
  std::vector<float> inv(half);
  for (int32_t i = 0; i < half; ++i) inv[i] = InvFreq(p, freq_factors, i);
  for (size_t r = 0; r < positions.size(); ++r) {
    const float pos = static_cast<float>(positions[r]) / p.position_scale;
    float* row = table + r * p.rope_dim;
    for (int32_t i = 0; i < half; ++i) {
      const float angle = pos * inv[i];
      row[i] = std::cos(angle) * p.attention_factor;
      row[half + i] = std::sin(angle) * p.attention_factor;
    }
  }
}

std::vector<float> YarnFreqFactors(const YarnParams& y, float theta, int32_t rope_dim) {
  const int32_t half = rope_dim / 2;
  const double two_pi = 6.283185307179586;
  auto correction_dim = [&](double rotations) {
    return rope_dim * std::log(y.original_context / (rotations * two_pi)) /
           (2 * std::log(static_cast<double>(theta)));
  };
  double low = correction_dim(y.beta_fast), high = correction_dim(y.beta_slow);
  if (y.truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, rope_dim - 1.0);
  if (low == high) high += 0.001;  // as transformers: no division by zero
  const float factor = static_cast<float>(y.factor);
  std::vector<float> out(static_cast<size_t>(half));
  for (int32_t i = 0; i < half; ++i) {
    // float32 throughout, as torch computes it.
    const float pos_freq =
        std::pow(theta, static_cast<float>(2 * i) / static_cast<float>(rope_dim));
    const float extrapolated = 1.0f / pos_freq, interpolated = 1.0f / (factor * pos_freq);
    const float ramp = std::clamp(
        (static_cast<float>(i) - static_cast<float>(low)) / static_cast<float>(high - low), 0.0f,
        1.0f);
    const float keep = 1.0f - ramp;  // the extrapolated share
    const float inv = interpolated * (1.0f - keep) + extrapolated * keep;
    RopeParams plain;
    plain.theta = theta;
    plain.rope_dim = rope_dim;
    out[i] = static_cast<float>(static_cast<double>(InvFreq(plain, nullptr, i)) / inv);
  }
  return out;
}

double YarnAttentionFactor(double factor) {
  return factor <= 1 ? 1.0 : 0.1 * std::log(factor) + 1.0;
}

void ApplyRope(float* x, int64_t n, int32_t n_heads, const float* table, int64_t first,
               const RopeParams& p) {
  const int32_t half = p.rope_dim / 2;
  for (int64_t r = 0; r < n; ++r) {
    const float* c = table + (first + r) * p.rope_dim;
    const float* s = c + half;
    for (int32_t h = 0; h < n_heads; ++h) {
      float* v = x + (r * n_heads + h) * p.head_dim;
      for (int32_t i = 0; i < half; ++i) {
        const int32_t a = p.style == RopeStyle::kAdjacent ? 2 * i : i;
        const int32_t b = p.style == RopeStyle::kAdjacent ? 2 * i + 1 : i + half;
        const float x0 = v[a], x1 = v[b];
        v[a] = x0 * c[i] - x1 * s[i];
        v[b] = x0 * s[i] + x1 * c[i];
      }
    }
  }
}

void Rope(float* x, int64_t n, int32_t n_heads, std::span<const int32_t> positions,
          const RopeParams& p, const float* freq_factors) {
  std::vector<float> table(static_cast<size_t>(n) * p.rope_dim);
  BuildRopeTable(positions.first(n), p, freq_factors, table.data());
  ApplyRope(x, n, n_heads, table.data(), 0, p);
}

void RopeReference(float* x, int64_t n, int32_t n_heads, std::span<const int32_t> positions,
                   const RopeParams& p, const float* freq_factors) {
  // Written apart from Rope on purpose (no helper shared): each rotated pair is a complex
  // number z = x_a + i·x_b multiplied by e^(iθ), θ = position / scale · θ_base^(−2i/d) /
  // factor_i; the inverse frequency comes from exp and log in double, and the angle is
  // rounded to float32 as transformers rounds it. tests/data/rope_golden.json holds
  // transformers' own values for both.
  const int32_t half = p.rope_dim / 2;
  std::vector<std::pair<int32_t, int32_t>> pairs;  // the two slots of each rotated pair
  for (int32_t i = 0; i < half; ++i) {
    pairs.push_back(p.style == RopeStyle::kHalves ? std::pair{i, i + half}
                                                  : std::pair{2 * i, 2 * i + 1});
  }
  for (int64_t t = 0; t < n; ++t) {
    const float scaled = static_cast<float>(positions[t]) / p.position_scale;
    for (int32_t i = 0; i < half; ++i) {
      float inv = static_cast<float>(
          std::exp(-std::log(static_cast<double>(p.theta)) * (2.0 * i / p.rope_dim)));
      if (freq_factors != nullptr) inv /= freq_factors[i];
      const std::complex<double> turn =
          std::polar(static_cast<double>(p.attention_factor), static_cast<double>(scaled * inv));
      for (int32_t h = 0; h < n_heads; ++h) {
        float* v = x + (t * n_heads + h) * p.head_dim;
        const auto [a, b] = pairs[i];
        const std::complex<double> z = std::complex<double>(v[a], v[b]) * turn;
        v[a] = static_cast<float>(z.real());
        v[b] = static_cast<float>(z.imag());
      }
    }
  }
}

namespace {

TANDEM_AVX512 void SwiGluAvx512(const float* gate, const float* up, int64_t n, float* out) {
  const __m512 one = _mm512_set1_ps(1.0f);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = static_cast<__mmask16>(n - i >= 16 ? 0xFFFF : (1u << (n - i)) - 1);
    const __m512 g = _mm512_maskz_loadu_ps(m, gate + i);
    const __m512 e = Exp512(_mm512_sub_ps(_mm512_setzero_ps(), g));
    const __m512 silu = _mm512_div_ps(g, _mm512_add_ps(one, e));
    _mm512_mask_storeu_ps(out + i, m, _mm512_mul_ps(silu, _mm512_maskz_loadu_ps(m, up + i)));
  }
}

}  // namespace

void SwiGlu(const float* gate, const float* up, int64_t n, float* out) {
  if (HaveAvx512()) return SwiGluAvx512(gate, up, n, out);
  for (int64_t i = 0; i < n; ++i) out[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

void SwiGluReference(const float* gate, const float* up, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) {
    const double g = gate[i];
    out[i] = static_cast<float>(g / (1.0 + std::exp(-g)) * up[i]);
  }
}

void GeGlu(const float* gate, const float* up, int64_t n, float* out) {
  constexpr float kSqrt2OverPi = 0.7978845608028654f;
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    out[i] = 0.5f * g * (1.0f + std::tanh(kSqrt2OverPi * (g + 0.044715f * g * g * g))) * up[i];
  }
}

void GeGluReference(const float* gate, const float* up, int64_t n, float* out) {
  const double k = std::sqrt(2.0 / M_PI);
  for (int64_t i = 0; i < n; ++i) {
    const double g = gate[i];
    out[i] =
        static_cast<float>(0.5 * g * (1.0 + std::tanh(k * (g + 0.044715 * g * g * g))) * up[i]);
  }
}

void SwigluOai(const float* gate, const float* up, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = std::min(gate[i], 7.0f), u = std::clamp(up[i], -7.0f, 7.0f);
    out[i] = (u + 1.0f) * (g / (1.0f + std::exp(-1.702f * g)));
  }
}

void SwigluOaiReference(const float* gate, const float* up, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) {
    const double g = std::min(gate[i], 7.0f), u = std::clamp(up[i], -7.0f, 7.0f);
    out[i] = static_cast<float>((u + 1.0) * g / (1.0 + std::exp(-1.702 * g)));
  }
}

void SoftCap(float* x, int64_t n, float cap) {
  for (int64_t i = 0; i < n; ++i) x[i] = cap * std::tanh(x[i] / cap);
}

void AddInPlace(float* x, const float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] += y[i];
}

namespace {

constexpr int64_t kStreamAhead = 2048 / sizeof(float);  // as the decode kernels prefetch

TANDEM_AVX512 float StreamSumAvx512(const float* x, int64_t n) {
  __m512 a[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(),
                 _mm512_setzero_ps()};
  int64_t i = 0;
  for (; i + 64 <= n; i += 64) {
    for (int l = 0; l < 4; ++l) {
      _mm_prefetch(reinterpret_cast<const char*>(x + i + kStreamAhead + 16 * l), _MM_HINT_T0);
      a[l] = _mm512_add_ps(a[l], _mm512_loadu_ps(x + i + 16 * l));
    }
  }
  float tail = 0;
  for (; i < n; ++i) tail += x[i];
  return ReduceAdd512(_mm512_add_ps(_mm512_add_ps(a[0], a[1]), _mm512_add_ps(a[2], a[3]))) + tail;
}

TANDEM_AVX2 float StreamSumAvx2(const float* x, int64_t n) {
  __m256 a[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                 _mm256_setzero_ps()};
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    for (int l = 0; l < 4; l += 2) {
      _mm_prefetch(reinterpret_cast<const char*>(x + i + kStreamAhead + 8 * l), _MM_HINT_T0);
    }
    for (int l = 0; l < 4; ++l) a[l] = _mm256_add_ps(a[l], _mm256_loadu_ps(x + i + 8 * l));
  }
  float tail = 0;
  for (; i < n; ++i) tail += x[i];
  return ReduceAdd256x2(_mm256_add_ps(a[0], a[1]), _mm256_add_ps(a[2], a[3])) + tail;
}

}  // namespace

float StreamSum(const float* x, int64_t n) {
  if (HaveAvx512()) return StreamSumAvx512(x, n);
  if (HaveAvx2Fma()) return StreamSumAvx2(x, n);
  float a[4] = {};
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    for (int l = 0; l < 4; ++l) a[l] += x[i + l];
  }
  for (; i < n; ++i) a[0] += x[i];
  return (a[0] + a[1]) + (a[2] + a[3]);
}

}  // namespace tandem::kernels
