#include "kernels/cpu/matmul_q8.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <type_traits>

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

// A block of 32's D: the f16 at its start, or MXFP4's E8M0 exponent byte as
// model::E8m0Half reads it (a power of two, exact).
float BlockD(GgmlType type, const uint8_t* block) {
  return type == GgmlType::kMXFP4 ? model::E8m0Half(block[0]) : HalfAt(block);
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
// Whether the min is one per chunk (Q4_K, Q5_K: summed per chunk into lanes of its own)
// rather than per 16 weights (Q2_K) or per block (Q4_1, Q5_1).
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
    case GgmlType::kMXFP4:
      return 1;
    default:
      return 2;  // Q8_0, Q4_0, IQ4_NL
  }
}
constexpr int QhOffset(GgmlType t) { return t == GgmlType::kQ5_0 ? 2 : 4; }

// Quant e (0…31) of a block as the integer the products use: Q8_0's byte, Q4_0's nibble
// − 8, Q5_0's five bits − 16, IQ4_NL's or MXFP4's level; Q4_1's nibble and Q5_1's five bits as
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
    case GgmlType::kMXFP4:
      return model::kMxfp4Levels[nibble];
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

IntChunk ChunkAt(GgmlType type, const uint8_t* b, int c) {
  IntChunk u;
  const int n = c / 4, p = c % 4;  // the 128-half and the quarter of it (Q6_K, Q3_K, Q2_K)
  switch (type) {
    case GgmlType::kQ4_K:
    case GgmlType::kQ5_K: {
      uint8_t sc, m;
      model::KQuantScaleMin(b + 4, c, &sc, &m);
      u.d = HalfAt(b);
      u.dmin = -HalfAt(b + 2);
      u.scale[0] = u.scale[1] = sc;
      u.min[0] = u.min[1] = m;
      const bool five = type == GgmlType::kQ5_K;
      const uint8_t* q = b + (five ? 48 : 16) + 32 * (c / 2);
      for (int l = 0; l < 32; ++l) {
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
      for (int l = 0; l < 32; ++l) {
        u.w[l] = (((ql[l] >> (4 * (p / 2))) & 15) | (((qh[l] >> (2 * p)) & 3) << 4)) - 32;
      }
      return u;
    }
    case GgmlType::kQ3_K: {
      u.d = HalfAt(b + 108);
      LaneScales(type, b, c, u.scale, u.min);
      for (int l = 0; l < 32; ++l) {
        u.w[l] = ((b[32 + 32 * n + l] >> (2 * p)) & 3) - (((b[l] >> c) & 1) ? 0 : 4);
      }
      return u;
    }
    case GgmlType::kQ2_K: {
      u.d = HalfAt(b + 80);
      u.dmin = -HalfAt(b + 82);
      LaneScales(type, b, c, u.scale, u.min);
      for (int l = 0; l < 32; ++l) u.w[l] = (b[16 + 32 * n + l] >> (2 * p)) & 3;
      return u;
    }
    case GgmlType::kIQ4_XS: {
      uint16_t high;
      std::memcpy(&high, b + 2, 2);
      const int ls = ((b[4 + c / 2] >> (4 * (c % 2))) & 15) | (((high >> (2 * c)) & 3) << 4);
      u.d = HalfAt(b);
      u.scale[0] = u.scale[1] = ls - 32;
      const uint8_t* qs = b + 8 + 16 * c;
      for (int l = 0; l < 16; ++l) {
        u.w[l] = model::kIq4Levels[qs[l] & 15];
        u.w[l + 16] = model::kIq4Levels[qs[l] >> 4];
      }
      return u;
    }
    default:  // the blocks of 32
      u.d = BlockD(type, b);
      if (HasMin(type)) u.dmin = HalfAt(b + 2);
      for (int e = 0; e < 32; ++e) u.w[e] = QuantAt(type, b, e);
      return u;
  }
}

// n values quantized with one scale: d = max|x| / 127, q = x · (127 / max|x|) rounded to
// nearest, ties to even; all zeros when max|x| < kTiny.
void QuantizeBlock(const float* x, int64_t n, int8_t* q, float* d) {
  float amax = 0;
  for (int64_t e = 0; e < n; ++e) amax = std::max(amax, std::fabs(x[e]));
  if (!(amax >= kTiny)) {
    std::memset(q, 0, static_cast<size_t>(n));
    *d = 0;
    return;
  }
  const float inv = 127.0f / amax;
  for (int64_t e = 0; e < n; ++e) q[e] = static_cast<int8_t>(std::nearbyint(x[e] * inv));
  *d = amax / 127.0f;
}

// A row's sums of each 16 quants and each 32 (exact; in float for 32).
void FillSums(const int8_t* q, int64_t k, float* block_sums, int16_t* sums16) {
  for (int64_t h = 0; h < k / 16; ++h) {
    int32_t s = 0;
    for (int e = 0; e < 16; ++e) s += q[16 * h + e];
    sums16[h] = static_cast<int16_t>(s);
  }
  for (int64_t b = 0; b < k / kQ8Block; ++b) {
    block_sums[b] = static_cast<float>(sums16[2 * b] + sums16[2 * b + 1]);
  }
}

// The eight accumulators summed in the header's tree: (l + l⊕4), (+ l⊕2), (+ l⊕1).
float SumAccumulators(const float* acc) {
  float v[4];
  for (int l = 0; l < 4; ++l) v[l] = acc[l] + acc[l + 4];
  for (int l = 0; l < 2; ++l) v[l] += v[l + 2];
  return v[0] + v[1];
}

// ---------------------------------------------------------------------------------
// The scalar statement (MatMulQ8Reference, and the path of machines without AVX2).

// The blocks of 32.
void RangeGeneric32(const QuantizedRows& x, const WeightMatrix& w, float* out, int64_t n0,
                    int64_t n1) {
  const int64_t nb = w.cols / kQ8Block, bb = BlockBytes(w.type);
  for (int64_t i = 0; i < x.rows; ++i) {
    const int8_t* q = x.q.data() + i * x.cols;
    for (int64_t j = n0; j < n1; ++j) {
      const uint8_t* row = w.data + j * w.RowBytes();
      float acc[8] = {};
      for (int64_t b = 0; b < nb; ++b) {
        const IntChunk u = ChunkAt(w.type, row + b * bb, 0);
        int32_t p = 0, qsum = 0;
        for (int e = 0; e < 32; ++e) {
          p += u.w[e] * q[b * kQ8Block + e];
          qsum += q[b * kQ8Block + e];
        }
        const float dx = x.d[static_cast<size_t>(i * nb + b)];
        float& a = acc[b % 8];
        a = std::fma(static_cast<float>(p), u.d * dx, a);
        if (HasMin(w.type)) a = std::fma(static_cast<float>(qsum), u.dmin * dx, a);
      }
      out[i * w.rows + j] = SumAccumulators(acc);
    }
  }
}

// The super-blocks of 256: a super-block's products and mins summed as integers, then
// its float step.
void RangeGeneric256(const QuantizedRows& x, const WeightMatrix& w, float* out, int64_t n0,
                     int64_t n1) {
  const int64_t nsb = w.cols / kQ8SuperBlock, bb = BlockBytes(w.type);
  for (int64_t i = 0; i < x.rows; ++i) {
    const int8_t* q = x.q.data() + i * x.cols;
    for (int64_t j = n0; j < n1; ++j) {
      const uint8_t* row = w.data + j * w.RowBytes();
      float acc[8] = {};
      for (int64_t sb = 0; sb < nsb; ++sb) {
        int32_t products = 0, mins = 0;
        float d = 0, dmin = 0;
        for (int c = 0; c < 8; ++c) {
          const IntChunk u = ChunkAt(w.type, row + sb * bb, c);
          d = u.d;
          dmin = u.dmin;
          const int8_t* qc = q + (sb * 8 + c) * kQ8Block;
          for (int h = 0; h < 2; ++h) {
            int32_t p = 0, qsum = 0;
            for (int e = 16 * h; e < 16 * h + 16; ++e) {
              p += u.w[e] * qc[e];
              qsum += qc[e];
            }
            products += u.scale[h] * p;
            if (HasMin(w.type)) mins += u.min[h] * qsum;
          }
        }
        const float dx = x.d[static_cast<size_t>(i * nsb + sb)];
        float& a = acc[sb % 8];
        a = std::fma(static_cast<float>(products), d * dx, a);
        if (HasMin(w.type)) a = std::fma(static_cast<float>(mins), dmin * dx, a);
      }
      out[i * w.rows + j] = SumAccumulators(acc);
    }
  }
}

void RangeGeneric(const QuantizedRows& x, const WeightMatrix& w, float* out, int64_t n0,
                  int64_t n1) {
  if (ChunksPerBlock(w.type) == 8) return RangeGeneric256(x, w, out, n0, n1);
  RangeGeneric32(x, w, out, n0, n1);
}

#define TANDEM_AVX2_INLINE TANDEM_AVX2 __attribute__((always_inline)) inline

// AVX2: a block's 32 weights as signed bytes, and the eight exact sums of four
// products with a block of activations (maddubs on |w| and q·sign(w): no pair exceeds
// 2 · 128 · 127, so nothing saturates).

// Whether decode reads a type's quants unsigned (Q6_K + 32: no signs to move) and takes
// the offset off once per super-block through x's half sums, as a shift. (Q3_K + 4 ran
// slower in the cache: 414 → 433 µs a 4096 × 2048 call.)
constexpr int UnsignedDecode(GgmlType t) { return t == GgmlType::kQ6_K ? 5 : -1; }

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

// kUnsigned (Q6_K): its stored quants w + 32 instead.
template <GgmlType T, bool kUnsigned = false>
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
  } else if constexpr (T == GgmlType::kMXFP4) {
    return Mxfp4Levels(Nibbles(block + QsOffset(T)));
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
    const __m256i u = _mm256_or_si256(low, high);
    return kUnsigned ? u : _mm256_sub_epi8(u, _mm256_set1_epi8(32));
  } else if constexpr (T == GgmlType::kQ3_K) {
    const __m256i low = BitsAt(block + 32 + 32 * n, 2 * p, 3);
    const __m256i bit = _mm256_set1_epi8(static_cast<char>(1 << c));
    const __m256i hbit = _mm256_and_si256(Load32(block), bit);
    const __m256i clear = _mm256_cmpeq_epi8(hbit, _mm256_setzero_si256());
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
TANDEM_AVX2_INLINE __m128i KScalesAndMins(const uint8_t* packed) {
  // Words w0, w1, w2 (and four bytes past them, unused: still inside the super-block).
  const __m128i w = _mm_loadu_si128(reinterpret_cast<const __m128i*>(packed));
  const __m128i low = _mm_and_si128(w, _mm_set1_epi8(0x3F));  // sc_lo, m_lo in words 0, 1
  const __m128i w2 = _mm_srlv_epi32(_mm_shuffle_epi32(w, 0xAA), _mm_setr_epi32(0, 4, 0, 0));
  const __m128i high = _mm_or_si128(_mm_and_si128(w2, _mm_set1_epi8(0x0F)),
                                    _mm_and_si128(_mm_srli_epi32(w, 2), _mm_set1_epi8(0x30)));
  return _mm_unpacklo_epi32(low, high);  // sc_lo, sc_hi, m_lo, m_hi
}

// A super-block's integer scales as int16 words laid out so that one in-lane byte shuffle
// gives chunk c's madd operand: for the types with a scale per 16 weights (Q6_K, Q3_K,
// Q2_K) word c of the low 128-bit lane is scale 2c (the chunk's first half) and word c of
// the high lane scale 2c + 1; for those with one per 32 (Q4_K, Q5_K, IQ4_XS) both lanes
// hold scales 0–7. `bytes` holds the scales as signed bytes (Q4_K/Q5_K's six unsigned
// bits are below 64).
TANDEM_AVX2_INLINE __m256i ScaleWords(__m128i bytes, bool per_half) {
  if (per_half) {
    const __m128i evens_odds = _mm_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15);
    return _mm256_cvtepi8_epi16(_mm_shuffle_epi8(bytes, evens_odds));
  }
  return _mm256_broadcastsi128_si256(_mm_cvtepi8_epi16(bytes));
}

