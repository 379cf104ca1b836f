// AVX2 unpacking of the GGUF block layouts both CPU matmuls read (matmul.cc decodes the
// values to float32, matmul_q8.cc keeps them as bytes for integer products): the order
// is ggml's, element e < 16 of a 32-element block from the low nibble of byte e, element
// 16 + e from its high nibble.
#ifndef TANDEM_KERNELS_CPU_QUANT_SIMD_H_
#define TANDEM_KERNELS_CPU_QUANT_SIMD_H_

#include <cstdint>
#include <cstring>

#include "common/model/dequantize.h"
#include "kernels/cpu/vec_math.h"

namespace tandem::kernels {

// 16 bytes of nibbles as 32 values 0…15 (Q4_0's order, which Q4_1, Q5_*, IQ4_NL and
// IQ4_XS share).
TANDEM_AVX2 inline __m256i Nibbles(const uint8_t* p) {
  const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  const __m128i mask = _mm_set1_epi8(0x0F);
  return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(bytes, 4), mask),
                          _mm_and_si128(bytes, mask));
}

// 0x10 in byte j where bit j of the little-endian u32 at p is set (Q5_0 / Q5_1's qh).
TANDEM_AVX2 inline __m256i FifthBits(const uint8_t* p) {
  uint32_t qh;
  std::memcpy(&qh, p, 4);
  const __m256i spread =
      _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(qh)),
                          _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2,
                                           2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3));
  const __m256i bit = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201ull));
  return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit),
                          _mm256_set1_epi8(0x10));
}

// IQ4_NL's levels (signed bytes) of 32 nibble values.
TANDEM_AVX2 inline __m256i Iq4Levels(__m256i nibbles) {
  const __m256i table = _mm256_broadcastsi128_si256(
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(model::kIq4Levels)));
  return _mm256_shuffle_epi8(table, nibbles);
}

// MXFP4's levels (signed bytes) of 32 nibble values.
TANDEM_AVX2 inline __m256i Mxfp4Levels(__m256i nibbles) {
  const __m256i table = _mm256_broadcastsi128_si256(
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(model::kMxfp4Levels)));
  return _mm256_shuffle_epi8(table, nibbles);
}

}  // namespace tandem::kernels

#endif  // TANDEM_KERNELS_CPU_QUANT_SIMD_H_
