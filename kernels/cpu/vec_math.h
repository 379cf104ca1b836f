// Vector math shared by the SIMD kernels: exp, horizontal sums, f16 scales.
//
// Each function is a fixed sequence of instructions, so a lane's result depends only
// on that lane's input (never on its neighbours) — what batch invariance needs.
// exp is Cephes' single-precision polynomial (≈ 1 ulp on [-87, 88]).
#ifndef TANDEM_KERNELS_CPU_VEC_MATH_H_
#define TANDEM_KERNELS_CPU_VEC_MATH_H_

// GCC 12's AVX-512 headers trip -Wuninitialized on their own _mm256_undefined_*()
// placeholders when the intrinsics are inlined.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

#include <cstdint>

#define TANDEM_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma,f16c")))
#define TANDEM_AVX2 __attribute__((target("avx2,fma,f16c")))

namespace tandem::kernels {

// True when the CPU runs the AVX-512 kernels (checked once), unless capped below.
bool HaveAvx512();
// True when the CPU has AVX2, FMA and F16C, unless capped below (the AVX2 kernels run where
// there is no AVX-512).
bool HaveAvx2Fma();
// True when HaveAvx512() and the CPU has AVX-512 VNNI (vpdpbusd / vpdpwssd).
bool HaveAvx512Vnni();
// True when HaveAvx512Vnni(), the CPU has AMX-TILE and AMX-INT8, and the OS granted this
// process the tile data state (Linux: arch_prctl(ARCH_REQ_XCOMP_PERM), asked once).
bool HaveAmxInt8();
// Caps the kernels to the portable ones, to AVX2 + FMA, or to AVX-512 without AMX, so
// that tests and benchmarks run a slower path on a faster CPU; false: back to the
// default, which the environment sets at start (TANDEM_CPU_ISA=avx512, avx2 or
// portable; unset or anything else: no cap).
void ForcePortableKernels(bool force);
void ForceAvx2Kernels(bool force);
void ForceAvx512Kernels(bool force);

TANDEM_AVX512 inline __m512 Exp512(__m512 x) {
  x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-87.33654f)),
                    _mm512_set1_ps(88.3762626647949f));
  const __m512 fx = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                         _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(fx, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(fx, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  return _mm512_scalef_ps(p, fx);
}

// Horizontal sum in a fixed order (halves, quarters, pairs, lanes).
TANDEM_AVX512 inline float ReduceAdd512(__m512 v) {
  v = _mm512_add_ps(v, _mm512_shuffle_f32x4(v, v, 0x4E));
  v = _mm512_add_ps(v, _mm512_shuffle_f32x4(v, v, 0xB1));
  v = _mm512_add_ps(v, _mm512_permute_ps(v, 0x4E));
  v = _mm512_add_ps(v, _mm512_permute_ps(v, 0xB1));
  return _mm512_cvtss_f32(v);
}

// ReduceAdd512 of four vectors at once, stored to out[0..3]. Every sum is built by
// exactly the same additions as ReduceAdd512 (float addition is commutative), so the
// results are bit-identical; it only shares the shuffles.
TANDEM_AVX512 inline void ReduceAdd512x4(__m512 a, __m512 b, __m512 c, __m512 d, float* out) {
  // Halves: [a_lo + a_hi | b_lo + b_hi], [c_lo + c_hi | d_lo + d_hi].
  const __m512 ab =
      _mm512_add_ps(_mm512_shuffle_f32x4(a, b, 0x44), _mm512_shuffle_f32x4(a, b, 0xEE));
  const __m512 cd =
      _mm512_add_ps(_mm512_shuffle_f32x4(c, d, 0x44), _mm512_shuffle_f32x4(c, d, 0xEE));
  // Quarters: one 128-bit lane per input.
  __m512 x = _mm512_add_ps(_mm512_shuffle_f32x4(ab, cd, 0x88), _mm512_shuffle_f32x4(ab, cd, 0xDD));
  x = _mm512_add_ps(x, _mm512_permute_ps(x, 0x4E));
  x = _mm512_add_ps(x, _mm512_permute_ps(x, 0xB1));
  // Lanes 0, 4, 8, 12 hold the sums. (The register form of compress: its memory form
  // is microcoded and slow on AMD Zen 4.)
  _mm_storeu_ps(out, _mm512_castps512_ps128(_mm512_maskz_compress_ps(0x1111, x)));
}

// ReduceAdd512 of the 16 lanes held in (a, b): l + l⊕8, then ⊕4, ⊕2, ⊕1 — the same
// bits on an AVX2 machine as ReduceAdd512 on an AVX-512 one.
TANDEM_AVX2 inline float ReduceAdd256x2(__m256 a, __m256 b) {
  const __m256 s = _mm256_add_ps(a, b);
  __m128 q = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
  q = _mm_add_ps(q, _mm_permute_ps(q, 0x4E));
  q = _mm_add_ps(q, _mm_permute_ps(q, 0xB1));
  return _mm_cvtss_f32(q);
}

// The f16 at p (a block's scale) as a float (F16C: exact, as HalfToFloat).
TANDEM_AVX2 inline float Half(const uint8_t* p) {
  uint16_t h;
  __builtin_memcpy(&h, p, 2);
  return _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(h)));
}

}  // namespace tandem::kernels

#endif  // TANDEM_KERNELS_CPU_VEC_MATH_H_