// Word c of each lane of ScaleWords spread over the lane's eight int16 pairs: chunk c's
// madd operand, one shuffle.
struct WordPicks {
  alignas(32) int8_t v[8][32];
};
constexpr WordPicks MakeWordPicks() {
  WordPicks t{};
  for (int c = 0; c < 8; ++c) {
    for (int e = 0; e < 32; ++e) t.v[c][e] = static_cast<int8_t>(2 * c + e % 2);
  }
  return t;
}
constexpr WordPicks kWordPicks = MakeWordPicks();

TANDEM_AVX2_INLINE __m256i ChunkWord(__m256i words, int c) {
  return _mm256_shuffle_epi8(words,
                             _mm256_load_si256(reinterpret_cast<const __m256i*>(kWordPicks.v[c])));
}

// IQ4_XS's eight chunk scales ls − 32 as signed bytes 0–7 (bytes 8–15 zero): the low
// four bits from the nibbles of bytes 4–7 (chunk c: byte 4 + c / 2, the low nibble for
// even c), the top two from bits 2c of the u16 at byte 2.
TANDEM_AVX2_INLINE __m128i Iq4XsScales(const uint8_t* b) {
  uint16_t high;
  uint32_t low;
  std::memcpy(&high, b + 2, 2);
  std::memcpy(&low, b + 4, 4);
  const __m128i nibble = _mm_set1_epi8(15);
  const __m128i lb = _mm_cvtsi32_si128(static_cast<int>(low));
  const __m128i lo =
      _mm_unpacklo_epi8(_mm_and_si128(lb, nibble), _mm_and_si128(_mm_srli_epi16(lb, 4), nibble));
  const __m256i top = _mm256_and_si256(
      _mm256_srlv_epi32(_mm256_set1_epi32(high), _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14)),
      _mm256_set1_epi32(3));
  const __m128i top16 =
      _mm_packus_epi32(_mm256_castsi256_si128(top), _mm256_extracti128_si256(top, 1));
  const __m128i top8 = _mm_packus_epi16(top16, _mm_setzero_si128());
  const __m128i ls = _mm_or_si128(lo, _mm_slli_epi16(top8, 4));
  return _mm_and_si128(_mm_sub_epi8(ls, _mm_set1_epi8(32)), _mm_setr_epi32(-1, -1, 0, 0));
}

// A super-block's factors, unpacked once for its eight chunks: d and M (ChunkAt's D and
// M), the integer scales c_h as ScaleWords (Scale(c): chunk c's madd operand), Q2_K's
// mins n_h as int16, and Q4_K/Q5_K's chunk mins as floats.
template <GgmlType T>
struct alignas(32) SuperFactors {
  float d = 0, dmin = 0;
  __m256i words;
  __m256i min16;     // Q2_K: n_h of the 16 halves as int16, in order
  __m256i scale16;   // UnsignedDecode types (Q6_K): c_h of the 16 halves as int16
  __m256 chunk_min;  // Q4_K, Q5_K: m_c in lane c

  TANDEM_AVX2_INLINE __m256i Scale(int c) const { return ChunkWord(words, c); }

  TANDEM_AVX2_INLINE void Load(const uint8_t* b) {
    const __m128i nibble = _mm_set1_epi8(15);
    __m128i scales, mins = _mm_setzero_si128();
    constexpr bool kPerHalf = HasLaneScales(T);
    if constexpr (T == GgmlType::kQ4_K || T == GgmlType::kQ5_K) {
      uint32_t dd;  // d and dmin, two halves converted at once
      std::memcpy(&dd, b, 4);
      const __m128 both = _mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(dd)));
      d = _mm_cvtss_f32(both);
      dmin = -_mm_cvtss_f32(_mm_movehdup_ps(both));
      const __m128i bytes = KScalesAndMins(b + 4);
      scales = bytes;
      chunk_min = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(bytes, 8)));
    } else if constexpr (T == GgmlType::kIQ4_XS) {
      d = Half(b);
      scales = Iq4XsScales(b);
    } else if constexpr (T == GgmlType::kQ6_K) {
      d = Half(b + 208);
      scales = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 192));
    } else if constexpr (T == GgmlType::kQ3_K) {
      d = Half(b + 108);
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
    } else {
      static_assert(T == GgmlType::kQ2_K);
      d = Half(b + 80);
      dmin = -Half(b + 82);
      const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b));
      scales = _mm_and_si128(bytes, nibble);
      mins = _mm_and_si128(_mm_srli_epi16(bytes, 4), nibble);
    }
    words = ScaleWords(scales, kPerHalf);
    if constexpr (T == GgmlType::kQ2_K) min16 = _mm256_cvtepu8_epi16(mins);
    if constexpr (UnsignedDecode(T) >= 0) scale16 = _mm256_cvtepi8_epi16(scales);
    // Kept as formed: GCC would otherwise push each chunk's shuffle back through the
    // widening (two instructions a chunk instead of one).
    __asm__("" : "+x"(words));
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

// Rows of x quantized on AVX2, `block` values (32 or 256) to a scale: QuantizeBlock's
// arithmetic.
TANDEM_AVX2 void QuantizeRowAvx2(const float* x, int64_t k, int64_t block, int8_t* q, float* d) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  for (int64_t b = 0; b < k / block; ++b) {
    const float* xb = x + b * block;
    __m256 m = _mm256_setzero_ps();
    for (int64_t e = 0; e < block; e += 8) {
      m = _mm256_max_ps(m, _mm256_andnot_ps(sign, _mm256_loadu_ps(xb + e)));
    }
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    h = _mm_max_ps(h, _mm_permute_ps(h, 0x4E));
    h = _mm_max_ps(h, _mm_permute_ps(h, 0xB1));
    const float amax = _mm_cvtss_f32(h);
    int8_t* qb = q + b * block;
    if (!(amax >= kTiny)) {
      std::memset(qb, 0, static_cast<size_t>(block));
      d[b] = 0;
      continue;
    }
    const __m256 inv = _mm256_set1_ps(127.0f / amax);
    for (int64_t e = 0; e < block; e += kQ8Block) {
      __m256i i32[4];
      for (int r = 0; r < 4; ++r) {
        i32[r] = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(xb + e + 8 * r), inv));
      }
      // Pack to 32 bytes; the packs interleave 128-bit lanes, the permute restores order.
      const __m256i i16 = _mm256_packs_epi32(i32[0], i32[1]);
      const __m256i j16 = _mm256_packs_epi32(i32[2], i32[3]);
      const __m256i i8 = _mm256_packs_epi16(i16, j16);
      _mm256_storeu_si256(
          reinterpret_cast<__m256i*>(qb + e),
          _mm256_permutevar8x32_epi32(i8, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
    }
    d[b] = amax / 127.0f;
  }
}

// How far ahead of the block being read decode prefetches its weight row (bytes): one
// stream per core, kept ahead of the hardware prefetcher.
constexpr int64_t kPrefetchAhead = 2048;

// Every cache line of the kBytes at p, kPrefetchAhead further on (the hardware
// prefetcher alone left decode short of the memory's bandwidth).
template <int64_t kBytes>
inline void PrefetchAhead(const uint8_t* p) {
#pragma GCC unroll 8
  for (int64_t line = 0; line < kBytes; line += 64) {
    _mm_prefetch(reinterpret_cast<const char*>(p + kPrefetchAhead + line), _MM_HINT_T0);
  }
}

// The f16 at p, p + stride, … p + 7·stride as eight floats (exact).
TANDEM_AVX2_INLINE __m256 Halves8(const uint8_t* p, int64_t stride) {
  uint16_t h[8];
  for (int e = 0; e < 8; ++e) std::memcpy(&h[e], p + e * stride, 2);
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h)));
}

// The E8M0 bytes at p, p + stride, … p + 7·stride as model::E8m0Half reads each: the
// float with exponent bits e − 1, or for e < 2 the subnormal 2^(e − 128) (exact).
TANDEM_AVX2_INLINE __m256 E8m0Halves8(const uint8_t* p, int64_t stride) {
  alignas(32) int32_t e[8];
  for (int c = 0; c < 8; ++c) e[c] = p[c * stride];
  const __m256i v = _mm256_load_si256(reinterpret_cast<const __m256i*>(e));
  const __m256i normal = _mm256_slli_epi32(_mm256_sub_epi32(v, _mm256_set1_epi32(1)), 23);
  const __m256i subnormal = _mm256_sllv_epi32(_mm256_set1_epi32(0x00200000), v);
  const __m256i small = _mm256_cmpgt_epi32(_mm256_set1_epi32(2), v);
  return _mm256_castsi256_ps(_mm256_blendv_epi8(normal, subnormal, small));
}

#define TANDEM_VNNI \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,fma,f16c")))
#define TANDEM_VNNI_INLINE TANDEM_VNNI __attribute__((always_inline)) inline

// ---------------------------------------------------------------------------------
// AVX2, decode (m = 1): one weight row at a time, decoded on the fly, eight blocks (or
// super-blocks) a step so that one vector of accumulators takes their float steps.

