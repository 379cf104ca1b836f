#include "kernels/cpu/matmul_q8.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "common/util/check.h"
#include "common/util/half.h"
#include "kernels/cpu/quant_simd.h"
#include "kernels/cpu/vec_math.h"

namespace tandem::kernels {

using model::GgmlType;

namespace {

constexpr float kTiny = 1e-30f;  // a block whose largest |x| is below this quantizes to 0

int64_t BlockBytes(GgmlType type) { return static_cast<int64_t>(model::Traits(type).type_size); }

float HalfAt(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return HalfToFloat(h);
}

// Whether the type's values carry a min term (q unsigned) rather than being d · q alone.
constexpr bool HasMin(GgmlType t) {
  return t == GgmlType::kQ4_1 || t == GgmlType::kQ5_1 || t == GgmlType::kQ4_K ||
         t == GgmlType::kQ5_K || t == GgmlType::kQ2_K;
}
// Whether a 32-weight chunk has two integer scales, one per 16 (Q6_K, Q3_K, Q2_K).
constexpr bool HasLaneScales(GgmlType t) {
  return t == GgmlType::kQ6_K || t == GgmlType::kQ3_K || t == GgmlType::kQ2_K;
}
// Whether the min term is summed per chunk into its own eight lanes (lane c mod 8, the
// chunk's total quant sum times M · d_x) rather than per four quants: Q4_K and Q5_K,
// whose min is one per chunk.
constexpr bool HasChunkMins(GgmlType t) { return t == GgmlType::kQ4_K || t == GgmlType::kQ5_K; }
// 32-weight chunks per block: 8 for the super-blocks of 256 (the types with an integer
// path there), 1 otherwise.
constexpr int ChunksPerBlock(GgmlType t) {
  switch (t) {
    case GgmlType::kQ2_K:
    case GgmlType::kQ3_K:
    case GgmlType::kQ4_K:
    case GgmlType::kQ5_K:
    case GgmlType::kQ6_K:
    case GgmlType::kIQ4_XS:
      return 8;
    default:
      return 1;
  }
}

// A block's layout: where its quants and fifth bits start (ggml's).
constexpr int QsOffset(GgmlType t) {
  switch (t) {
    case GgmlType::kQ4_1:
      return 4;
    case GgmlType::kQ5_0:
      return 6;
    case GgmlType::kQ5_1:
      return 8;
    default:
      return 2;  // Q8_0, Q4_0, IQ4_NL
  }
}
constexpr int QhOffset(GgmlType t) { return t == GgmlType::kQ5_0 ? 2 : 4; }

// Quant e (0…31) of a block as the integer the products use: Q8_0's byte, Q4_0's nibble
// − 8, Q5_0's five bits − 16, IQ4_NL's level; Q4_1's nibble and Q5_1's five bits as
// they are (their min is added apart).
int32_t QuantAt(GgmlType type, const uint8_t* block, int e) {
  const uint8_t* qs = block + QsOffset(type);
  if (type == GgmlType::kQ8_0) return static_cast<int8_t>(qs[e]);
  const int nibble = e < 16 ? qs[e] & 15 : qs[e - 16] >> 4;
  int fifth = 0;
  if (type == GgmlType::kQ5_0 || type == GgmlType::kQ5_1) {
    uint32_t qh;
    std::memcpy(&qh, block + QhOffset(type), 4);
    fifth = static_cast<int>((qh >> e) & 1u) << 4;
  }
  switch (type) {
    case GgmlType::kQ4_0:
      return nibble - 8;
    case GgmlType::kQ5_0:
      return (nibble | fifth) - 16;
    case GgmlType::kQ5_1:
      return nibble | fifth;
    case GgmlType::kIQ4_NL:
      return model::kIq4Levels[nibble];
    default:  // Q4_1
      return nibble;
  }
}

// Chunk c of a block as the integer arithmetic reads it (the header's w_e, c_h, n_h,
// D, M), laid out as model::Dequantize decodes the same chunk.
struct IntChunk {
  int32_t w[32] = {};
  int32_t scale[2] = {1, 1};  // c_h of elements 16h … 16h + 15
  int32_t min[2] = {1, 1};    // n_h
  float d = 0, dmin = 0;      // D, M
};

// The integer scales c_h (and mins n_h) of chunk c's two halves, for the types with lane
// scales (Q6_K, Q3_K, Q2_K).
void LaneScales(GgmlType type, const uint8_t* b, int c, int32_t* scale, int32_t* min) {
  for (int h = 0; h < 2; ++h) {
    const int s = 2 * c + h;  // the 16-element sub-block
    switch (type) {
      case GgmlType::kQ6_K:
        scale[h] = reinterpret_cast<const int8_t*>(b + 192)[s];
        break;
      case GgmlType::kQ3_K:
        scale[h] = (((b[96 + s % 8] >> (4 * (s / 8))) & 15) |
                    (((b[104 + s % 4] >> (2 * (s / 4))) & 3) << 4)) -
                   32;
        break;
      default:  // Q2_K
        scale[h] = b[s] & 15;
        min[h] = b[s] >> 4;
    }
  }
}

// `quants` false leaves w zero (the factors alone).
IntChunk ChunkAt(GgmlType type, const uint8_t* b, int c, bool quants = true) {
  IntChunk u;
  const int n = c / 4, p = c % 4;  // the 128-half and the quarter of it (Q6_K, Q3_K, Q2_K)
  switch (type) {
    case GgmlType::kQ4_K:
    case GgmlType::kQ5_K: {
      uint8_t sc, m;
      model::KQuantScaleMin(b + 4, c, &sc, &m);
      u.d = HalfAt(b) * static_cast<float>(sc);
      u.dmin = -(HalfAt(b + 2) * static_cast<float>(m));
      const bool five = type == GgmlType::kQ5_K;
      const uint8_t* q = b + (five ? 48 : 16) + 32 * (c / 2);
      for (int l = 0; l < 32 * quants; ++l) {
        u.w[l] = (q[l] >> (4 * (c % 2))) & 15;
        if (five) u.w[l] |= ((b[16 + l] >> c) & 1) << 4;
      }
      return u;
    }
    case GgmlType::kQ6_K: {
      u.d = HalfAt(b + 208);
      LaneScales(type, b, c, u.scale, u.min);
      const uint8_t* ql = b + 64 * n + 32 * (p % 2);
      const uint8_t* qh = b + 128 + 32 * n;
      for (int l = 0; l < 32 * quants; ++l) {
        u.w[l] = (((ql[l] >> (4 * (p / 2))) & 15) | (((qh[l] >> (2 * p)) & 3) << 4)) - 32;
      }
      return u;
    }
    case GgmlType::kQ3_K: {
      u.d = HalfAt(b + 108);
      LaneScales(type, b, c, u.scale, u.min);
      for (int l = 0; l < 32 * quants; ++l) {
        u.w[l] = ((b[32 + 32 * n + l] >> (2 * p)) & 3) - (((b[l] >> c) & 1) ? 0 : 4);
      }
      return u;
    }
    case GgmlType::kQ2_K: {
      u.d = HalfAt(b + 80);
      u.dmin = -HalfAt(b + 82);
      LaneScales(type, b, c, u.scale, u.min);
      for (int l = 0; l < 32 * quants; ++l) u.w[l] = (b[16 + 32 * n + l] >> (2 * p)) & 3;
      return u;
    }
    case GgmlType::kIQ4_XS: {
      uint16_t high;
      std::memcpy(&high, b + 2, 2);
      const int ls = ((b[4 + c / 2] >> (4 * (c % 2))) & 15) | (((high >> (2 * c)) & 3) << 4);
      u.d = HalfAt(b) * static_cast<float>(ls - 32);
      const uint8_t* qs = b + 8 + 16 * c;
      for (int l = 0; l < 16 * quants; ++l) {
        u.w[l] = model::kIq4Levels[qs[l] & 15];
        u.w[l + 16] = model::kIq4Levels[qs[l] >> 4];
      }
      return u;
    }
    default:  // the blocks of 32
      u.d = HalfAt(b);
      if (HasMin(type)) u.dmin = HalfAt(b + 2);
      for (int e = 0; e < 32 * quants; ++e) u.w[e] = QuantAt(type, b, e);
      return u;
  }
}

// One block of 32 values: its scale, quants and sums of each four quants.
void QuantizeBlock(const float* x, int8_t* q, float* d, float* sums) {
  float amax = 0;
  for (int e = 0; e < kQ8Block; ++e) amax = std::max(amax, std::fabs(x[e]));
  if (!(amax >= kTiny)) {
    std::memset(q, 0, kQ8Block);
    std::fill(sums, sums + 8, 0.0f);
    *d = 0;
    return;
  }
  const float inv = 127.0f / amax;
  for (int e = 0; e < kQ8Block; ++e) q[e] = static_cast<int8_t>(std::nearbyint(x[e] * inv));
  for (int l = 0; l < 8; ++l)
    sums[l] = static_cast<float>(q[4 * l] + q[4 * l + 1] + q[4 * l + 2] + q[4 * l + 3]);
  *d = amax / 127.0f;
}

// Each block's quant sum from its lane sums (exact integers in float).
void FillBlockSums(const float* sums, int64_t nb, float* block_sums) {
  for (int64_t b = 0; b < nb; ++b) {
    float t = 0;
    for (int l = 0; l < 8; ++l) t += sums[8 * b + l];
    block_sums[b] = t;
  }
}

// The 16 lanes summed as ReduceAdd256x2 sums them.
float SumLanes(const float* acc) {
  float v[8];
  for (int l = 0; l < 8; ++l) v[l] = acc[l] + acc[l + 8];
  for (int l = 0; l < 4; ++l) v[l] += v[l + 4];
  for (int l = 0; l < 2; ++l) v[l] += v[l + 2];
  return v[0] + v[1];
}

// ---------------------------------------------------------------------------------
// AVX2: a block's 32 weights as signed bytes, and the eight exact sums of four
// products with a block of activations (maddubs on |w| and q·sign(w): no pair exceeds
// 2 · 128 · 127, so nothing saturates).

// Chunk c of a block's quants as ChunkAt gives them: signed bytes, or unsigned ones for
// the types with a min.
TANDEM_AVX2 inline __m256i Load32(const uint8_t* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}
// 32 bytes each shifted right by `bits` (< 8) and masked to `mask`.
TANDEM_AVX2 inline __m256i BitsAt(const uint8_t* p, int bits, char mask) {
  return _mm256_and_si256(_mm256_srl_epi16(Load32(p), _mm_cvtsi32_si128(bits)),
                          _mm256_set1_epi8(mask));
}

template <GgmlType T>
TANDEM_AVX2 inline __m256i ChunkBytes(const uint8_t* block, int c) {
  const int n = c / 4, p = c % 4;
  if constexpr (T == GgmlType::kQ8_0) {
    return Load32(block + QsOffset(T));
  } else if constexpr (T == GgmlType::kQ4_0) {
    return _mm256_sub_epi8(Nibbles(block + QsOffset(T)), _mm256_set1_epi8(8));
  } else if constexpr (T == GgmlType::kQ4_1) {
    return Nibbles(block + QsOffset(T));
  } else if constexpr (T == GgmlType::kQ5_0) {
    return _mm256_sub_epi8(
        _mm256_or_si256(Nibbles(block + QsOffset(T)), FifthBits(block + QhOffset(T))),
        _mm256_set1_epi8(16));
  } else if constexpr (T == GgmlType::kQ5_1) {
    return _mm256_or_si256(Nibbles(block + QsOffset(T)), FifthBits(block + QhOffset(T)));
  } else if constexpr (T == GgmlType::kIQ4_NL) {
    return Iq4Levels(Nibbles(block + QsOffset(T)));
  } else if constexpr (T == GgmlType::kQ4_K || T == GgmlType::kQ5_K) {
    const __m256i low =
        BitsAt(block + (T == GgmlType::kQ5_K ? 48 : 16) + 32 * (c / 2), 4 * (c % 2), 15);
    if constexpr (T == GgmlType::kQ4_K) {
      return low;
    } else {
      const __m256i bit = _mm256_set1_epi8(static_cast<char>(1 << c));
      const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(Load32(block + 16), bit), bit);
      return _mm256_or_si256(low, _mm256_and_si256(set, _mm256_set1_epi8(16)));
    }
  } else if constexpr (T == GgmlType::kQ6_K) {
    const __m256i low = BitsAt(block + 64 * n + 32 * (p % 2), 4 * (p / 2), 15);
    const __m256i high = _mm256_slli_epi16(BitsAt(block + 128 + 32 * n, 2 * p, 3), 4);
    return _mm256_sub_epi8(_mm256_or_si256(low, high), _mm256_set1_epi8(32));
  } else if constexpr (T == GgmlType::kQ3_K) {
    const __m256i low = BitsAt(block + 32 + 32 * n, 2 * p, 3);
    const __m256i bit = _mm256_set1_epi8(static_cast<char>(1 << c));
    const __m256i clear =
        _mm256_cmpeq_epi8(_mm256_and_si256(Load32(block), bit), _mm256_setzero_si256());
    return _mm256_sub_epi8(low, _mm256_and_si256(clear, _mm256_set1_epi8(4)));
  } else if constexpr (T == GgmlType::kQ2_K) {
    return BitsAt(block + 16 + 32 * n, 2 * p, 3);
  } else {
    static_assert(T == GgmlType::kIQ4_XS);
    return Iq4Levels(Nibbles(block + 8 + 16 * c));
  }
}

// Q4_K / Q5_K's eight 6-bit scales (bytes 0–7) and mins (bytes 8–15) from the 12 packed
// bytes, four at a time in 32-bit words: scales 0–3 and mins 0–3 are the low six bits of
// bytes 0–3 and 4–7; scales and mins 4–7 take their low four bits from the nibbles of
// bytes 8–11 and their top two from the top bits of bytes 0–3 and 4–7
// (model::KQuantScaleMin states the same one at a time).
inline __m128i KScalesAndMins(const uint8_t* packed) {
  uint32_t w[3];
  std::memcpy(w, packed, 12);
  const uint32_t sc_lo = w[0] & 0x3F3F3F3Fu, m_lo = w[1] & 0x3F3F3F3Fu;
  const uint32_t sc_hi = (w[2] & 0x0F0F0F0Fu) | ((w[0] >> 2) & 0x30303030u);
  const uint32_t m_hi = ((w[2] >> 4) & 0x0F0F0F0Fu) | ((w[1] >> 2) & 0x30303030u);
  return _mm_set_epi32(static_cast<int>(m_hi), static_cast<int>(m_lo), static_cast<int>(sc_hi),
                       static_cast<int>(sc_lo));
}

// A block's float factors and integer scales, unpacked once for all its chunks (ChunkAt's
// d, dmin, scale and min).
template <GgmlType T>
struct BlockFactors {
  static constexpr int kChunks = ChunksPerBlock(T);
  alignas(32) float d[kChunks];
  alignas(32) float dmin[kChunks];
  __m256i scale[HasLaneScales(T) ? kChunks : 1];            // c_h in the int16 pairs of each half
  __m256 min[HasLaneScales(T) && HasMin(T) ? kChunks : 1];  // n_h in each half's lanes