// Each v[b]'s eight int32 lanes summed into lane b (exact).
TANDEM_AVX2_INLINE __m256i SumEach8(const __m256i (&v)[8]) {
  // t0: v0…v3's sums of their lanes 0–3 in its low half, of lanes 4–7 in its high one.
  const __m256i t0 =
      _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]), _mm256_hadd_epi32(v[2], v[3]));
  const __m256i t1 =
      _mm256_hadd_epi32(_mm256_hadd_epi32(v[4], v[5]), _mm256_hadd_epi32(v[6], v[7]));
  return _mm256_add_epi32(_mm256_permute2x128_si256(t0, t1, 0x20),
                          _mm256_permute2x128_si256(t0, t1, 0x31));
}
// The same for float lanes holding integers below 2²⁴ (exact in any order).
TANDEM_AVX2_INLINE __m256 SumEach8(const __m256 (&v)[8]) {
  const __m256 t0 = _mm256_hadd_ps(_mm256_hadd_ps(v[0], v[1]), _mm256_hadd_ps(v[2], v[3]));
  const __m256 t1 = _mm256_hadd_ps(_mm256_hadd_ps(v[4], v[5]), _mm256_hadd_ps(v[6], v[7]));
  return _mm256_add_ps(_mm256_permute2f128_ps(t0, t1, 0x20), _mm256_permute2f128_ps(t0, t1, 0x31));
}

// The eight accumulators summed as SumAccumulators sums them.
TANDEM_AVX2_INLINE float SumAccumulators8(__m256 acc) {
  __m128 h = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
  h = _mm_add_ps(h, _mm_movehl_ps(h, h));
  h = _mm_add_ss(h, _mm_movehdup_ps(h));
  return _mm_cvtss_f32(h);
}

// n ≤ 8 floats at p, zeros after them.
TANDEM_AVX2_INLINE __m256 LoadUpTo8(const float* p, int n) {
  if (n == 8) return _mm256_loadu_ps(p);
  alignas(32) float f[8] = {};
  for (int c = 0; c < n; ++c) f[c] = p[c];
  return _mm256_load_ps(f);
}

// The f16 at byte `at` of blocks first, first + stride, … (n ≤ 8 of them) times their
// d_x, each product rounded once; zeros past n. MXFP4 (at 0, its D): BlockD's E8M0.
template <GgmlType T>
TANDEM_AVX2_INLINE __m256 Factors8(const uint8_t* first, int64_t stride, int at, const float* dx,
                                   int n) {
  constexpr bool kE8m0 = T == GgmlType::kMXFP4;
  if (n == 8) {
    return _mm256_mul_ps(kE8m0 ? E8m0Halves8(first, stride) : Halves8(first + at, stride),
                         _mm256_loadu_ps(dx));
  }
  alignas(32) float f[8] = {};
  for (int c = 0; c < n; ++c) f[c] = BlockD(T, first + c * stride + at) * dx[c];
  return _mm256_load_ps(f);
}

// Blocks b … b + n − 1 (n ≤ 8, from `first`) of a weight row of 32-blocks against the
// same blocks of x (q at block b; dx, block_sums from b) into the accumulators.
template <GgmlType T>
TANDEM_AVX2_INLINE void Blocks32Step(const int8_t* q, const uint8_t* first, const float* dx,
                                     const float* block_sums, int n, __m256& acc) {
  constexpr int64_t bb = model::TypeBytes(T);
  __m256i v[8];
  for (int c = 0; c < 8; ++c) {
    v[c] = c < n ? LaneProducts<T>(ChunkBytes<T>(first + c * bb, 0),
                                   _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + 32 * c)),
                                   _mm256_set1_epi16(1))
                 : _mm256_setzero_si256();
  }
  acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(SumEach8(v)), Factors8<T>(first, bb, 0, dx, n), acc);
  if constexpr (HasMin(T)) {
    acc = _mm256_fmadd_ps(LoadUpTo8(block_sums, n), Factors8<T>(first, bb, 2, dx, n), acc);
  }
}

template <GgmlType T>
TANDEM_AVX2 float RowDot32Avx2(const QuantizedRows& x, int64_t i, const uint8_t* wrow, int64_t nb) {
  constexpr int64_t bb = model::TypeBytes(T);
  const int8_t* q = x.q.data() + i * x.cols;
  const float* dx = x.d.data() + i * nb;
  const float* bs = x.block_sums.data() + i * nb;
  __m256 acc = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; b += 8) {
    const int n = static_cast<int>(std::min<int64_t>(8, nb - b));
    const uint8_t* group = wrow + b * bb;
    if (n == 8) PrefetchAhead<8 * bb>(group);
    Blocks32Step<T>(q + b * kQ8Block, group, dx + b, bs + b, n, acc);
  }
  return SumAccumulators8(acc);
}

// Decode of the nibble types (Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL) two blocks at a time. One
// 32-byte vector holds the first 16 quants of blocks b and b + 1 ("low"), another their
// last 16 ("high") — how the nibbles lie, so a shift and two masks unpack both blocks —
// and the activations are laid out the same way once per call (PairedRow). Q4_0 and
// Q5_0 multiply their unsigned quants u (w = u − 8 or u − 16) and take the offset off in
// float, P = float(Σ u·q) − off · S: integers below 2²⁴, so exactly float(P).
struct PairedRow {
  std::vector<int8_t> q;  // [nb / 2][low 32, high 32]
};

TANDEM_AVX2 void PairRow(const QuantizedRows& x, int64_t i, int64_t nb, PairedRow* out) {
  const int64_t np = nb / 2;
  if (out->q.size() < static_cast<size_t>(np * 64)) out->q.resize(static_cast<size_t>(np * 64));
  const int8_t* q = x.q.data() + i * x.cols;
  for (int64_t p = 0; p < np; ++p) {
    const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + 64 * p));
    const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + 64 * p + 32));
    auto* dq = reinterpret_cast<__m256i*>(out->q.data() + 64 * p);
    _mm256_storeu_si256(dq, _mm256_permute2x128_si256(a, b, 0x20));
    _mm256_storeu_si256(dq + 1, _mm256_permute2x128_si256(a, b, 0x31));
  }
}

constexpr bool Pairs(GgmlType t) {
  return t == GgmlType::kQ4_0 || t == GgmlType::kQ4_1 || t == GgmlType::kQ5_0 ||
         t == GgmlType::kQ5_1 || t == GgmlType::kIQ4_NL || t == GgmlType::kMXFP4;
}
// The nibble types whose quants are signed levels of a table (IQ4_NL, MXFP4).
constexpr bool Levels(GgmlType t) { return t == GgmlType::kIQ4_NL || t == GgmlType::kMXFP4; }
// What Q4_0 and Q5_0 take off their unsigned quants.
constexpr int Offset(GgmlType t) {
  return t == GgmlType::kQ4_0 ? 8 : t == GgmlType::kQ5_0 ? 16 : 0;
}

// Blocks b (at w0) and b + 1 (at w1) as low and high: unsigned quants (Q4_0's and Q5_0's
// before their offset), or IQ4_NL's or MXFP4's signed levels.
template <GgmlType T>
TANDEM_AVX2_INLINE void PairBytes(const uint8_t* w0, const uint8_t* w1, __m256i& low,
                                  __m256i& high) {
  const __m256i v = _mm256_loadu2_m128i(reinterpret_cast<const __m128i*>(w1 + QsOffset(T)),
                                        reinterpret_cast<const __m128i*>(w0 + QsOffset(T)));
  const __m256i nibble = _mm256_set1_epi8(0x0F);
  low = _mm256_and_si256(v, nibble);
  high = _mm256_and_si256(_mm256_srli_epi16(v, 4), nibble);
  if constexpr (T == GgmlType::kQ5_0 || T == GgmlType::kQ5_1) {
    // Bit j of a block's qh is quant j's fifth: bits 0–15 go to low, 16–31 to high.
    uint32_t h0, h1;
    std::memcpy(&h0, w0 + QhOffset(T), 4);
    std::memcpy(&h1, w1 + QhOffset(T), 4);
    const __m256i words =
        _mm256_setr_epi32(static_cast<int>(h0), 0, 0, 0, static_cast<int>(h1), 0, 0, 0);
    const __m256i bit = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201ull));
    const __m256i five = _mm256_set1_epi8(0x10);
    // Byte `byte` of a lane's word to its first eight quants, byte + 1 to the next eight.
    const __m256i eighths = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0,
                                             0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
    auto spread = [&](int byte) TANDEM_AVX2 {
      const __m256i pick = _mm256_add_epi8(eighths, _mm256_set1_epi8(static_cast<char>(byte)));
      const __m256i bits = _mm256_and_si256(_mm256_shuffle_epi8(words, pick), bit);
      return _mm256_and_si256(_mm256_cmpeq_epi8(bits, bit), five);
    };
    low = _mm256_or_si256(low, spread(0));
    high = _mm256_or_si256(high, spread(2));
  } else if constexpr (T == GgmlType::kIQ4_NL) {
    low = Iq4Levels(low);
    high = Iq4Levels(high);
  } else if constexpr (T == GgmlType::kMXFP4) {
    low = Mxfp4Levels(low);
    high = Mxfp4Levels(high);
  }
}

// Blocks b and b + 1 against their activations (q: PairedRow's 64 bytes): lanes 0–3
// hold block b's partial sums (Σ u·q for Q4_0/Q5_0), lanes 4–7 block b + 1's.
template <GgmlType T>
TANDEM_AVX2_INLINE __m256i PairProducts(const int8_t* q, const uint8_t* w0, const uint8_t* w1) {
  __m256i wl, wh;
  PairBytes<T>(w0, w1, wl, wh);
  const __m256i ql = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q));
  const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + 32));
  const __m256i ones = _mm256_set1_epi16(1);
  if constexpr (Levels(T)) {
    const __m256i pl = _mm256_maddubs_epi16(_mm256_sign_epi8(wl, wl), _mm256_sign_epi8(ql, wl));
    const __m256i ph = _mm256_maddubs_epi16(_mm256_sign_epi8(wh, wh), _mm256_sign_epi8(qh, wh));
    return _mm256_add_epi32(_mm256_madd_epi16(pl, ones), _mm256_madd_epi16(ph, ones));
  } else {
    // Pairs below 2 · 31 · 127 each, so two of them still fit int16.
    return _mm256_madd_epi16(
        _mm256_add_epi16(_mm256_maddubs_epi16(wl, ql), _mm256_maddubs_epi16(wh, qh)), ones);
  }
}

// RowDot32Avx2 for the nibble types, eight blocks (four pairs) a step (`paired`: row i
// of x as PairRow lays it out).
template <GgmlType T>
TANDEM_AVX2 float RowDotPairsAvx2(const QuantizedRows& x, const PairedRow& paired, int64_t i,
                                  const uint8_t* wrow, int64_t nb) {
  constexpr int64_t bb = model::TypeBytes(T);
  const float* dx = x.d.data() + i * nb;
  const float* bs = x.block_sums.data() + i * nb;
  __m256 acc = _mm256_setzero_ps();
  int64_t b = 0;
  for (; b + 8 <= nb; b += 8) {
    const uint8_t* group = wrow + b * bb;
    PrefetchAhead<8 * bb>(group);
    __m256i s[4];
    for (int c = 0; c < 4; ++c) {
      s[c] = PairProducts<T>(paired.q.data() + 64 * (b / 2 + c), group + 2 * c * bb,
                             group + (2 * c + 1) * bb);
    }
    // Blocks b, b + 2, b + 4, b + 6 in lanes 0–3, b + 1 … b + 7 in 4–7, then in order.
    const __m256i h =
        _mm256_hadd_epi32(_mm256_hadd_epi32(s[0], s[1]), _mm256_hadd_epi32(s[2], s[3]));
    __m256 p = _mm256_cvtepi32_ps(
        _mm256_permutevar8x32_epi32(h, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
    const __m256 sums = _mm256_loadu_ps(bs + b);
    if constexpr (Offset(T) != 0) {
      p = _mm256_fnmadd_ps(sums, _mm256_set1_ps(static_cast<float>(Offset(T))), p);
    }
    acc = _mm256_fmadd_ps(p, Factors8<T>(group, bb, 0, dx + b, 8), acc);
    if constexpr (HasMin(T)) acc = _mm256_fmadd_ps(sums, Factors8<T>(group, bb, 2, dx + b, 8), acc);
  }
  if (b < nb) {
    Blocks32Step<T>(x.q.data() + i * x.cols + b * kQ8Block, wrow + b * bb, dx + b, bs + b,
                    static_cast<int>(nb - b), acc);
  }
  return SumAccumulators8(acc);
}

// One chunk of x's row against chunk c of a super-block, into the integer lanes.
template <GgmlType T>
TANDEM_AVX2_INLINE void ChunkStep256(const int8_t* q, const uint8_t* block, int c,
                                     const SuperFactors<T>& f, __m256i& lanes) {
  const __m256i qv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q));
  if constexpr (UnsignedDecode(T) >= 0) {
    lanes = _mm256_add_epi32(
        lanes,
        _mm256_madd_epi16(_mm256_maddubs_epi16(ChunkBytes<T, true>(block, c), qv), f.Scale(c)));
  } else {
    lanes = _mm256_add_epi32(lanes, LaneProducts<T>(ChunkBytes<T>(block, c), qv, f.Scale(c)));
  }
}

// Eight super-blocks a step: each one's integer lanes (P's terms; N's for Q2_K, or
// Q4_K/Q5_K's n_c · S_c in float lanes) summed into its lane, then one float step for
// the eight.
template <GgmlType T>
TANDEM_AVX2 float RowDot256Avx2(const QuantizedRows& x, int64_t i, const uint8_t* wrow,
                                int64_t nsb) {
  constexpr int64_t bb = model::TypeBytes(T);
  const int8_t* q = x.q.data() + i * x.cols;
  const float* dx = x.d.data() + i * nsb;
  const float* block_sums = x.block_sums.data() + i * nsb * 8;
  const int16_t* sums16 = x.sums16.data() + i * nsb * 16;
  __m256 acc = _mm256_setzero_ps();
  SuperFactors<T> f;
  for (int64_t s0 = 0; s0 < nsb; s0 += 8) {
    const int n = static_cast<int>(std::min<int64_t>(8, nsb - s0));
    __m256i products[8], mins[8];
    __m256 chunk_mins[8];
    alignas(32) float fd[8] = {}, fm[8] = {};
    for (int c = 0; c < 8; ++c) {
      products[c] = mins[c] = _mm256_setzero_si256();
      chunk_mins[c] = _mm256_setzero_ps();
      if (c >= n) continue;
      const int64_t sb = s0 + c;
      const uint8_t* block = wrow + sb * bb;
      PrefetchAhead<bb>(block);
      f.Load(block);
#pragma GCC unroll 8
      for (int ch = 0; ch < 8; ++ch) {
        ChunkStep256<T>(q + (sb * 8 + ch) * kQ8Block, block, ch, f, products[c]);
      }
      const __m256i half_sums =
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(sums16 + sb * 16));
      if constexpr (T == GgmlType::kQ2_K) {  // N = Σ_h n_h · S_h: x's half sums, one madd
        mins[c] = _mm256_madd_epi16(half_sums, f.min16);
      }
      if constexpr (UnsignedDecode(T) >= 0) {  // − offset · Σ_h c_h · S_h
        products[c] = _mm256_sub_epi32(
            products[c],
            _mm256_slli_epi32(_mm256_madd_epi16(half_sums, f.scale16), UnsignedDecode(T)));
      }
      if constexpr (HasChunkMins(T)) {
        chunk_mins[c] = _mm256_mul_ps(_mm256_loadu_ps(block_sums + sb * 8), f.chunk_min);
      }
      fd[c] = f.d * dx[sb];
      fm[c] = f.dmin * dx[sb];
    }
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(SumEach8(products)), _mm256_load_ps(fd), acc);
    if constexpr (T == GgmlType::kQ2_K) {
      acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(SumEach8(mins)), _mm256_load_ps(fm), acc);
    }
    if constexpr (HasChunkMins(T)) {
      acc = _mm256_fmadd_ps(SumEach8(chunk_mins), _mm256_load_ps(fm), acc);
    }
  }
  return SumAccumulators8(acc);
}

// ---------------------------------------------------------------------------------
// Batches (m ≥ kQ8LaneRows): tiles of 16 rows of x held in the lanes (x.lanes) against
// a few weight rows decoded once per call — each output's block sums gather in one
// int32 lane, so the float step of a block takes 16 outputs in one instruction.

// What a type adds to its quants (a power of two, as a shift; −1: nothing) to make
// them the unsigned operand of the lane tiles' products: Q6_K + 32, Q3_K + 4, Q4_0 + 8,
// Q5_0 + 16 (their stored quants); for IQ4_XS, Q8_0 and IQ4_NL (+ 128) only where the
// product does not pass through int16 (vpdpbusd), else those three keep signed quants
// and move the signs to the activations. The offset comes off through x's sums.
template <bool kVnni>
constexpr int LaneShift(GgmlType t) {
  switch (t) {
    case GgmlType::kQ6_K:
      return 5;
    case GgmlType::kQ3_K:
      return 2;
    case GgmlType::kQ4_0:
      return 3;
    case GgmlType::kQ5_0:
      return 4;
    case GgmlType::kIQ4_XS:
    case GgmlType::kQ8_0:
    case GgmlType::kIQ4_NL:
    case GgmlType::kMXFP4:
      return kVnni ? 7 : -1;
    default:
      return -1;
  }
}
// Whether the AVX2 tile moves the weights' signs to the activations (maddubs on |w|).
constexpr bool SignedLanes(GgmlType t) {
  return t == GgmlType::kIQ4_XS || t == GgmlType::kQ8_0 || Levels(t);
}

// One block of a weight row decoded for the lane tiles: its quants in k order, made
// unsigned as LaneShift says (the AVX2 tile's SignedLanes types keep them signed), D and
// M; a super-block also the scale c_h of each half and the mins n_h as int16 pairs
// (Q4_K/Q5_K: chunks 2p and 2p + 1 in pair p = 0…3; Q2_K: halves 2p and 2p + 1, p = 0…7).
struct LaneBlock32 {
  uint8_t u[32];
  float d, dmin;
};
struct alignas(64) LaneBlock256 {
  uint8_t u[256];
  int32_t scale[16];
  int32_t min_pairs[8];
  float d, dmin;
};
template <GgmlType T>
using LaneBlock = std::conditional_t<ChunksPerBlock(T) == 8, LaneBlock256, LaneBlock32>;

int32_t Int16Pair(int32_t low, int32_t high) {
  return static_cast<int32_t>((static_cast<uint32_t>(low) & 0xFFFFu) |
                              (static_cast<uint32_t>(high) << 16));
}

// kShift: what the quants take on (LaneShift's power of two; −1: nothing).
template <GgmlType T, int kShift>
TANDEM_AVX2 void DecodeLaneRow(const uint8_t* row, int64_t nblocks, LaneBlock<T>* out) {
  constexpr int64_t bb = model::TypeBytes(T);
  const __m256i offset = _mm256_set1_epi8(kShift < 0 ? 0 : static_cast<char>(1 << kShift));
  for (int64_t blk = 0; blk < nblocks; ++blk) {
    const uint8_t* block = row + blk * bb;
    LaneBlock<T>& o = out[blk];
    for (int c = 0; c < ChunksPerBlock(T); ++c) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(o.u + 32 * c),
                          _mm256_add_epi8(ChunkBytes<T>(block, c), offset));
    }
    int32_t mins[16] = {};
    if constexpr (ChunksPerBlock(T) == 1) {
      o.d = BlockD(T, block);
      if constexpr (HasMin(T)) o.dmin = Half(block + 2);
    } else if constexpr (T == GgmlType::kQ4_K || T == GgmlType::kQ5_K) {
      o.d = Half(block);
      o.dmin = -Half(block + 2);
      // Scales 0–7 and mins 0–7 (bytes 0–7, 8–15): each scale for both halves of its
      // chunk; the mins already as int16 pairs (2p, 2p + 1).
      const __m128i bytes = KScalesAndMins(block + 4);
      const __m256i scales = _mm256_cvtepu8_epi32(bytes);
      _mm256_storeu_si256(
          reinterpret_cast<__m256i*>(o.scale),
          _mm256_permutevar8x32_epi32(scales, _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3)));
      _mm256_storeu_si256(
          reinterpret_cast<__m256i*>(o.scale + 8),
          _mm256_permutevar8x32_epi32(scales, _mm256_setr_epi32(4, 4, 5, 5, 6, 6, 7, 7)));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(o.min_pairs),
                       _mm_cvtepu8_epi16(_mm_srli_si128(bytes, 8)));
    } else if constexpr (T == GgmlType::kQ6_K) {
      o.d = Half(block + 208);
      const __m128i scales = _mm_loadu_si128(reinterpret_cast<const __m128i*>(block + 192));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(o.scale), _mm256_cvtepi8_epi32(scales));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(o.scale + 8),
                          _mm256_cvtepi8_epi32(_mm_srli_si128(scales, 8)));
    } else if constexpr (T == GgmlType::kIQ4_XS) {
      o.d = Half(block);
      const __m256i scales = _mm256_cvtepi8_epi32(Iq4XsScales(block));
      _mm256_storeu_si256(
          reinterpret_cast<__m256i*>(o.scale),
          _mm256_permutevar8x32_epi32(scales, _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3)));
      _mm256_storeu_si256(
          reinterpret_cast<__m256i*>(o.scale + 8),
          _mm256_permutevar8x32_epi32(scales, _mm256_setr_epi32(4, 4, 5, 5, 6, 6, 7, 7)));
    } else {
      for (int c = 0; c < 8; ++c) LaneScales(T, block, c, o.scale + 2 * c, mins + 2 * c);
      if constexpr (T == GgmlType::kQ3_K) o.d = Half(block + 108);
      if constexpr (T == GgmlType::kQ2_K) {
        o.d = Half(block + 80);
        o.dmin = -Half(block + 82);
        for (int p = 0; p < 8; ++p) o.min_pairs[p] = Int16Pair(mins[2 * p], mins[2 * p + 1]);
      }
    }
  }
}