  TANDEM_AVX2 void Load(const uint8_t* b) {
    if constexpr (kChunks == 1) {
      d[0] = Half(b);
      if constexpr (HasMin(T)) dmin[0] = Half(b + 2);
    } else if constexpr (HasLaneScales(T)) {
      const float dd = Half(b + (T == GgmlType::kQ6_K ? 208 : T == GgmlType::kQ3_K ? 108 : 80));
      const float dm = T == GgmlType::kQ2_K ? -Half(b + 82) : 0.0f;
      // The sixteen 16-weight scales (and Q2_K's mins) as bytes, then for chunk c its two
      // spread over the halves: one shuffle and one widening each.
      const __m128i nibble = _mm_set1_epi8(15);
      __m128i scales, mins = _mm_setzero_si128();
      if constexpr (T == GgmlType::kQ6_K) {
        scales = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 192));
      } else if constexpr (T == GgmlType::kQ3_K) {
        // Low four bits: the nibbles of bytes 96–103 (low ones for 0–7, high for 8–15);
        // top two: bits 2·(s / 4) of byte 104 + s mod 4; minus 32.
        const __m128i lo8 = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(b + 96));
        const __m128i lo = _mm_unpacklo_epi64(_mm_and_si128(lo8, nibble),
                                              _mm_and_si128(_mm_srli_epi16(lo8, 4), nibble));
        uint32_t hw;
        std::memcpy(&hw, b + 104, 4);
        const __m128i hi = _mm_set_epi32(
            static_cast<int>((hw >> 6) & 0x03030303u), static_cast<int>((hw >> 4) & 0x03030303u),
            static_cast<int>((hw >> 2) & 0x03030303u), static_cast<int>(hw & 0x03030303u));
        scales = _mm_sub_epi8(_mm_or_si128(lo, _mm_slli_epi16(hi, 4)), _mm_set1_epi8(32));
      } else {  // Q2_K: a scale (low nibble) and a min (high) per byte
        const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b));
        scales = _mm_and_si128(bytes, nibble);
        mins = _mm_and_si128(_mm_srli_epi16(bytes, 4), nibble);
      }
      for (int c = 0; c < kChunks; ++c) {
        d[c] = dd;
        dmin[c] = dm;
        const __m128i pick = _mm_setr_epi8(2 * c, 2 * c, 2 * c, 2 * c, 2 * c, 2 * c, 2 * c, 2 * c,
                                           2 * c + 1, 2 * c + 1, 2 * c + 1, 2 * c + 1, 2 * c + 1,
                                           2 * c + 1, 2 * c + 1, 2 * c + 1);
        scale[c] = _mm256_cvtepi8_epi16(_mm_shuffle_epi8(scales, pick));
        if constexpr (HasMin(T)) {
          const __m128i pick4 = _mm_setr_epi8(2 * c, 2 * c, 2 * c, 2 * c, 2 * c + 1, 2 * c + 1,
                                              2 * c + 1, 2 * c + 1, 0, 0, 0, 0, 0, 0, 0, 0);
          min[c] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_shuffle_epi8(mins, pick4)));
        }
      }
    } else if constexpr (T == GgmlType::kIQ4_XS) {
      uint16_t high;
      std::memcpy(&high, b + 2, 2);
      const float dd = Half(b);
      for (int c = 0; c < kChunks; ++c) {
        const int ls = ((b[4 + c / 2] >> (4 * (c % 2))) & 15) | (((high >> (2 * c)) & 3) << 4);
        d[c] = dd * static_cast<float>(ls - 32);
      }
    } else {  // Q4_K, Q5_K: d · sc and −(dmin · m), eight at once
      const __m128i bytes = KScalesAndMins(b + 4);
      const __m256 sc = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(bytes));
      const __m256 mn = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(bytes, 8)));
      _mm256_store_ps(d, _mm256_mul_ps(_mm256_set1_ps(Half(b)), sc));
      _mm256_store_ps(dmin, _mm256_mul_ps(_mm256_set1_ps(-Half(b + 2)), mn));
    }
  }
};