// The shape of a type's lane tile: scale groups per block (a group's products summed
// in integers before its scale), four-quant steps per group, and the mins' int16 pairs.
template <GgmlType T>
struct LaneShape {
  static constexpr bool kSuper = ChunksPerBlock(T) == 8;
  static constexpr bool kPer16 = HasLaneScales(T);
  static constexpr int kGroups = !kSuper ? 1 : kPer16 ? 16 : 8;
  static constexpr int kSteps = kPer16 ? 4 : 8;
  static constexpr int kMinPairs = T == GgmlType::kQ2_K ? 8 : HasChunkMins(T) ? 4 : 0;
};

// x's quant sums of scale group g of block `blk` in the 16 lanes of a tile (ls: the
// tile's lane_sums, one per 16 quants).
template <GgmlType T>
inline const int32_t* GroupSums(const int32_t* ls, int64_t blk, int g) {
  using S = LaneShape<T>;
  const int64_t sixteen = S::kSuper ? blk * 16 + (S::kPer16 ? g : 2 * g) : 2 * blk;
  return ls + sixteen * 16;
}

// What a block's min term reads of x's sums in the 16 lanes (ls: the tile's lane_sums),
// and the block's float step for one weight row: acc + float(P) · (D · d_x), then
// + float(N) · (M · d_x) for the types with a min (N by madd of x's sums in int16 pairs
// with the row's mins for the super-blocks; the block's quant sum for Q4_1 and Q5_1).
template <GgmlType T>
struct LaneMins {
  using S = LaneShape<T>;
  __m512i pairs[S::kMinPairs > 0 ? S::kMinPairs : 1];
  __m512 block_sums;

  TANDEM_VNNI_INLINE LaneMins(const int32_t* ls, int64_t blk) {
    for (int q = 0; q < S::kMinPairs; ++q) {
      const int32_t* s = ls + blk * 16 * 16;
      __m512i lo, hi;
      if constexpr (T == GgmlType::kQ2_K) {
        lo = _mm512_loadu_si512(s + (2 * q) * 16);
        hi = _mm512_loadu_si512(s + (2 * q + 1) * 16);
      } else {
        lo = _mm512_add_epi32(_mm512_loadu_si512(s + (4 * q) * 16),
                              _mm512_loadu_si512(s + (4 * q + 1) * 16));
        hi = _mm512_add_epi32(_mm512_loadu_si512(s + (4 * q + 2) * 16),
                              _mm512_loadu_si512(s + (4 * q + 3) * 16));
      }
      pairs[q] = _mm512_or_si512(_mm512_and_si512(lo, _mm512_set1_epi32(0xFFFF)),
                                 _mm512_slli_epi32(hi, 16));
    }
    if constexpr (!S::kSuper && HasMin(T)) {
      block_sums = _mm512_cvtepi32_ps(_mm512_add_epi32(
          _mm512_loadu_si512(ls + 2 * blk * 16), _mm512_loadu_si512(ls + (2 * blk + 1) * 16)));
    } else {
      block_sums = _mm512_setzero_ps();
    }
  }

  TANDEM_VNNI_INLINE __m512 Step(__m512i p, const LaneBlock<T>& f, __m512 dx, __m512 acc) const {
    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), _mm512_mul_ps(_mm512_set1_ps(f.d), dx), acc);
    if constexpr (HasMin(T)) {
      __m512 n = block_sums;
      if constexpr (S::kSuper) {
        __m512i ni = _mm512_setzero_si512();
        for (int q = 0; q < S::kMinPairs; ++q) {
          ni = _mm512_dpwssd_epi32(ni, pairs[q], _mm512_set1_epi32(f.min_pairs[q]));
        }
        n = _mm512_cvtepi32_ps(ni);
      }
      acc = _mm512_fmadd_ps(n, _mm512_mul_ps(_mm512_set1_ps(f.dmin), dx), acc);
    }
    return acc;
  }
};

// The eight accumulators of 16 outputs summed in the header's tree.
TANDEM_VNNI_INLINE __m512 SumAccumulators16(const __m512 (&acc)[8]) {
  __m512 v[4];
  for (int l = 0; l < 4; ++l) v[l] = _mm512_add_ps(acc[l], acc[l + 4]);
  for (int l = 0; l < 2; ++l) v[l] = _mm512_add_ps(v[l], v[l + 2]);
  return _mm512_add_ps(v[0], v[1]);
}

// VNNI: R weight rows against tile `tile` of x, the header's arithmetic with each row
// of x in a lane; out[r][t] the output of weight row r and the tile's row t.
template <GgmlType T, int R>
TANDEM_VNNI void LaneTileVnni(const QuantizedRows& x, int64_t tile, const LaneBlock<T>* const* rows,
                              int64_t nblocks, float* out) {
  using S = LaneShape<T>;
  constexpr int kShift = LaneShift<true>(T);
  const int64_t k = x.cols;
  const int8_t* xq = x.lanes.data() + tile * (k / 4) * 64;
  const int32_t* ls = x.lane_sums.data() + tile * (k / 16) * 16;
  const float* xd = x.lane_d.data() + tile * nblocks * 16;
  __m512 acc[R][8];
  for (int r = 0; r < R; ++r) {
    for (int a = 0; a < 8; ++a) acc[r][a] = _mm512_setzero_ps();
  }
  for (int64_t blk = 0; blk < nblocks; ++blk) {
    __m512i p[R];
    for (int r = 0; r < R; ++r) p[r] = _mm512_setzero_si512();
    for (int g = 0; g < S::kGroups; ++g) {
      __m512i start = _mm512_setzero_si512();
      if constexpr (kShift >= 0) {
        // −offset · the group's quant sum of each row of x.
        const int32_t* s = GroupSums<T>(ls, blk, g);
        __m512i total = _mm512_loadu_si512(s);
        if constexpr (!S::kPer16) total = _mm512_add_epi32(total, _mm512_loadu_si512(s + 16));
        start = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(total, kShift));
      }
      __m512i part[R];
      for (int r = 0; r < R; ++r) part[r] = start;
#pragma GCC unroll 8
      for (int st = 0; st < S::kSteps; ++st) {
        const int e = (g * S::kSteps + st) * 4;  // the step's first weight in the block
        const __m512i xv = _mm512_loadu_si512(xq + ((blk * (S::kSuper ? 256 : 32) + e) / 4) * 64);
        for (int r = 0; r < R; ++r) {
          int32_t w4;
          std::memcpy(&w4, rows[r][blk].u + e, 4);
          part[r] = _mm512_dpbusd_epi32(part[r], _mm512_set1_epi32(w4), xv);
        }
      }
      for (int r = 0; r < R; ++r) {
        if constexpr (S::kSuper) {
          const int32_t c = rows[r][blk].scale[S::kPer16 ? g : 2 * g];
          p[r] = _mm512_add_epi32(p[r], _mm512_mullo_epi32(part[r], _mm512_set1_epi32(c)));
        } else {
          p[r] = part[r];
        }
      }
    }
    const LaneMins<T> mins(ls, blk);
    const __m512 dx = _mm512_loadu_ps(xd + blk * 16);
    const int a = static_cast<int>(blk % 8);
    for (int r = 0; r < R; ++r) acc[r][a] = mins.Step(p[r], rows[r][blk], dx, acc[r][a]);
  }
  for (int r = 0; r < R; ++r) _mm512_storeu_ps(out + 16 * r, SumAccumulators16(acc[r]));
}

// AVX2: the same with the tile's 16 rows of x in two 8-lane halves, maddubs + madd for
// the products (pairs of products in int16: the types whose unsigned quants stay below
// 16 or 32 sum a few steps there first; the SignedLanes types take |w| and the
// activations with w's signs).
template <GgmlType T, int R>
TANDEM_AVX2 void LaneTileAvx2(const QuantizedRows& x, int64_t tile, const LaneBlock<T>* const* rows,
                              int64_t nblocks, float* out) {
  using S = LaneShape<T>;
  constexpr int kShift = LaneShift<false>(T);
  constexpr bool kSigned = SignedLanes(T);
  // Steps whose int16 pair sums cannot pass 2¹⁵: 2 · steps · max u · 127.
  constexpr int kMaxU = T == GgmlType::kQ6_K                                                   ? 63
                        : T == GgmlType::kQ5_K || T == GgmlType::kQ5_0 || T == GgmlType::kQ5_1 ? 31
                        : T == GgmlType::kQ3_K                                                 ? 7
                        : T == GgmlType::kQ2_K                                                 ? 3
                                                                                               : 15;
  constexpr int kRun = kSigned ? 1 : std::min(S::kSteps, 32767 / (2 * kMaxU * 127));
  const int64_t k = x.cols;
  const int8_t* xq = x.lanes.data() + tile * (k / 4) * 64;
  const int32_t* ls = x.lane_sums.data() + tile * (k / 16) * 16;
  const float* xd = x.lane_d.data() + tile * nblocks * 16;
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc[R][8][2];
  for (int r = 0; r < R; ++r) {
    for (int a = 0; a < 8; ++a) acc[r][a][0] = acc[r][a][1] = _mm256_setzero_ps();
  }
  for (int64_t blk = 0; blk < nblocks; ++blk) {
    __m256i p[R][2];
    for (int r = 0; r < R; ++r) p[r][0] = p[r][1] = _mm256_setzero_si256();
    for (int g = 0; g < S::kGroups; ++g) {
      __m256i start[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
      if constexpr (kShift >= 0) {
        const int32_t* s = GroupSums<T>(ls, blk, g);
        for (int h = 0; h < 2; ++h) {
          __m256i total = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + 8 * h));
          if constexpr (!S::kPer16) {
            total = _mm256_add_epi32(
                total, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + 16 + 8 * h)));
          }
          start[h] = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(total, kShift));
        }
      }
      __m256i part[R][2];
      for (int r = 0; r < R; ++r) part[r][0] = start[0], part[r][1] = start[1];
      for (int st0 = 0; st0 < S::kSteps; st0 += kRun) {
        __m256i pairs[R][2];
        for (int r = 0; r < R; ++r) pairs[r][0] = pairs[r][1] = _mm256_setzero_si256();
        for (int st = st0; st < st0 + kRun; ++st) {
          const int e = (g * S::kSteps + st) * 4;
          const int8_t* xs = xq + ((blk * (S::kSuper ? 256 : 32) + e) / 4) * 64;
          const __m256i x0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xs));
          const __m256i x1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xs + 32));
          for (int r = 0; r < R; ++r) {
            int32_t w4;
            std::memcpy(&w4, rows[r][blk].u + e, 4);
            const __m256i w = _mm256_set1_epi32(w4);
            if constexpr (kSigned) {
              const __m256i a = _mm256_sign_epi8(w, w);
              pairs[r][0] = _mm256_maddubs_epi16(a, _mm256_sign_epi8(x0, w));
              pairs[r][1] = _mm256_maddubs_epi16(a, _mm256_sign_epi8(x1, w));
            } else {
              pairs[r][0] = _mm256_add_epi16(pairs[r][0], _mm256_maddubs_epi16(w, x0));
              pairs[r][1] = _mm256_add_epi16(pairs[r][1], _mm256_maddubs_epi16(w, x1));
            }
          }
        }
        for (int r = 0; r < R; ++r) {
          for (int h = 0; h < 2; ++h) {
            part[r][h] = _mm256_add_epi32(part[r][h], _mm256_madd_epi16(pairs[r][h], ones));
          }
        }
      }
      for (int r = 0; r < R; ++r) {
        for (int h = 0; h < 2; ++h) {
          if constexpr (S::kSuper) {
            const int32_t c = rows[r][blk].scale[S::kPer16 ? g : 2 * g];
            p[r][h] =
                _mm256_add_epi32(p[r][h], _mm256_mullo_epi32(part[r][h], _mm256_set1_epi32(c)));
          } else {
            p[r][h] = part[r][h];
          }
        }
      }
    }
    const int a = static_cast<int>(blk % 8);
    for (int h = 0; h < 2; ++h) {
      const __m256 dx = _mm256_loadu_ps(xd + blk * 16 + 8 * h);
      __m256i pairs[S::kMinPairs > 0 ? S::kMinPairs : 1];
      for (int q = 0; q < S::kMinPairs; ++q) {
        const int32_t* s = ls + blk * 16 * 16 + 8 * h;
        auto at = [&](int sixteen) TANDEM_AVX2 {
          return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + sixteen * 16));
        };
        const __m256i lo =
            T == GgmlType::kQ2_K ? at(2 * q) : _mm256_add_epi32(at(4 * q), at(4 * q + 1));
        const __m256i hi =
            T == GgmlType::kQ2_K ? at(2 * q + 1) : _mm256_add_epi32(at(4 * q + 2), at(4 * q + 3));
        pairs[q] = _mm256_or_si256(_mm256_and_si256(lo, _mm256_set1_epi32(0xFFFF)),
                                   _mm256_slli_epi32(hi, 16));
      }
      __m256 block_sums;
      if constexpr (!S::kSuper && HasMin(T)) {
        const int32_t* s = ls + 2 * blk * 16 + 8 * h;
        block_sums = _mm256_cvtepi32_ps(
            _mm256_add_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(s)),
                             _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + 16))));
      }
      for (int r = 0; r < R; ++r) {
        const LaneBlock<T>& f = rows[r][blk];
        acc[r][a][h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p[r][h]),
                                       _mm256_mul_ps(_mm256_set1_ps(f.d), dx), acc[r][a][h]);
        if constexpr (HasMin(T)) {
          __m256 n;
          if constexpr (S::kSuper) {
            __m256i ni = _mm256_setzero_si256();
            for (int q = 0; q < S::kMinPairs; ++q) {
              ni = _mm256_add_epi32(ni,
                                    _mm256_madd_epi16(pairs[q], _mm256_set1_epi32(f.min_pairs[q])));
            }
            n = _mm256_cvtepi32_ps(ni);
          } else {
            n = block_sums;
          }
          acc[r][a][h] =
              _mm256_fmadd_ps(n, _mm256_mul_ps(_mm256_set1_ps(f.dmin), dx), acc[r][a][h]);
        }
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int h = 0; h < 2; ++h) {
      __m256 v[4];
      for (int l = 0; l < 4; ++l) v[l] = _mm256_add_ps(acc[r][l][h], acc[r][l + 4][h]);
      for (int l = 0; l < 2; ++l) v[l] = _mm256_add_ps(v[l], v[l + 2]);
      _mm256_storeu_ps(out + 16 * r + 8 * h, _mm256_add_ps(v[0], v[1]));
    }
  }
}

// AMX: 16 weight rows (rows, each nblocks LaneBlocks, one after the other) against tile
// `tile` of x. A scale group's products for all 256 outputs are one tile product —
// tdpbssd on the signed quants, tdpbusd on the min types' unsigned ones, nothing added
// to either — stored and read back a weight row at a time for its scale and the block's
// float step, as the VNNI tile takes them. The blocks go accumulator by accumulator
// (blocks a, a + 8, …, each in order) so that one accumulator of the 16 rows sits in
// registers.