// The eight lane products P_l = c_h · Σ_{e=4l}^{4l+3} w_e · q_e: maddubs on |w| and
// q · sign(w) for signed quants, on w and q directly for unsigned ones (no pair exceeds
// 2 · 128 · 127, so nothing saturates), then pairs summed with weights c_h (1 for the
// types without lane scales).
template <GgmlType T>
TANDEM_AVX2 inline __m256i LaneProducts(__m256i w, __m256i q, __m256i scale) {
  __m256i pairs;
  if constexpr (HasMin(T)) {
    pairs = _mm256_maddubs_epi16(w, q);
  } else {
    pairs = _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(q, w));
  }
  return _mm256_madd_epi16(pairs, scale);
}

TANDEM_AVX2 void QuantizeRowAvx2(const float* x, int64_t k, int8_t* q, float* d, float* sums) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  for (int64_t b = 0; b < k / kQ8Block; ++b) {
    const float* xb = x + b * kQ8Block;
    __m256 v[4];
    __m256 m = _mm256_setzero_ps();
    for (int r = 0; r < 4; ++r) {
      v[r] = _mm256_loadu_ps(xb + 8 * r);
      m = _mm256_max_ps(m, _mm256_andnot_ps(sign, v[r]));
    }
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    h = _mm_max_ps(h, _mm_permute_ps(h, 0x4E));
    h = _mm_max_ps(h, _mm_permute_ps(h, 0xB1));
    const float amax = _mm_cvtss_f32(h);
    int8_t* qb = q + b * kQ8Block;
    if (!(amax >= kTiny)) {
      std::memset(qb, 0, kQ8Block);
      std::memset(sums + 8 * b, 0, 8 * sizeof(float));
      d[b] = 0;
      continue;
    }
    const __m256 inv = _mm256_set1_ps(127.0f / amax);
    __m256i i32[4];
    for (int r = 0; r < 4; ++r) i32[r] = _mm256_cvtps_epi32(_mm256_mul_ps(v[r], inv));
    // Pack to 32 bytes; the packs interleave 128-bit lanes, the permute restores order.
    const __m256i i16 = _mm256_packs_epi32(i32[0], i32[1]);
    const __m256i j16 = _mm256_packs_epi32(i32[2], i32[3]);
    const __m256i i8 = _mm256_packs_epi16(i16, j16);
    const __m256i bytes =
        _mm256_permutevar8x32_epi32(i8, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(qb), bytes);
    // Σ of each four quants, for the types with a min.
    const __m256i pairs = _mm256_maddubs_epi16(_mm256_set1_epi8(1), bytes);
    _mm256_storeu_ps(sums + 8 * b,
                     _mm256_cvtepi32_ps(_mm256_madd_epi16(pairs, _mm256_set1_epi16(1))));
    d[b] = amax / 127.0f;
  }
}

#define TANDEM_AVX2_INLINE TANDEM_AVX2 __attribute__((always_inline)) inline

// How far ahead of the block being read decode prefetches its weight row (bytes): one
// stream per core, kept ahead of the hardware prefetcher.
constexpr int64_t kPrefetchAhead = 1024;

// The f16 at p, p + stride, … p + 7·stride as eight floats (exact).
TANDEM_AVX2_INLINE __m256 Halves8(const uint8_t* p, int64_t stride) {
  uint16_t h[8];
  for (int e = 0; e < 8; ++e) std::memcpy(&h[e], p + e * stride, 2);
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h)));
}

// One chunk of x's row (q, its 32 quants; sums, its lane sums) against chunk c of a
// weight block, into `acc` (the caller names the even or the odd set at compile time, so
// that it stays in a register); fd = D · d_x and fm = M · d_x, rounded once each.
template <GgmlType T>
TANDEM_AVX2_INLINE void ChunkStep(const int8_t* q, const float* sums, const uint8_t* block, int c,
                                  const BlockFactors<T>& f, float fd, float fm, __m256& acc) {
  const __m256i qv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q));
  __m256i scale;
  if constexpr (HasLaneScales(T)) {
    scale = f.scale[c];
  } else {
    scale = _mm256_set1_epi16(1);
  }
  const __m256 p = _mm256_cvtepi32_ps(LaneProducts<T>(ChunkBytes<T>(block, c), qv, scale));
  acc = _mm256_fmadd_ps(p, _mm256_set1_ps(fd), acc);
  if constexpr (HasMin(T) && !HasChunkMins(T)) {
    __m256 m = _mm256_loadu_ps(sums);
    if constexpr (HasLaneScales(T)) m = _mm256_mul_ps(m, f.min[c]);
    acc = _mm256_fmadd_ps(m, _mm256_set1_ps(fm), acc);
  }
}