#define TANDEM_AMX                                                              \
  __attribute__((                                                               \
      target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,fma,f16c,amx-tile," \
             "amx-int8")))

// Q4_K and Q5_K on AMX: a chunk's 6-bit scale split as c = c_hi · 2^s + c_lo (s =
// PlaneShift) so that both w · c_lo and w · c_hi fit a byte (Q4_K: 15 · 15 and 15 · 3;
// Q5_K: 31 · 7 and 31 · 7). Two planes of scaled quants then take a whole super-block
// in two running tile sums, P = 2^s · hi + lo (exact), instead of a tile product, a
// store and a vpmulld per chunk.
constexpr bool AmxPlanes(GgmlType t) { return HasChunkMins(t); }
constexpr int PlaneShift(GgmlType t) { return t == GgmlType::kQ4_K ? 4 : 3; }

// A block as the AMX tile reads it: the lane tiles' (quants as they are), or for the
// plane types the lo plane in u and the hi plane beside it.
struct alignas(64) PlaneBlock : LaneBlock256 {
  uint8_t hi[256];
};
template <GgmlType T>
using AmxBlock = std::conditional_t<AmxPlanes(T), PlaneBlock, LaneBlock<T>>;

// A plane type's decoded block into its two planes.
TANDEM_VNNI void SplitPlanes(const LaneBlock256& b, int shift, PlaneBlock* out) {
  static_cast<LaneBlock256&>(*out) = b;
  const __m512i low_mask = _mm512_set1_epi16(static_cast<int16_t>((1 << shift) - 1));
  for (int c = 0; c < 8; ++c) {
    const __m512i w =
        _mm512_cvtepu8_epi16(_mm256_load_si256(reinterpret_cast<const __m256i*>(b.u + 32 * c)));
    const __m512i scale = _mm512_set1_epi16(static_cast<int16_t>(b.scale[2 * c]));
    const __m512i lo = _mm512_mullo_epi16(w, _mm512_and_si512(scale, low_mask));
    const __m512i hi =
        _mm512_mullo_epi16(w, _mm512_srli_epi16(scale, static_cast<unsigned>(shift)));
    _mm256_store_si256(reinterpret_cast<__m256i*>(out->u + 32 * c), _mm512_cvtepi16_epi8(lo));
    _mm256_store_si256(reinterpret_cast<__m256i*>(out->hi + 32 * c), _mm512_cvtepi16_epi8(hi));
  }
}

// The tile registers: 0–3 a group's sums (16 weight rows × 16 rows of x, int32), 4 and 5
// the weights (16 rows × a group's quants), 6 and 7 x (a group's four-quant steps × the
// 16 rows × 4), as LaneShape<T> sizes a group.
struct alignas(64) AmxTileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

template <GgmlType T>
constexpr AmxTileConfig MakeAmxTileConfig() {
  // The plane types' tiles all 16 × 64 bytes: 64 quants a step.
  constexpr int kSteps = AmxPlanes(T) ? 16 : LaneShape<T>::kSteps;
  AmxTileConfig config;
  for (int t = 0; t < 8; ++t) {
    config.rows[t] = static_cast<uint8_t>(t < 6 ? 16 : kSteps);
    config.colsb[t] = static_cast<uint16_t>(t == 4 || t == 5 ? 4 * kSteps : 64);
  }
  return config;
}

// (A static configuration: GCC's ldtilecfg reads its operand through an asm that names
// only its first bytes, so the stores of a local one could be dropped.)
template <GgmlType T>
TANDEM_AMX void ConfigureAmx() {
  static constexpr AmxTileConfig kConfig = MakeAmxTileConfig<T>();
  _tile_loadconfig(&kConfig);
}
TANDEM_AMX void ReleaseAmx() { _tile_release(); }

#define TANDEM_AMX_INLINE TANDEM_AMX __attribute__((always_inline)) inline

// Group g's sums into tile register C from weights in A and x in B, then to sums[g].
#define TANDEM_AMX_GROUP(C, A, B, g)                \
  do {                                              \
    _tile_zero(C);                                  \
    _tile_loadd(A, wb + (g)*4 * S::kSteps, stride); \
    _tile_loadd(B, xb + (g)*64 * S::kSteps, 64);    \
    if constexpr (HasMin(T)) {                      \
      _tile_dpbusd(C, A, B);                        \
    } else {                                        \
      _tile_dpbssd(C, A, B);                        \
    }                                               \
    _tile_stored(C, sums[g], 64);                   \
  } while (false)

// Block blk's group sums into sums[g] (tile registers as the configuration says).
template <GgmlType T>
TANDEM_AMX_INLINE void AmxBlockSums(const AmxBlock<T>& block, int64_t stride, const int8_t* xb,
                                    int32_t (*sums)[16][16]) {
  using S = LaneShape<T>;
  const uint8_t* wb = block.u;
  if constexpr (AmxPlanes(T)) {
    // sums[0] the lo plane's, sums[1] the hi plane's, over the super-block.
    const uint8_t* hi = block.hi;
    _tile_zero(0);
    _tile_zero(1);
    for (int st = 0; st < 4; st += 2) {
      _tile_loadd(6, xb + st * 1024, 64);
      _tile_loadd(4, wb + st * 64, stride);
      _tile_loadd(5, hi + st * 64, stride);
      _tile_dpbusd(0, 4, 6);
      _tile_dpbusd(1, 5, 6);
      _tile_loadd(7, xb + (st + 1) * 1024, 64);
      _tile_loadd(2, wb + (st + 1) * 64, stride);
      _tile_loadd(3, hi + (st + 1) * 64, stride);
      _tile_dpbusd(0, 2, 7);
      _tile_dpbusd(1, 3, 7);
    }
    _tile_stored(0, sums[0], 64);
    _tile_stored(1, sums[1], 64);
  } else if constexpr (S::kGroups == 1) {
    TANDEM_AMX_GROUP(0, 4, 6, 0);
  } else {
    for (int g = 0; g < S::kGroups; g += 4) {
      TANDEM_AMX_GROUP(0, 4, 6, g);
      TANDEM_AMX_GROUP(1, 5, 7, g + 1);
      TANDEM_AMX_GROUP(2, 4, 6, g + 2);
      TANDEM_AMX_GROUP(3, 5, 7, g + 3);
    }
  }
}

template <GgmlType T>
TANDEM_AMX void LaneTileAmx(const QuantizedRows& x, int64_t tile, const AmxBlock<T>* rows,
                            int64_t nblocks, float* out) {
  using S = LaneShape<T>;
  const int64_t k = x.cols, stride = nblocks * static_cast<int64_t>(sizeof(AmxBlock<T>));
  const int8_t* xq = x.lanes.data() + tile * (k / 4) * 64;
  const int32_t* ls = x.lane_sums.data() + tile * (k / 16) * 16;
  const float* xd = x.lane_d.data() + tile * nblocks * 16;
  // Two blocks' sums: the tiles fill one while the rows read the other, so that no read
  // waits on (or runs ahead of) the tile stores it needs.
  alignas(64) int32_t sums[2][S::kGroups][16][16];
  alignas(64) float partial[8][16][16];  // each accumulator of the 16 rows
  int buf = 0;
  for (int a = 0; a < 8; ++a) {
    __m512 acc[16];
    for (int r = 0; r < 16; ++r) acc[r] = _mm512_setzero_ps();
    for (int64_t blk = a; blk < nblocks; blk += 8) {
      if (blk == 0) AmxBlockSums<T>(rows[0], stride, xq, sums[buf]);
      // The block after this one in accumulator order, into the other buffer.
      const int64_t after = blk + 8 < nblocks                       ? blk + 8
                            : a + 1 < std::min<int64_t>(8, nblocks) ? a + 1
                                                                    : -1;
      if (after >= 0) {
        AmxBlockSums<T>(rows[after], stride, xq + after * (S::kSuper ? 256 : 32) / 4 * 64,
                        sums[buf ^ 1]);
      }
      const LaneMins<T> mins(ls, blk);
      const __m512 dx = _mm512_loadu_ps(xd + blk * 16);
      for (int r = 0; r < 16; ++r) {
        const AmxBlock<T>& f = rows[r * nblocks + blk];
        __m512i p = _mm512_load_si512(sums[buf][0][r]);
        if constexpr (AmxPlanes(T)) {
          p = _mm512_add_epi32(
              p, _mm512_slli_epi32(_mm512_load_si512(sums[buf][1][r]), PlaneShift(T)));
        } else if constexpr (S::kSuper) {
          p = _mm512_mullo_epi32(p, _mm512_set1_epi32(f.scale[0]));
          for (int g = 1; g < S::kGroups; ++g) {
            p = _mm512_add_epi32(p, _mm512_mullo_epi32(_mm512_load_si512(sums[buf][g][r]),
                                                       _mm512_set1_epi32(f.scale[2 * g])));
          }
        }
        acc[r] = mins.Step(p, f, dx, acc[r]);
      }
      buf ^= 1;
    }
    for (int r = 0; r < 16; ++r) _mm512_store_ps(partial[a][r], acc[r]);
  }
  for (int r = 0; r < 16; ++r) {
    __m512 acc[8];
    for (int a = 0; a < 8; ++a) acc[a] = _mm512_load_ps(partial[a][r]);
    _mm512_storeu_ps(out + 16 * r, SumAccumulators16(acc));
  }
}
#undef TANDEM_AMX_GROUP

// Rows n0 … n1 of W against the lane tiles of x: up to kDecoded weight rows decoded at
// a time, then each tile against them — AMX: 16 rows at a time (a last run of fewer
// computes rows past it that nobody reads); VNNI and AVX2: runs of kRows (then 4, 2, 1) —
// so that a tile's outputs go out as whole lines of each row of x.
enum class LanePath { kAvx2, kVnni, kAmx };

template <GgmlType T, LanePath P>
TANDEM_AVX2 void LaneRange(const QuantizedRows& x, const WeightMatrix& w, float* out, int64_t n0,
                           int64_t n1) {
  constexpr int kRows = P == LanePath::kAvx2 ? 4 : 8, kDecoded = 32;
  // AMX multiplies the quants as they are (signed by signed, or the min types' unsigned
  // by signed), so nothing is added to them.
  constexpr int kShift = P == LanePath::kAmx ? -1 : LaneShift<P == LanePath::kVnni>(T);
  const int64_t m = x.rows, n = w.rows, nblocks = w.cols / (ChunksPerBlock(T) * kQ8Block);
  const size_t rb = w.RowBytes();
  thread_local std::vector<LaneBlock<T>> buffer;  // grows to the widest matrix, then reused
  if (buffer.size() < static_cast<size_t>(kDecoded * nblocks)) {
    buffer.resize(static_cast<size_t>(kDecoded * nblocks));
  }
  // The plane types' blocks as AMX reads them (LaneTileAmx).
  thread_local std::vector<PlaneBlock> planes;
  if constexpr (P == LanePath::kAmx && AmxPlanes(T)) {
    if (planes.size() < static_cast<size_t>(kDecoded * nblocks)) {
      planes.resize(static_cast<size_t>(kDecoded * nblocks));
    }
  }
  if constexpr (P == LanePath::kAmx) ConfigureAmx<T>();
  alignas(64) float tile_out[kDecoded * 16];
  for (int64_t j = n0; j < n1; j += kDecoded) {
    const int nt = static_cast<int>(std::min<int64_t>(kDecoded, n1 - j));
    const LaneBlock<T>* rows[kDecoded];
    for (int t = 0; t < nt; ++t) {
      DecodeLaneRow<T, kShift>(w.data + (j + t) * rb, nblocks, buffer.data() + t * nblocks);
      rows[t] = buffer.data() + t * nblocks;
    }
    if constexpr (P == LanePath::kAmx && AmxPlanes(T)) {
      for (int64_t b = 0; b < nt * nblocks; ++b) {
        SplitPlanes(buffer[static_cast<size_t>(b)], PlaneShift(T), &planes[static_cast<size_t>(b)]);
      }
    }
    for (int64_t tile = 0; tile < x.lane_tiles; ++tile) {
      if constexpr (P == LanePath::kAmx) {
        const AmxBlock<T>* blocks;
        if constexpr (AmxPlanes(T)) {
          blocks = planes.data();
        } else {
          blocks = buffer.data();
        }
        for (int r0 = 0; r0 < nt; r0 += 16) {
          LaneTileAmx<T>(x, tile, blocks + r0 * nblocks, nblocks, tile_out + 16 * r0);
        }
      }
      for (int r0 = 0; P != LanePath::kAmx && r0 < nt;) {
        const int left = nt - r0;
        const int run = left >= kRows ? kRows : left >= 4 ? 4 : left >= 2 ? 2 : 1;
        const LaneBlock<T>* const* rr = rows + r0;
        float* o = tile_out + 16 * r0;
        if constexpr (P == LanePath::kVnni) {
          if (run == 8) LaneTileVnni<T, 8>(x, tile, rr, nblocks, o);
          if (run == 4) LaneTileVnni<T, 4>(x, tile, rr, nblocks, o);
          if (run == 2) LaneTileVnni<T, 2>(x, tile, rr, nblocks, o);
          if (run == 1) LaneTileVnni<T, 1>(x, tile, rr, nblocks, o);
        } else {
          if (run == 4) LaneTileAvx2<T, 4>(x, tile, rr, nblocks, o);
          if (run == 2) LaneTileAvx2<T, 2>(x, tile, rr, nblocks, o);
          if (run == 1) LaneTileAvx2<T, 1>(x, tile, rr, nblocks, o);
        }
        r0 += run;
      }
      // tile_out [weight row][row of x] into out [row of x][weight row], eight at a time.
      const int64_t live = std::min<int64_t>(16, m - 16 * tile);
      const __m256i stride = _mm256_setr_epi32(0, 16, 32, 48, 64, 80, 96, 112);
      for (int64_t t = 0; t < live; ++t) {
        float* o = out + (16 * tile + t) * n + j;
        int r = 0;
        for (; r + 8 <= nt; r += 8) {
          _mm256_storeu_ps(o + r, _mm256_i32gather_ps(tile_out + 16 * r + t, stride, 4));
        }
        for (; r < nt; ++r) o[r] = tile_out[16 * r + t];
      }
    }
  }
  if constexpr (P == LanePath::kAmx) ReleaseAmx();
}

// ---------------------------------------------------------------------------------
// Ranges of weight rows.

// Where AMX beats the VNNI tiles (matmul_bench, one core, a 4096 × 2048 matrix): the
// blocks of 32 and IQ4_XS from kQ8LaneRows rows; Q4_K and Q5_K from two tiles of x (their
// planes are made once per 16 weight rows); never the types with a scale per 16 weights
// (Q6_K, Q3_K, Q2_K: their 16 groups a block cost as much as the VNNI tile).
constexpr bool UseAmx(GgmlType t, int64_t m) {
  return !HasLaneScales(t) && m >= (AmxPlanes(t) ? 32 : kQ8LaneRows);
}

template <GgmlType T>
TANDEM_AVX2 void RangeAvx2(const QuantizedRows& x, const WeightMatrix& w, float* out, int64_t n0,
                           int64_t n1) {
  if (x.lane_tiles > 0) {
    if constexpr (UseAmx(T, kQ8SuperBlock)) {
      if (UseAmx(T, x.rows) && HaveAmxInt8())
        return LaneRange<T, LanePath::kAmx>(x, w, out, n0, n1);
    }
    if (HaveAvx512Vnni()) return LaneRange<T, LanePath::kVnni>(x, w, out, n0, n1);
    return LaneRange<T, LanePath::kAvx2>(x, w, out, n0, n1);
  }
  // Decode, and batches below kQ8LaneRows: each weight row decoded on the fly against
  // every row of x in turn.
  const size_t rb = w.RowBytes();
  const int64_t m = x.rows, n = w.rows;
  if constexpr (Pairs(T)) {
    const int64_t nb = w.cols / kQ8Block;
    thread_local std::vector<PairedRow> paired;  // grows to the most rows, then reused
    if (paired.size() < static_cast<size_t>(m)) paired.resize(static_cast<size_t>(m));
    for (int64_t i = 0; i < m; ++i) PairRow(x, i, nb, &paired[static_cast<size_t>(i)]);
    for (int64_t j = n0; j < n1; ++j) {
      for (int64_t i = 0; i < m; ++i) {
        out[i * n + j] =
            RowDotPairsAvx2<T>(x, paired[static_cast<size_t>(i)], i, w.data + j * rb, nb);
      }
    }
    return;
  }
  for (int64_t j = n0; j < n1; ++j) {
    for (int64_t i = 0; i < m; ++i) {
      if constexpr (ChunksPerBlock(T) == 1) {
        out[i * n + j] = RowDot32Avx2<T>(x, i, w.data + j * rb, w.cols / kQ8Block);
      } else {
        out[i * n + j] = RowDot256Avx2<T>(x, i, w.data + j * rb, w.cols / kQ8SuperBlock);
      }
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
    TANDEM_Q8_CASE(MXFP4)
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
  const int64_t k = out->cols, nd = k / out->block, nb = k / kQ8Block;
  int8_t* q = out->q.data() + i * k;
  float* d = out->d.data() + i * nd;
  if (HaveAvx2Fma()) {
    QuantizeRowAvx2(x + i * k, k, out->block, q, d);
  } else {
    for (int64_t b = 0; b < nd; ++b) {
      QuantizeBlock(x + i * k + b * out->block, out->block, q + b * out->block, d + b);
    }
  }
  FillSums(q, k, out->block_sums.data() + i * nb, out->sums16.data() + i * nb * 2);
}

void Prepare(QuantizedRows* out, int64_t m, int64_t k, int64_t block) {
  TANDEM_CHECK((block == kQ8Block || block == kQ8SuperBlock) && k % block == 0);
  out->lane_tiles = 0;
  out->rows = m;
  out->cols = k;
  out->block = block;
  if (out->q.size() < static_cast<size_t>(m * k)) out->q.resize(static_cast<size_t>(m * k));
  const size_t blocks = static_cast<size_t>(m * (k / kQ8Block));
  if (out->d.size() < blocks) out->d.resize(blocks);
  if (out->block_sums.size() < blocks) out->block_sums.resize(blocks);
  if (out->sums16.size() < 2 * blocks) out->sums16.resize(2 * blocks);
}

// The header's lane layout of x's rows, from its quants, sums and scales.
void FillLanes(QuantizedRows* x) {
  const int64_t m = x->rows, k = x->cols, nsb = k / x->block, tiles = (m + 15) / 16;
  if (x->lanes.size() < static_cast<size_t>(tiles * k * 16)) {
    x->lanes.resize(static_cast<size_t>(tiles * k * 16));
    x->lane_sums.resize(static_cast<size_t>(tiles * (k / 16) * 16));
  }
  if (x->lane_d.size() < static_cast<size_t>(tiles * nsb * 16)) {
    x->lane_d.resize(static_cast<size_t>(tiles * nsb * 16));
  }
  // Every row of the last tile, those past m as zero rows (quants, sums and d all 0).
  for (int64_t i = 0; i < tiles * 16; ++i) {
    const int64_t tile = i / 16, t = i % 16;
    if (i >= m) {
      for (int64_t g = 0; g < k / 4; ++g) {
        std::memset(x->lanes.data() + ((tile * (k / 4) + g) * 16 + t) * 4, 0, 4);
      }
      for (int64_t h = 0; h < k / 16; ++h) {
        x->lane_sums[static_cast<size_t>((tile * (k / 16) + h) * 16 + t)] = 0;
      }
      for (int64_t sb = 0; sb < nsb; ++sb)
        x->lane_d[static_cast<size_t>((tile * nsb + sb) * 16 + t)] = 0;
      continue;
    }
    const int8_t* q = x->q.data() + i * k;
    const int16_t* sums16 = x->sums16.data() + i * (k / 16);
    for (int64_t g = 0; g < k / 4; ++g) {
      std::memcpy(x->lanes.data() + ((tile * (k / 4) + g) * 16 + t) * 4, q + 4 * g, 4);
    }
    for (int64_t h = 0; h < k / 16; ++h) {
      x->lane_sums[static_cast<size_t>((tile * (k / 16) + h) * 16 + t)] = sums16[h];
    }
    for (int64_t sb = 0; sb < nsb; ++sb) {
      x->lane_d[static_cast<size_t>((tile * nsb + sb) * 16 + t)] =
          x->d[static_cast<size_t>(i * nsb + sb)];
    }
  }
  x->lane_tiles = tiles;
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
    case GgmlType::kMXFP4:
      return true;
    default:
      return ChunksPerBlock(type) == 8;  // Q2_K … Q6_K, IQ4_XS
  }
}

int64_t Q8ActivationBlock(GgmlType type) {
  return ChunksPerBlock(type) == 8 ? kQ8SuperBlock : kQ8Block;
}

const char* MatMulQ8Isa() {
  return HaveAmxInt8()      ? "amx"
         : HaveAvx512Vnni() ? "avx512vnni"
         : HaveAvx2Fma()    ? "avx2"
                            : "generic";
}

void QuantizeRowsQ8Reference(const float* x, int64_t m, int64_t k, QuantizedRows* out,
                             int64_t block) {
  Prepare(out, m, k, block);
  const int64_t nd = k / block, nb = k / kQ8Block;
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t b = 0; b < nd; ++b) {
      QuantizeBlock(x + i * k + b * block, block, out->q.data() + i * k + b * block,
                    out->d.data() + i * nd + b);
    }
    FillSums(out->q.data() + i * k, k, out->block_sums.data() + i * nb,
             out->sums16.data() + i * nb * 2);
  }
  if (m >= kQ8LaneRows) FillLanes(out);
}

void QuantizeRowsQ8(const float* x, int64_t m, int64_t k, QuantizedRows* out, ThreadPool* pool,
                    int64_t block) {
  Prepare(out, m, k, block);
  auto rows = [&](int64_t r0, int64_t r1, int) {
    for (int64_t i = r0; i < r1; ++i) QuantizeRow(x, i, out);
  };
  if (pool == nullptr || m < 4) {
    rows(0, m, 0);
  } else {
    pool->ParallelFor(m, rows, 1);
  }
  if (m >= kQ8LaneRows && HaveAvx2Fma()) FillLanes(out);
}

namespace {
void CheckShapes(const QuantizedRows& x, const WeightMatrix& w) {
  TANDEM_CHECK(Q8Supports(w.type) && w.cols == x.cols &&
               w.cols % model::Traits(w.type).block_size == 0 &&
               x.block == Q8ActivationBlock(w.type));
}
}  // namespace

void MatMulQ8Reference(const QuantizedRows& x, const WeightMatrix& w, float* out) {
  CheckShapes(x, w);
  RangeGeneric(x, w, out, 0, w.rows);
}

void MatMulQ8(const QuantizedRows& x, const WeightMatrix& w, float* out, ThreadPool* pool) {
  CheckShapes(x, w);
  auto run = [&](int64_t b, int64_t e, int) { Range(x, w, out, b, e); };
  if (pool == nullptr) return run(0, w.rows, 0);
  pool->ParallelFor(w.rows, run, 4);
}

void MatMulQ8Group(const float* x, int64_t m, std::initializer_list<const WeightMatrix*> ws,
                   std::initializer_list<float* const*> outs, ThreadPool* pool) {
  // One parallel loop over the rows of every matrix, as MatMulGroup splits them; x
  // quantized once in each activation block the group's types need.
  const MatrixGroup group(ws, outs);
  TANDEM_CHECK(group.n > 0);
  bool need32 = false, need256 = false;
  for (int i = 0; i < group.n; ++i) {
    TANDEM_CHECK(Q8Supports(group.w[i]->type));
    (Q8ActivationBlock(group.w[i]->type) == kQ8Block ? need32 : need256) = true;
  }
  // This thread's buffers (grown to the largest pass, then reused), also where the
  // pool's threads read them.
  thread_local QuantizedRows rows32, rows256;
  const int64_t k = group.w[0]->cols;
  if (need32) QuantizeRowsQ8(x, m, k, &rows32, pool, kQ8Block);
  if (need256) QuantizeRowsQ8(x, m, k, &rows256, pool, kQ8SuperBlock);
  if (m <= 0 || group.rows() == 0) return;
  QuantizedRows* q32 = &rows32;
  QuantizedRows* q256 = &rows256;
  auto run = [&](int64_t b, int64_t e, int) {
    group.Split(b, e, [&](const WeightMatrix& w, float* o, int64_t lo, int64_t hi) {
      Range(Q8ActivationBlock(w.type) == kQ8Block ? *q32 : *q256, w, o, lo, hi);
    });
  };
  if (pool == nullptr) return run(0, group.rows(), 0);
  pool->ParallelFor(group.rows(), run, 4);
}

void MatMulJobs(std::span<const MatMulJob> jobs, bool q8, ThreadPool* pool) {
  const size_t n = jobs.size();
  // This thread's quantized inputs (grown to the largest batch of jobs, then reused).
  thread_local std::vector<std::unique_ptr<QuantizedRows>> quantized;
  std::vector<const QuantizedRows*> qx(n, nullptr);
  std::vector<int64_t> start(n + 1, 0);
  size_t used = 0;
  int64_t most_m = 0;
  for (size_t i = 0; i < n; ++i) {
    const MatMulJob& j = jobs[i];
    start[i + 1] = start[i] + j.w->rows;
    most_m = std::max(most_m, j.m);
    if (!q8 || !Q8Supports(j.w->type) || j.w->cols % kQ8Block != 0) {
      TANDEM_CHECK(MatMulSupports(j.w->type));
      continue;
    }
    const int64_t block = Q8ActivationBlock(j.w->type);
    for (size_t p = 0; p < i && qx[i] == nullptr; ++p) {
      if (qx[p] != nullptr && jobs[p].x == j.x && jobs[p].m == j.m && qx[p]->block == block &&
          qx[p]->cols == j.w->cols) {
        qx[i] = qx[p];
      }
    }
    if (qx[i] != nullptr) continue;
    if (used == quantized.size()) quantized.push_back(std::make_unique<QuantizedRows>());
    QuantizedRows* q = quantized[used++].get();
    QuantizeRowsQ8(j.x, j.m, j.w->cols, q, pool, block);
    qx[i] = q;
  }
  if (start[n] == 0) return;
  auto run = [&](int64_t b, int64_t e, int) {
    size_t i =
        static_cast<size_t>(std::upper_bound(start.begin(), start.end(), b) - start.begin()) - 1;
    for (; i < n && start[i] < e; ++i) {
      const int64_t lo = std::max(b, start[i]) - start[i],
                    hi = std::min(e, start[i + 1]) - start[i];
      if (lo >= hi || jobs[i].m <= 0) continue;
      if (qx[i] != nullptr) {
        Range(*qx[i], *jobs[i].w, jobs[i].out, lo, hi);
      } else {
        MatMulRows(jobs[i].x, jobs[i].m, *jobs[i].w, jobs[i].out, lo, hi);
      }
    }
  };
  if (pool == nullptr) return run(0, start[n], 0);
  pool->ParallelFor(start[n], run, MatMulGrain(most_m));
}

}  // namespace tandem::kernels