// out = row i of x · one weight row (decode: one weight stream per thread), two
// accumulators (lanes 0–7 for even chunks, 8–15 for odd ones) summed by ReduceAdd256x2.
template <GgmlType T>
TANDEM_AVX2 float RowDotAvx2(const QuantizedRows& x, int64_t i, const uint8_t* wrow, int64_t nb) {
  constexpr int kChunks = ChunksPerBlock(T);
  const int64_t bb = BlockBytes(T);
  const int8_t* q = x.q.data() + i * x.cols;
  const float* dx = x.d.data() + i * nb;
  const float* sums = x.sums.data() + i * nb * 8;
  __m256 even = _mm256_setzero_ps(), odd = _mm256_setzero_ps(), mins = _mm256_setzero_ps();
  BlockFactors<T> f;
  if constexpr (kChunks == 1) {
    // Blocks of 32, eight at a time: their f16 scales (and mins) gathered and times d_x
    // in one vector each, then the blocks two by two, even then odd.
    int64_t b = 0;
    for (; b + 8 <= nb; b += 8) {
      const uint8_t* group = wrow + b * bb;
      _mm_prefetch(reinterpret_cast<const char*>(group + kPrefetchAhead), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(group + kPrefetchAhead + 64), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(group + kPrefetchAhead + 128), _MM_HINT_T0);
      alignas(32) float fd[8], fm[8];
      const __m256 dxs = _mm256_loadu_ps(dx + b);
      _mm256_store_ps(fd, _mm256_mul_ps(Halves8(group, bb), dxs));
      if constexpr (HasMin(T)) _mm256_store_ps(fm, _mm256_mul_ps(Halves8(group + 2, bb), dxs));
#pragma GCC unroll 4
      for (int c = 0; c < 8; c += 2) {
        ChunkStep<T>(q + (b + c) * kQ8Block, sums + (b + c) * 8, group + c * bb, 0, f, fd[c],
                     HasMin(T) ? fm[c] : 0.0f, even);
        ChunkStep<T>(q + (b + c + 1) * kQ8Block, sums + (b + c + 1) * 8, group + (c + 1) * bb, 0, f,
                     fd[c + 1], HasMin(T) ? fm[c + 1] : 0.0f, odd);
      }
    }
    for (; b < nb; ++b) {  // the rest one by one (b keeps its parity)
      const uint8_t* block = wrow + b * bb;
      f.Load(block);
      const float fd = f.d[0] * dx[b], fm = HasMin(T) ? f.dmin[0] * dx[b] : 0.0f;
      if (b % 2 == 0) {
        ChunkStep<T>(q + b * kQ8Block, sums + b * 8, block, 0, f, fd, fm, even);
      } else {
        ChunkStep<T>(q + b * kQ8Block, sums + b * 8, block, 0, f, fd, fm, odd);
      }
    }
  } else {  // super-blocks: factors once, times the eight chunks' d_x at once
    for (int64_t sb = 0; sb < nb / kChunks; ++sb) {
      const uint8_t* block = wrow + sb * bb;
      _mm_prefetch(reinterpret_cast<const char*>(block + kPrefetchAhead), _MM_HINT_T0);
      f.Load(block);
      const int64_t b0 = sb * kChunks;
      alignas(32) float fd[kChunks], fm[kChunks];
      const __m256 dxs = _mm256_loadu_ps(dx + b0);
      _mm256_store_ps(fd, _mm256_mul_ps(_mm256_load_ps(f.d), dxs));
      if constexpr (HasChunkMins(T)) {
        mins = _mm256_fmadd_ps(_mm256_loadu_ps(x.block_sums.data() + i * nb + b0),
                               _mm256_mul_ps(_mm256_load_ps(f.dmin), dxs), mins);
      } else if constexpr (HasMin(T)) {
        _mm256_store_ps(fm, _mm256_mul_ps(_mm256_load_ps(f.dmin), dxs));
      }
#pragma GCC unroll 4
      for (int c = 0; c < kChunks; c += 2) {
        const int64_t b = b0 + c;
        ChunkStep<T>(q + b * kQ8Block, sums + b * 8, block, c, f, fd[c],
                     HasMin(T) && !HasChunkMins(T) ? fm[c] : 0.0f, even);
        ChunkStep<T>(q + (b + 1) * kQ8Block, sums + (b + 1) * 8, block, c + 1, f, fd[c + 1],
                     HasMin(T) && !HasChunkMins(T) ? fm[c + 1] : 0.0f, odd);
      }
    }
  }
  if constexpr (HasChunkMins(T)) {
    return ReduceAdd256x2(even, odd) + ReduceAdd256x2(mins, _mm256_setzero_ps());
  }
  return ReduceAdd256x2(even, odd);
}

// A chunk decoded once for all the rows of a batch (RangeAvx2 with m > 1): its quants,
// their magnitudes (the signed types' maddubs operand), the lane scales and mins and the
// float factors, so that the rows' tiles only multiply.
struct alignas(32) DecodedChunk {
  __m256i w, wabs;
  __m256i scale;  // c_h in the int16 pairs of each half (ones where there are none)
  __m256 min;     // n_h in each half's lanes (types with lane scales and a min)
  float d, dmin;
};

// Chunk factors decoded into `out` and, for the types with chunk mins, each chunk's
// dmin into `dmins` (contiguous, for eight at a time).
template <GgmlType T>
TANDEM_AVX2 void DecodeRow(const uint8_t* row, int64_t nb, DecodedChunk* out, float* dmins) {
  constexpr int kChunks = ChunksPerBlock(T);
  const int64_t bb = BlockBytes(T);
  for (int64_t sb = 0; sb < nb / kChunks; ++sb) {
    const uint8_t* block = row + sb * bb;
    BlockFactors<T> f;
    f.Load(block);
    for (int c = 0; c < kChunks; ++c) {
      DecodedChunk& o = out[sb * kChunks + c];
      o.w = ChunkBytes<T>(block, c);
      o.wabs = _mm256_sign_epi8(o.w, o.w);
      if constexpr (HasLaneScales(T)) {
        o.scale = f.scale[c];
      } else {
        o.scale = _mm256_set1_epi16(1);
      }
      if constexpr (HasLaneScales(T) && HasMin(T)) o.min = f.min[c];
      o.d = f.d[c];
      o.dmin = HasMin(T) ? f.dmin[c] : 0.0f;
      dmins[sb * kChunks + c] = o.dmin;
    }
  }
}

// One chunk b of MT rows of x against NT decoded weight rows, into one accumulator set.
template <GgmlType T, int MT, int NT>
TANDEM_AVX2_INLINE void DecodedStep(const QuantizedRows& x, int64_t i0,
                                    const DecodedChunk* const* rows, int64_t nb, int64_t b,
                                    __m256 (&acc)[MT][NT]) {
  for (int i = 0; i < MT; ++i) {
    const int64_t row = i0 + i;
    const __m256i q = _mm256_loadu_si256(
        reinterpret_cast<const __m256i*>(x.q.data() + row * x.cols + b * kQ8Block));
    const float dx = x.d[static_cast<size_t>(row * nb + b)];
    __m256 sums;
    if constexpr (HasMin(T) && !HasChunkMins(T)) {
      sums = _mm256_loadu_ps(x.sums.data() + (row * nb + b) * 8);
    }
    for (int j = 0; j < NT; ++j) {
      const DecodedChunk& c = rows[j][b];
      const __m256i pairs = HasMin(T) ? _mm256_maddubs_epi16(c.w, q)
                                      : _mm256_maddubs_epi16(c.wabs, _mm256_sign_epi8(q, c.w));
      const __m256 p = _mm256_cvtepi32_ps(_mm256_madd_epi16(pairs, c.scale));
      acc[i][j] = _mm256_fmadd_ps(p, _mm256_set1_ps(c.d * dx), acc[i][j]);
      if constexpr (HasMin(T) && !HasChunkMins(T)) {
        const __m256 m = HasLaneScales(T) ? _mm256_mul_ps(sums, c.min) : sums;
        acc[i][j] = _mm256_fmadd_ps(m, _mm256_set1_ps(c.dmin * dx), acc[i][j]);
      }
    }
  }
}

// RowDotAvx2's arithmetic on decoded chunks, MT rows of x × NT weight rows: the same
// operations in the same order.
template <GgmlType T, int MT, int NT>
TANDEM_AVX2 void DecodedTileAvx2(const QuantizedRows& x, int64_t i0,
                                 const DecodedChunk* const* rows, const float* const* dmins,
                                 int64_t nb, float* out, int64_t ldo) {
  __m256 even[MT][NT], odd[MT][NT], mins[MT][NT];
  for (int i = 0; i < MT; ++i) {
    for (int j = 0; j < NT; ++j) even[i][j] = odd[i][j] = mins[i][j] = _mm256_setzero_ps();
  }
  for (int64_t b = 0; b < nb; b += 2) {
    if constexpr (HasChunkMins(T)) {
      if (b % 8 == 0) {
        for (int i = 0; i < MT; ++i) {
          const int64_t at = (i0 + i) * nb + b;
          const __m256 bs = _mm256_loadu_ps(x.block_sums.data() + at);
          const __m256 dx = _mm256_loadu_ps(x.d.data() + at);
          for (int j = 0; j < NT; ++j) {
            mins[i][j] =
                _mm256_fmadd_ps(bs, _mm256_mul_ps(_mm256_loadu_ps(dmins[j] + b), dx), mins[i][j]);
          }
        }
      }
    }
    DecodedStep<T, MT, NT>(x, i0, rows, nb, b, even);
    if (b + 1 < nb) DecodedStep<T, MT, NT>(x, i0, rows, nb, b + 1, odd);
  }
  for (int i = 0; i < MT; ++i) {
    for (int j = 0; j < NT; ++j) {
      float v = ReduceAdd256x2(even[i][j], odd[i][j]);
      if constexpr (HasChunkMins(T)) v += ReduceAdd256x2(mins[i][j], _mm256_setzero_ps());
      out[i * ldo + j] = v;
    }
  }
}

// Rows n0 … n1 of W against m > 1 rows of x: two weight rows decoded at a time, then
// 2 × 2 tiles down the batch.
template <GgmlType T>
TANDEM_AVX2 void BatchRangeAvx2(const QuantizedRows& x, const WeightMatrix& w, float* out,
                                int64_t n0, int64_t n1) {
  const int64_t nb = w.cols / kQ8Block, m = x.rows, n = w.rows;
  thread_local std::vector<DecodedChunk> buffer;  // grow to the widest matrix, then reused
  thread_local std::vector<float> dmin_buffer;
  if (buffer.size() < static_cast<size_t>(2 * nb)) {
    buffer.resize(static_cast<size_t>(2 * nb));
    dmin_buffer.resize(static_cast<size_t>(2 * nb));
  }
  const DecodedChunk* rows[2] = {buffer.data(), buffer.data() + nb};
  const float* dmins[2] = {dmin_buffer.data(), dmin_buffer.data() + nb};
  for (int64_t j = n0; j < n1; j += 2) {
    const int nt = static_cast<int>(std::min<int64_t>(2, n1 - j));
    for (int t = 0; t < nt; ++t) {
      DecodeRow<T>(w.data + (j + t) * w.RowBytes(), nb, buffer.data() + t * nb,
                   dmin_buffer.data() + t * nb);
    }
    int64_t i = 0;
    for (; i + 2 <= m; i += 2) {
      if (nt == 2) {
        DecodedTileAvx2<T, 2, 2>(x, i, rows, dmins, nb, out + i * n + j, n);
      } else {
        DecodedTileAvx2<T, 2, 1>(x, i, rows, dmins, nb, out + i * n + j, n);
      }
    }
    if (i < m) {
      if (nt == 2) {
        DecodedTileAvx2<T, 1, 2>(x, i, rows, dmins, nb, out + i * n + j, n);
      } else {
        DecodedTileAvx2<T, 1, 1>(x, i, rows, dmins, nb, out + i * n + j, n);
      }
    }
  }
}

template <GgmlType T>
TANDEM_AVX2 void RangeAvx2(const QuantizedRows& x, const WeightMatrix& w, float* out, int64_t n0,
                           int64_t n1) {
  const int64_t nb = w.cols / kQ8Block, m = x.rows;
  if (m > 1) return BatchRangeAvx2<T>(x, w, out, n0, n1);
  // Decode (m = 1): one weight row at a time, decoded on the fly.
  const size_t rb = w.RowBytes();
  for (int64_t j = n0; j < n1; ++j) out[j] = RowDotAvx2<T>(x, 0, w.data + j * rb, nb);
}

// The portable path: the reference's arithmetic over a range of weight rows.
void RangeGeneric(const QuantizedRows& x, const WeightMatrix& w, float* out, int64_t n0,
                  int64_t n1) {
  const int64_t nb = w.cols / kQ8Block, bb = BlockBytes(w.type);
  const int per_block = ChunksPerBlock(w.type);
  const bool chunk_mins = HasChunkMins(w.type), lane_mins = HasMin(w.type) && !chunk_mins;
  for (int64_t i = 0; i < x.rows; ++i) {
    const int8_t* q = x.q.data() + i * x.cols;
    for (int64_t j = n0; j < n1; ++j) {
      const uint8_t* row = w.data + j * w.RowBytes();
      float acc[16] = {}, mins[16] = {};  // mins: lanes 0–7 only
      for (int64_t b = 0; b < nb; ++b) {
        const IntChunk u =
            ChunkAt(w.type, row + (b / per_block) * bb, static_cast<int>(b % per_block));
        const float dx = x.d[static_cast<size_t>(i * nb + b)];
        const float s = u.d * dx, sm = u.dmin * dx;
        for (int l = 0; l < 8; ++l) {
          int32_t p = 0, qsum = 0;
          for (int e = 4 * l; e < 4 * l + 4; ++e) {
            p += u.w[e] * q[b * kQ8Block + e];
            qsum += q[b * kQ8Block + e];
          }
          float& a = acc[8 * (b & 1) + l];
          a = std::fma(static_cast<float>(u.scale[l / 4] * p), s, a);
          if (lane_mins) a = std::fma(static_cast<float>(u.min[l / 4] * qsum), sm, a);
        }
        if (chunk_mins) {
          float& a = mins[b % 8];
          a = std::fma(x.block_sums[static_cast<size_t>(i * nb + b)], sm, a);
        }
      }
      out[i * w.rows + j] = chunk_mins ? SumLanes(acc) + SumLanes(mins) : SumLanes(acc);
    }
  }
}

void Range(const QuantizedRows& x, const WeightMatrix& w, float* out, int64_t n0, int64_t n1) {
  if (!HaveAvx2Fma()) return RangeGeneric(x, w, out, n0, n1);
  switch (w.type) {
#define TANDEM_Q8_CASE(T) \
  case GgmlType::k##T:    \
    return RangeAvx2<GgmlType::k##T>(x, w, out, n0, n1);
    TANDEM_Q8_CASE(Q8_0)
    TANDEM_Q8_CASE(Q4_0)
    TANDEM_Q8_CASE(Q4_1)
    TANDEM_Q8_CASE(Q5_0)
    TANDEM_Q8_CASE(Q5_1)
    TANDEM_Q8_CASE(IQ4_NL)
    TANDEM_Q8_CASE(Q2_K)
    TANDEM_Q8_CASE(Q3_K)
    TANDEM_Q8_CASE(Q4_K)
    TANDEM_Q8_CASE(Q5_K)
    TANDEM_Q8_CASE(Q6_K)
    TANDEM_Q8_CASE(IQ4_XS)
#undef TANDEM_Q8_CASE
    default:
      TANDEM_CHECK(false);
  }
}

// Row i of x into row i of `out` (shaped by Prepare).
void QuantizeRow(const float* x, int64_t i, QuantizedRows* out) {
  const int64_t k = out->cols, nb = k / kQ8Block;
  int8_t* q = out->q.data() + i * k;
  float* d = out->d.data() + i * nb;
  float* sums = out->sums.data() + i * nb * 8;
  if (HaveAvx2Fma()) {
    QuantizeRowAvx2(x + i * k, k, q, d, sums);
  } else {
    for (int64_t b = 0; b < nb; ++b) {
      QuantizeBlock(x + i * k + b * kQ8Block, q + b * kQ8Block, d + b, sums + 8 * b);
    }
  }
  FillBlockSums(sums, nb, out->block_sums.data() + i * nb);
}

void Prepare(QuantizedRows* out, int64_t m, int64_t k) {
  out->rows = m;
  out->cols = k;
  if (out->q.size() < static_cast<size_t>(m * k)) out->q.resize(static_cast<size_t>(m * k));
  const size_t blocks = static_cast<size_t>(m * (k / kQ8Block));
  if (out->d.size() < blocks) out->d.resize(blocks);
  if (out->sums.size() < 8 * blocks) out->sums.resize(8 * blocks);
  if (out->block_sums.size() < blocks) out->block_sums.resize(blocks);
}

}  // namespace

bool Q8Supports(GgmlType type) {
  switch (type) {
    case GgmlType::kQ8_0:
    case GgmlType::kQ4_0:
    case GgmlType::kQ4_1:
    case GgmlType::kQ5_0:
    case GgmlType::kQ5_1:
    case GgmlType::kIQ4_NL:
      return true;
    default:
      return ChunksPerBlock(type) == 8;  // Q2_K … Q6_K, IQ4_XS
  }
}

const char* MatMulQ8Isa() { return HaveAvx2Fma() ? "avx2" : "generic"; }

void QuantizeRowsQ8Reference(const float* x, int64_t m, int64_t k, QuantizedRows* out) {
  TANDEM_CHECK(k % kQ8Block == 0);
  Prepare(out, m, k);
  const int64_t nb = k / kQ8Block;
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t b = 0; b < nb; ++b) {
      QuantizeBlock(x + i * k + b * kQ8Block, out->q.data() + i * k + b * kQ8Block,
                    out->d.data() + i * nb + b, out->sums.data() + (i * nb + b) * 8);
    }
    FillBlockSums(out->sums.data() + i * nb * 8, nb, out->block_sums.data() + i * nb);
  }
}

void QuantizeRowsQ8(const float* x, int64_t m, int64_t k, QuantizedRows* out, ThreadPool* pool) {
  TANDEM_CHECK(k % kQ8Block == 0);
  Prepare(out, m, k);
  auto rows = [&](int64_t r0, int64_t r1, int) {
    for (int64_t i = r0; i < r1; ++i) QuantizeRow(x, i, out);
  };
  if (pool == nullptr || m < 4) return rows(0, m, 0);
  pool->ParallelFor(m, rows, 1);
}

void MatMulQ8Reference(const QuantizedRows& x, const WeightMatrix& w, float* out) {
  TANDEM_CHECK(Q8Supports(w.type) && w.cols == x.cols && w.cols % kQ8Block == 0);
  RangeGeneric(x, w, out, 0, w.rows);
}

void MatMulQ8(const QuantizedRows& x, const WeightMatrix& w, float* out, ThreadPool* pool) {
  TANDEM_CHECK(Q8Supports(w.type) && w.cols == x.cols && w.cols % kQ8Block == 0);
  auto run = [&](int64_t b, int64_t e, int) { Range(x, w, out, b, e); };
  if (pool == nullptr) return run(0, w.rows, 0);
  pool->ParallelFor(w.rows, run, 4);
}

void MatMulQ8Group(const float* x, int64_t m, std::initializer_list<const WeightMatrix*> ws,
                   std::initializer_list<float* const*> outs, ThreadPool* pool) {
  // One parallel loop over the rows of every matrix, as MatMulGroup splits them.
  const MatrixGroup group(ws, outs);
  TANDEM_CHECK(group.n > 0);
  for (int i = 0; i < group.n; ++i) TANDEM_CHECK(Q8Supports(group.w[i]->type));
  thread_local QuantizedRows buffer;  // grows to the largest pass, then reused
  QuantizedRows& q = buffer;          // this thread's, also where the pool's threads read it
  QuantizeRowsQ8(x, m, group.w[0]->cols, &q, pool);
  if (m <= 0 || group.rows() == 0) return;
  auto run = [&](int64_t b, int64_t e, int) {
    group.Split(b, e, [&](const WeightMatrix& w, float* o, int64_t lo, int64_t hi) {
      Range(q, w, o, lo, hi);
    });
  };
  if (pool == nullptr) return run(0, group.rows(), 0);
  pool->ParallelFor(group.rows(), run, 4);
}

}  // namespace tandem::kernels
