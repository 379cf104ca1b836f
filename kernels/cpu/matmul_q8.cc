#include "kernels/cpu/matmul_q8.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>

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
      u.d = HalfAt(b);
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

// A row's sums of each four quants and of each 32 (exact integers in float).
void FillSums(const int8_t* q, int64_t k, float* sums, float* block_sums) {
  for (int64_t b = 0; b < k / kQ8Block; ++b) {
    int32_t total = 0;
    for (int l = 0; l < 8; ++l) {
      const int8_t* f = q + b * kQ8Block + 4 * l;
      const int32_t s = f[0] + f[1] + f[2] + f[3];
      sums[8 * b + l] = static_cast<float>(s);
      total += s;
    }
    block_sums[b] = static_cast<float>(total);
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
// The scalar statement (MatMulQ8Reference, and the path of machines without AVX2).

// The blocks of 32: a chunk's lanes into the 16 float lanes, chunk by chunk.
void RangeGeneric32(const QuantizedRows& x, const WeightMatrix& w, float* out, int64_t n0,
                    int64_t n1) {
  const int64_t nb = w.cols / kQ8Block, bb = BlockBytes(w.type);
  for (int64_t i = 0; i < x.rows; ++i) {
    const int8_t* q = x.q.data() + i * x.cols;
    for (int64_t j = n0; j < n1; ++j) {
      const uint8_t* row = w.data + j * w.RowBytes();
      float acc[16] = {};
      for (int64_t b = 0; b < nb; ++b) {
        const IntChunk u = ChunkAt(w.type, row + b * bb, 0);
        const float dx = x.d[static_cast<size_t>(i * nb + b)];
        const float s = u.d * dx, sm = u.dmin * dx;
        for (int l = 0; l < 8; ++l) {
          int32_t p = 0, qsum = 0;
          for (int e = 4 * l; e < 4 * l + 4; ++e) {
            p += u.w[e] * q[b * kQ8Block + e];
            qsum += q[b * kQ8Block + e];
          }
          float& a = acc[8 * (b & 1) + l];
          a = std::fma(static_cast<float>(p), s, a);
          if (HasMin(w.type)) a = std::fma(static_cast<float>(qsum), sm, a);
        }
      }
      out[i * w.rows + j] = SumLanes(acc);
    }
  }
}

// The super-blocks of 256: a super-block's products and mins summed as integers, then
// one float step (two with a min) per super-block.
void RangeGeneric256(const QuantizedRows& x, const WeightMatrix& w, float* out, int64_t n0,
                     int64_t n1) {
  const int64_t nsb = w.cols / kQ8SuperBlock, bb = BlockBytes(w.type);
  for (int64_t i = 0; i < x.rows; ++i) {
    const int8_t* q = x.q.data() + i * x.cols;
    for (int64_t j = n0; j < n1; ++j) {
      const uint8_t* row = w.data + j * w.RowBytes();
      float acc = 0;
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
        acc = std::fma(static_cast<float>(products), d * dx, acc);
        if (HasMin(w.type)) acc = std::fma(static_cast<float>(mins), dmin * dx, acc);
      }
      out[i * w.rows + j] = acc;
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

// A super-block's factors, unpacked once for its eight chunks: d and M (ChunkAt's D and
// M), the integer scales c_h as ScaleWords (Scale(c): chunk c's madd operand), Q2_K's
// mins n_h the same way, and Q4_K/Q5_K's chunk mins as floats.
template <GgmlType T>
struct alignas(32) SuperFactors {
  float d = 0, dmin = 0;
  __m256i words;
  __m256i min_words;  // Q2_K
  __m256 chunk_min;   // Q4_K, Q5_K: m_c in lane c

  TANDEM_AVX2_INLINE __m256i Scale(int c) const { return ChunkWord(words, c); }
  TANDEM_AVX2_INLINE __m256i Min(int c) const { return ChunkWord(min_words, c); }

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
      uint16_t high;
      std::memcpy(&high, b + 2, 2);
      alignas(16) int8_t ls[16] = {};
      for (int c = 0; c < 8; ++c) {
        ls[c] = static_cast<int8_t>(
            (((b[4 + c / 2] >> (4 * (c % 2))) & 15) | (((high >> (2 * c)) & 3) << 4)) - 32);
      }
      scales = _mm_load_si128(reinterpret_cast<const __m128i*>(ls));
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
    if constexpr (T == GgmlType::kQ2_K) min_words = ScaleWords(mins, kPerHalf);
    // Kept as formed: GCC would otherwise push each chunk's shuffle back through the
    // widening (two instructions a chunk instead of one).
    __asm__("" : "+x"(words));
    if constexpr (T == GgmlType::kQ2_K) __asm__("" : "+x"(min_words));
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
constexpr int64_t kPrefetchAhead = 1024;

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

// ---------------------------------------------------------------------------------
// AVX2, the blocks of 32.

// One block of x's row (q, its 32 quants; sums, its lane sums) against a weight block,
// into `acc` (the caller names the even or the odd set at compile time, so that it stays
// in a register); fd = D · d_x and fm = M · d_x, rounded once each.
template <GgmlType T>
TANDEM_AVX2_INLINE void BlockStep(const int8_t* q, const float* sums, const uint8_t* block,
                                  float fd, float fm, __m256& acc) {
  const __m256i qv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q));
  const __m256 p =
      _mm256_cvtepi32_ps(LaneProducts<T>(ChunkBytes<T>(block, 0), qv, _mm256_set1_epi16(1)));
  acc = _mm256_fmadd_ps(p, _mm256_set1_ps(fd), acc);
  if constexpr (HasMin(T)) acc = _mm256_fmadd_ps(_mm256_loadu_ps(sums), _mm256_set1_ps(fm), acc);
}

// Blocks b … nb − 1 of row i against a weight row one by one (each block into its
// parity's set), then the lanes summed: the end of a decode row.
template <GgmlType T>
TANDEM_AVX2_INLINE float FinishRow32(const QuantizedRows& x, int64_t i, const uint8_t* wrow,
                                     int64_t nb, int64_t b, __m256 even, __m256 odd) {
  constexpr int64_t bb = model::TypeBytes(T);
  const int8_t* q = x.q.data() + i * x.cols;
  const float* dx = x.d.data() + i * nb;
  const float* sums = x.sums.data() + i * nb * 8;
  for (; b < nb; ++b) {
    const uint8_t* block = wrow + b * bb;
    const float fd = Half(block) * dx[b], fm = HasMin(T) ? Half(block + 2) * dx[b] : 0.0f;
    if (b % 2 == 0) {
      BlockStep<T>(q + b * kQ8Block, sums + b * 8, block, fd, fm, even);
    } else {
      BlockStep<T>(q + b * kQ8Block, sums + b * 8, block, fd, fm, odd);
    }
  }
  return ReduceAdd256x2(even, odd);
}

// out = row i of x · one weight row (decode: one weight stream per thread), two
// accumulators (lanes 0–7 for even blocks, 8–15 for odd ones) summed by ReduceAdd256x2.
// Blocks eight at a time: their f16 scales (and mins) gathered and times d_x in one
// vector each, then the blocks two by two.
template <GgmlType T>
TANDEM_AVX2 float RowDot32Avx2(const QuantizedRows& x, int64_t i, const uint8_t* wrow, int64_t nb) {
  constexpr int64_t bb = model::TypeBytes(T);
  const int8_t* q = x.q.data() + i * x.cols;
  const float* dx = x.d.data() + i * nb;
  const float* sums = x.sums.data() + i * nb * 8;
  __m256 even = _mm256_setzero_ps(), odd = _mm256_setzero_ps();
  int64_t b = 0;
  for (; b + 8 <= nb; b += 8) {
    const uint8_t* group = wrow + b * bb;
    PrefetchAhead<8 * bb>(group);
    alignas(32) float fd[8], fm[8];
    const __m256 dxs = _mm256_loadu_ps(dx + b);
    _mm256_store_ps(fd, _mm256_mul_ps(Halves8(group, bb), dxs));
    if constexpr (HasMin(T)) _mm256_store_ps(fm, _mm256_mul_ps(Halves8(group + 2, bb), dxs));
#pragma GCC unroll 4
    for (int c = 0; c < 8; c += 2) {
      BlockStep<T>(q + (b + c) * kQ8Block, sums + (b + c) * 8, group + c * bb, fd[c],
                   HasMin(T) ? fm[c] : 0.0f, even);
      BlockStep<T>(q + (b + c + 1) * kQ8Block, sums + (b + c + 1) * 8, group + (c + 1) * bb,
                   fd[c + 1], HasMin(T) ? fm[c + 1] : 0.0f, odd);
    }
  }
  return FinishRow32<T>(x, i, wrow, nb, b, even, odd);
}

// Decode of the nibble types (Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL) two blocks at a time. One
// 32-byte vector holds the first 16 quants of blocks b and b + 1 ("low"), another their
// last 16 ("high") — how the nibbles lie, so a shift and two masks unpack both blocks —
// and the activations are laid out the same way once per call (PairedRow). Low's madd
// gives P_0…3 of b then of b + 1, high's P_4…7: accumulator `lo` holds lanes 0–3 of the
// even set and lanes 0–3 of the odd one, `hi` lanes 4–7 of each, so every lane takes
// RowDot32Avx2's steps in its order, and the two sets are put back together before the
// same reduction. Q4_0 and Q5_0 multiply their unsigned quants u (w = u − 8 or u − 16)
// and take the offset off in float, P_l = float(Σ u·q) − off · s_l: integers below 2²⁴,
// so exactly the P_l of the signed product.
struct PairedRow {
  std::vector<int8_t> q;  // [nb / 2][low 32, high 32]
  std::vector<float> s;   // [nb / 2][lanes 0–3 of b, of b + 1; lanes 4–7 of b, of b + 1]
};

TANDEM_AVX2 void PairRow(const QuantizedRows& x, int64_t i, int64_t nb, PairedRow* out) {
  const int64_t np = nb / 2;
  if (out->q.size() < static_cast<size_t>(np * 64)) out->q.resize(static_cast<size_t>(np * 64));
  if (out->s.size() < static_cast<size_t>(np * 16)) out->s.resize(static_cast<size_t>(np * 16));
  const int8_t* q = x.q.data() + i * x.cols;
  const float* sums = x.sums.data() + i * nb * 8;
  for (int64_t p = 0; p < np; ++p) {
    const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + 64 * p));
    const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + 64 * p + 32));
    auto* dq = reinterpret_cast<__m256i*>(out->q.data() + 64 * p);
    _mm256_storeu_si256(dq, _mm256_permute2x128_si256(a, b, 0x20));
    _mm256_storeu_si256(dq + 1, _mm256_permute2x128_si256(a, b, 0x31));
    const __m256 sa = _mm256_loadu_ps(sums + 16 * p), sb = _mm256_loadu_ps(sums + 16 * p + 8);
    _mm256_storeu_ps(out->s.data() + 16 * p, _mm256_permute2f128_ps(sa, sb, 0x20));
    _mm256_storeu_ps(out->s.data() + 16 * p + 8, _mm256_permute2f128_ps(sa, sb, 0x31));
  }
}

constexpr bool Pairs(GgmlType t) {
  return t == GgmlType::kQ4_0 || t == GgmlType::kQ4_1 || t == GgmlType::kQ5_0 ||
         t == GgmlType::kQ5_1 || t == GgmlType::kIQ4_NL;
}
// What Q4_0 and Q5_0 take off their unsigned quants.
constexpr int Offset(GgmlType t) {
  return t == GgmlType::kQ4_0 ? 8 : t == GgmlType::kQ5_0 ? 16 : 0;
}

// Blocks b (at w0) and b + 1 (at w1) as low and high: unsigned quants (Q4_0's and Q5_0's
// before their offset), or IQ4_NL's signed levels.
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
  }
}

// Blocks b and b + 1 against their activations (q: PairedRow's 64 bytes, s: its 16 sums)
// into lo and hi; fd (fm) = D · d_x (M · d_x) of block b in lanes 0–3, of b + 1 in 4–7.
template <GgmlType T>
TANDEM_AVX2_INLINE void PairStep(const int8_t* q, const float* s, const uint8_t* w0,
                                 const uint8_t* w1, __m256 fd, __m256 fm, __m256& lo, __m256& hi) {
  __m256i wl, wh;
  PairBytes<T>(w0, w1, wl, wh);
  const __m256i ql = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q));
  const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + 32));
  __m256i pl, ph;
  if constexpr (T == GgmlType::kIQ4_NL) {
    pl = _mm256_maddubs_epi16(_mm256_sign_epi8(wl, wl), _mm256_sign_epi8(ql, wl));
    ph = _mm256_maddubs_epi16(_mm256_sign_epi8(wh, wh), _mm256_sign_epi8(qh, wh));
  } else {
    pl = _mm256_maddubs_epi16(wl, ql);
    ph = _mm256_maddubs_epi16(wh, qh);
  }
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 fl = _mm256_cvtepi32_ps(_mm256_madd_epi16(pl, ones));
  __m256 fh = _mm256_cvtepi32_ps(_mm256_madd_epi16(ph, ones));
  if constexpr (Offset(T) != 0) {
    const __m256 off = _mm256_set1_ps(static_cast<float>(Offset(T)));
    fl = _mm256_fnmadd_ps(_mm256_loadu_ps(s), off, fl);
    fh = _mm256_fnmadd_ps(_mm256_loadu_ps(s + 8), off, fh);
  }
  lo = _mm256_fmadd_ps(fl, fd, lo);
  hi = _mm256_fmadd_ps(fh, fd, hi);
  if constexpr (HasMin(T)) {
    lo = _mm256_fmadd_ps(_mm256_loadu_ps(s), fm, lo);
    hi = _mm256_fmadd_ps(_mm256_loadu_ps(s + 8), fm, hi);
  }
}

// RowDot32Avx2 for the nibble types, two blocks at a time (`paired`: row i of x as
// PairRow lays it out).
template <GgmlType T>
TANDEM_AVX2 float RowDotPairsAvx2(const QuantizedRows& x, const PairedRow& paired, int64_t i,
                                  const uint8_t* wrow, int64_t nb) {
  constexpr int64_t bb = model::TypeBytes(T);
  const float* dx = x.d.data() + i * nb;
  __m256 lo = _mm256_setzero_ps(), hi = _mm256_setzero_ps();
  int64_t b = 0;
  for (; b + 8 <= nb; b += 8) {
    const uint8_t* group = wrow + b * bb;
    PrefetchAhead<8 * bb>(group);
    const __m256 dxs = _mm256_loadu_ps(dx + b);
    const __m256 fd8 = _mm256_mul_ps(Halves8(group, bb), dxs);
    const __m256 fm8 = HasMin(T) ? _mm256_mul_ps(Halves8(group + 2, bb), dxs) : fd8;
#pragma GCC unroll 4
    for (int c = 0; c < 8; c += 2) {
      const __m256i pick = _mm256_setr_epi32(c, c, c, c, c + 1, c + 1, c + 1, c + 1);
      const int64_t p = (b + c) / 2;
      PairStep<T>(paired.q.data() + 64 * p, paired.s.data() + 16 * p, group + c * bb,
                  group + (c + 1) * bb, _mm256_permutevar8x32_ps(fd8, pick),
                  _mm256_permutevar8x32_ps(fm8, pick), lo, hi);
    }
  }
  __m256 even = _mm256_permute2f128_ps(lo, hi, 0x20), odd = _mm256_permute2f128_ps(lo, hi, 0x31);
  return FinishRow32<T>(x, i, wrow, nb, b, even, odd);
}

// A block decoded once for all the rows of a batch (m > 1): its quants, their
// magnitudes (the signed types' maddubs operand) and factors, so that the rows' tiles
// only multiply.
struct alignas(32) DecodedBlock {
  __m256i w, wabs;
  float d, dmin;
};

template <GgmlType T>
TANDEM_AVX2 void DecodeRow32(const uint8_t* row, int64_t nb, DecodedBlock* out) {
  constexpr int64_t bb = model::TypeBytes(T);
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* block = row + b * bb;
    DecodedBlock& o = out[b];
    o.w = ChunkBytes<T>(block, 0);
    o.wabs = _mm256_sign_epi8(o.w, o.w);
    o.d = Half(block);
    o.dmin = HasMin(T) ? Half(block + 2) : 0.0f;
  }
}

// RowDot32Avx2's arithmetic on decoded blocks, MT rows of x × NT weight rows: the even
// blocks in one pass, then the odd ones (each pass's MT × NT accumulators, and the
// operands of a step, fit the 16 registers; both sets at once spilled to the stack).
template <GgmlType T, int MT, int NT>
TANDEM_AVX2 void DecodedTile32Avx2(const QuantizedRows& x, int64_t i0,
                                   const DecodedBlock* const* rows, int64_t nb, float* out,
                                   int64_t ldo) {
  const int8_t* q[MT];
  const float* dx[MT];
  const float* sums[MT];
  for (int i = 0; i < MT; ++i) {
    q[i] = x.q.data() + (i0 + i) * x.cols;
    dx[i] = x.d.data() + (i0 + i) * nb;
    sums[i] = x.sums.data() + (i0 + i) * nb * 8;
  }
  const DecodedBlock* w[NT];
  for (int j = 0; j < NT; ++j) w[j] = rows[j];
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 sets[2][MT][NT];
  for (int parity = 0; parity < 2; ++parity) {
    __m256 acc[MT][NT];
    for (int i = 0; i < MT; ++i) {
      for (int j = 0; j < NT; ++j) acc[i][j] = _mm256_setzero_ps();
    }
    for (int64_t b = parity; b < nb; b += 2) {
      for (int i = 0; i < MT; ++i) {
        const __m256i qv =
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q[i] + b * kQ8Block));
        // d_x in every lane, times each weight block's factors broadcast from memory (the
        // same rounding as the scalar product).
        const __m256 dxv = _mm256_broadcast_ss(dx[i] + b);
        for (int j = 0; j < NT; ++j) {
          const DecodedBlock& c = w[j][b];
          const __m256i pairs = HasMin(T) ? _mm256_maddubs_epi16(c.w, qv)
                                          : _mm256_maddubs_epi16(c.wabs, _mm256_sign_epi8(qv, c.w));
          const __m256 p = _mm256_cvtepi32_ps(_mm256_madd_epi16(pairs, ones));
          acc[i][j] = _mm256_fmadd_ps(p, _mm256_mul_ps(_mm256_broadcast_ss(&c.d), dxv), acc[i][j]);
          if constexpr (HasMin(T)) {
            acc[i][j] =
                _mm256_fmadd_ps(_mm256_loadu_ps(sums[i] + b * 8),
                                _mm256_mul_ps(_mm256_broadcast_ss(&c.dmin), dxv), acc[i][j]);
          }
        }
      }
    }
    for (int i = 0; i < MT; ++i) {
      for (int j = 0; j < NT; ++j) sets[parity][i][j] = acc[i][j];
    }
  }
  for (int i = 0; i < MT; ++i) {
    for (int j = 0; j < NT; ++j) out[i * ldo + j] = ReduceAdd256x2(sets[0][i][j], sets[1][i][j]);
  }
}

// ---------------------------------------------------------------------------------
// AVX2, the super-blocks of 256.

// One chunk of x's row against chunk c of a super-block, into the integer lanes (and
// Q2_K's min lanes).
template <GgmlType T>
TANDEM_AVX2_INLINE void ChunkStep256(const int8_t* q, const uint8_t* block, int c,
                                     const SuperFactors<T>& f, __m256i& lanes, __m256i& mins) {
  const __m256i qv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q));
  lanes = _mm256_add_epi32(lanes, LaneProducts<T>(ChunkBytes<T>(block, c), qv, f.Scale(c)));
  if constexpr (T == GgmlType::kQ2_K) {
    const __m256i qsums = _mm256_maddubs_epi16(_mm256_set1_epi8(1), qv);
    mins = _mm256_add_epi32(mins, _mm256_madd_epi16(qsums, f.Min(c)));
  }
}

// The eight int32 lanes of v added (exact).
TANDEM_AVX2_INLINE int32_t SumInts(__m256i v) {
  __m128i h = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0x4E));
  h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0xB1));
  return _mm_cvtsi128_si32(h);
}

// A super-block's step into the output's accumulator: acc ← fma(float(I), d · d_x, acc)
// with I the lanes' sum, then for the types with a min acc ← fma(float(N), M · d_x,
// acc) with N Q2_K's min lanes summed or Q4_K/Q5_K's Σ_c n_c · S_c (block_sums: x's
// chunk sums S_c, exact floats; products and sums below 2²⁴, so exact too).
template <GgmlType T>
TANDEM_AVX2_INLINE float SuperBlockStep(const SuperFactors<T>& f, float dx, __m256i lanes,
                                        __m256i lane_mins, const float* block_sums, float acc) {
  acc = std::fma(static_cast<float>(SumInts(lanes)), f.d * dx, acc);
  if constexpr (T == GgmlType::kQ2_K) {
    acc = std::fma(static_cast<float>(SumInts(lane_mins)), f.dmin * dx, acc);
  }
  if constexpr (HasChunkMins(T)) {
    const __m256 p = _mm256_mul_ps(_mm256_loadu_ps(block_sums), f.chunk_min);
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(p), _mm256_extractf128_ps(p, 1));
    h = _mm_add_ps(h, _mm_permute_ps(h, 0x4E));
    h = _mm_add_ps(h, _mm_permute_ps(h, 0xB1));
    acc = std::fma(_mm_cvtss_f32(h), f.dmin * dx, acc);
  }
  return acc;
}

template <GgmlType T>
TANDEM_AVX2 float RowDot256Avx2(const QuantizedRows& x, int64_t i, const uint8_t* wrow,
                                int64_t nsb) {
  constexpr int64_t bb = model::TypeBytes(T);
  const int8_t* q = x.q.data() + i * x.cols;
  const float* dx = x.d.data() + i * nsb;
  const float* block_sums = x.block_sums.data() + i * nsb * 8;
  float acc = 0;
  SuperFactors<T> f;
  for (int64_t sb = 0; sb < nsb; ++sb) {
    const uint8_t* block = wrow + sb * bb;
    PrefetchAhead<bb>(block);
    f.Load(block);
    __m256i lanes = _mm256_setzero_si256(), lane_mins = _mm256_setzero_si256();
#pragma GCC unroll 8
    for (int c = 0; c < 8; ++c) {
      ChunkStep256<T>(q + (sb * 8 + c) * kQ8Block, block, c, f, lanes, lane_mins);
    }
    acc = SuperBlockStep<T>(f, dx[sb], lanes, lane_mins, block_sums + sb * 8, acc);
  }
  return acc;
}

// A chunk of a super-block decoded once for all the rows of a batch (its super-block's
// factors are a SuperFactors of their own).
struct alignas(32) DecodedChunk {
  __m256i w, wabs;
  __m256i scale, min;
};

template <GgmlType T>
TANDEM_AVX2 void DecodeRow256(const uint8_t* row, int64_t nsb, DecodedChunk* chunks,
                              SuperFactors<T>* supers) {
  constexpr int64_t bb = model::TypeBytes(T);
  for (int64_t sb = 0; sb < nsb; ++sb) {
    const uint8_t* block = row + sb * bb;
    SuperFactors<T>& f = supers[sb];
    f.Load(block);
    for (int c = 0; c < 8; ++c) {
      DecodedChunk& o = chunks[sb * 8 + c];
      o.w = ChunkBytes<T>(block, c);
      o.wabs = _mm256_sign_epi8(o.w, o.w);
      o.scale = f.Scale(c);
      if constexpr (T == GgmlType::kQ2_K) o.min = f.Min(c);
    }
  }
}

// RowDot256Avx2's arithmetic on decoded chunks, MT rows of x × NT weight rows, the
// integer lanes in registers.
template <GgmlType T, int MT, int NT>
TANDEM_AVX2 void DecodedTile256Avx2(const QuantizedRows& x, int64_t i0,
                                    const DecodedChunk* const* rows,
                                    const SuperFactors<T>* const* supers, int64_t nsb, float* out,
                                    int64_t ldo) {
  float acc[MT][NT] = {};
  for (int64_t sb = 0; sb < nsb; ++sb) {
    __m256i lanes[MT][NT], lane_mins[MT][NT];
    for (int i = 0; i < MT; ++i) {
      for (int j = 0; j < NT; ++j) lanes[i][j] = lane_mins[i][j] = _mm256_setzero_si256();
    }
    // A weight chunk held in registers while it meets the MT rows (integer sums: any
    // order gives the same lanes).
    for (int c = 0; c < 8; ++c) {
      const int64_t b = sb * 8 + c;
      for (int j = 0; j < NT; ++j) {
        const DecodedChunk& dc = rows[j][b];
        const __m256i w = dc.w, wabs = dc.wabs, scale = dc.scale;
        for (int i = 0; i < MT; ++i) {
          const __m256i q = _mm256_loadu_si256(
              reinterpret_cast<const __m256i*>(x.q.data() + (i0 + i) * x.cols + b * kQ8Block));
          const __m256i pairs = HasMin(T) ? _mm256_maddubs_epi16(w, q)
                                          : _mm256_maddubs_epi16(wabs, _mm256_sign_epi8(q, w));
          lanes[i][j] = _mm256_add_epi32(lanes[i][j], _mm256_madd_epi16(pairs, scale));
          if constexpr (T == GgmlType::kQ2_K) {
            const __m256i qsums = _mm256_maddubs_epi16(_mm256_set1_epi8(1), q);
            lane_mins[i][j] = _mm256_add_epi32(lane_mins[i][j], _mm256_madd_epi16(qsums, dc.min));
          }
        }
      }
    }
    for (int i = 0; i < MT; ++i) {
      const float dx = x.d[static_cast<size_t>((i0 + i) * nsb + sb)];
      const float* bs = x.block_sums.data() + ((i0 + i) * nsb + sb) * 8;
      for (int j = 0; j < NT; ++j) {
        acc[i][j] =
            SuperBlockStep<T>(supers[j][sb], dx, lanes[i][j], lane_mins[i][j], bs, acc[i][j]);
      }
    }
  }
  for (int i = 0; i < MT; ++i) {
    for (int j = 0; j < NT; ++j) out[i * ldo + j] = acc[i][j];
  }
}

// ---------------------------------------------------------------------------------
// AVX-512 VNNI, batches (m > 1): the arithmetic above in 512-bit steps — a super-block
// chunk of two weight rows per register, or two blocks of 32 of one row.

#define TANDEM_VNNI \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,fma,f16c")))
#define TANDEM_VNNI_INLINE TANDEM_VNNI __attribute__((always_inline)) inline

TANDEM_VNNI_INLINE __m512i Join(__m256i low, __m256i high) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(low), high, 1);
}
TANDEM_VNNI_INLINE __m512 Join(__m256 low, __m256 high) {
  return _mm512_insertf32x8(_mm512_castps256_ps512(low), high, 1);
}

// What the signed super-block types add to their quants to make them vpdpbusd's
// unsigned operand, as a shift (Q6_K + 32, Q3_K + 4, IQ4_XS + 128), or 0.
constexpr int UnsignedShift256(GgmlType t) {
  return t == GgmlType::kQ6_K ? 5 : t == GgmlType::kQ3_K ? 2 : t == GgmlType::kIQ4_XS ? 7 : -1;
}

// A super-block of one weight row decoded for the lane tiles: its quants made unsigned
// (+ 1 << UnsignedShift256) in k order, the scale c_h of each half, the mins n_h as
// int16 pairs (Q4_K/Q5_K: chunks 2p and 2p + 1 in pair p = 0…3; Q2_K: halves 2p and
// 2p + 1, p = 0…7), D and M.
struct alignas(64) LaneSuperBlock {
  uint8_t u[256];
  int32_t scale[16];
  int32_t min_pairs[8];
  float d, dmin;
};

int32_t Int16Pair(int32_t low, int32_t high) {
  return static_cast<int32_t>((static_cast<uint32_t>(low) & 0xFFFFu) |
                              (static_cast<uint32_t>(high) << 16));
}

template <GgmlType T>
TANDEM_VNNI void DecodeLaneRow(const uint8_t* row, int64_t nsb, LaneSuperBlock* out) {
  constexpr int64_t bb = model::TypeBytes(T);
  constexpr int kShift = UnsignedShift256(T);
  const __m256i offset = _mm256_set1_epi8(kShift < 0 ? 0 : static_cast<char>(1 << kShift));
  for (int64_t sb = 0; sb < nsb; ++sb) {
    const uint8_t* block = row + sb * bb;
    LaneSuperBlock& o = out[sb];
    for (int c = 0; c < 8; ++c) {
      _mm256_store_si256(reinterpret_cast<__m256i*>(o.u + 32 * c),
                         _mm256_add_epi8(ChunkBytes<T>(block, c), offset));
    }
    int32_t mins[16] = {};
    if constexpr (T == GgmlType::kQ4_K || T == GgmlType::kQ5_K) {
      o.d = Half(block);
      o.dmin = -Half(block + 2);
      for (int c = 0; c < 8; ++c) {
        uint8_t sc, m;
        model::KQuantScaleMin(block + 4, c, &sc, &m);
        o.scale[2 * c] = o.scale[2 * c + 1] = sc;
        mins[c] = m;
      }
      for (int p = 0; p < 4; ++p) o.min_pairs[p] = Int16Pair(mins[2 * p], mins[2 * p + 1]);
    } else if constexpr (T == GgmlType::kIQ4_XS) {
      o.d = Half(block);
      uint16_t high;
      std::memcpy(&high, block + 2, 2);
      for (int c = 0; c < 8; ++c) {
        const int ls = ((block[4 + c / 2] >> (4 * (c % 2))) & 15) | (((high >> (2 * c)) & 3) << 4);
        o.scale[2 * c] = o.scale[2 * c + 1] = ls - 32;
      }
    } else {
      for (int c = 0; c < 8; ++c) LaneScales(T, block, c, o.scale + 2 * c, mins + 2 * c);
      if constexpr (T == GgmlType::kQ6_K) o.d = Half(block + 208);
      if constexpr (T == GgmlType::kQ3_K) o.d = Half(block + 108);
      if constexpr (T == GgmlType::kQ2_K) {
        o.d = Half(block + 80);
        o.dmin = -Half(block + 82);
        for (int p = 0; p < 8; ++p) o.min_pairs[p] = Int16Pair(mins[2 * p], mins[2 * p + 1]);
      }
    }
  }
}

// R weight rows against a tile of 16 rows of x (QuantizedRows::lanes), the header's
// super-block arithmetic with each row of x in a lane: acc [R][16] the outputs.
template <GgmlType T, int R>
TANDEM_VNNI void LaneTile256(const QuantizedRows& x, int64_t tile,
                             const LaneSuperBlock* const* rows, int64_t nsb, float* acc_out) {
  constexpr bool kPer16 = HasLaneScales(T);  // a scale per 16 weights, else per 32
  constexpr int kGroups = kPer16 ? 16 : 8, kSteps = kPer16 ? 4 : 8;  // four quants a step
  constexpr int kShift = UnsignedShift256(T);
  const int64_t k = x.cols;
  const int8_t* xq = x.lanes.data() + tile * (k / 4) * 64;
  const int32_t* xs = x.lane_sums.data() + tile * (k / 16) * 16;
  const float* xd = x.lane_d.data() + tile * nsb * 16;
  __m512 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
  for (int64_t sb = 0; sb < nsb; ++sb) {
    __m512i sums[R];
    for (int r = 0; r < R; ++r) sums[r] = _mm512_setzero_si512();
    for (int g = 0; g < kGroups; ++g) {
      __m512i start = _mm512_setzero_si512();
      if constexpr (kShift >= 0) {
        // −offset · the group's quant sum of each row.
        const int32_t* s = xs + (sb * 16 + (kPer16 ? g : 2 * g)) * 16;
        __m512i total = _mm512_loadu_si512(s);
        if constexpr (!kPer16) total = _mm512_add_epi32(total, _mm512_loadu_si512(s + 16));
        start = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(total, kShift));
      }
      __m512i part[R];
      for (int r = 0; r < R; ++r) part[r] = start;
#pragma GCC unroll 8
      for (int st = 0; st < kSteps; ++st) {
        const int e = (g * kSteps + st) * 4;  // the step's first weight in the super-block
        const __m512i xv = _mm512_loadu_si512(xq + (sb * 64 + e / 4) * 64);
        for (int r = 0; r < R; ++r) {
          int32_t w4;
          std::memcpy(&w4, rows[r][sb].u + e, 4);
          part[r] = _mm512_dpbusd_epi32(part[r], _mm512_set1_epi32(w4), xv);
        }
      }
      for (int r = 0; r < R; ++r) {
        sums[r] = _mm512_add_epi32(
            sums[r],
            _mm512_mullo_epi32(part[r], _mm512_set1_epi32(rows[r][sb].scale[kPer16 ? g : 2 * g])));
      }
    }
    const __m512 dx = _mm512_loadu_ps(xd + sb * 16);
    // Q4_K/Q5_K: the chunk sums S_c in int16 pairs (2p, 2p + 1); Q2_K: the half sums.
    constexpr int kMinPairs = T == GgmlType::kQ2_K ? 8 : HasChunkMins(T) ? 4 : 0;
    __m512i pairs[kMinPairs > 0 ? kMinPairs : 1];
    for (int p = 0; p < kMinPairs; ++p) {
      const int32_t* s = xs + sb * 16 * 16;
      __m512i lo, hi;
      if constexpr (T == GgmlType::kQ2_K) {
        lo = _mm512_loadu_si512(s + (2 * p) * 16);
        hi = _mm512_loadu_si512(s + (2 * p + 1) * 16);
      } else {
        lo = _mm512_add_epi32(_mm512_loadu_si512(s + (4 * p) * 16),
                              _mm512_loadu_si512(s + (4 * p + 1) * 16));
        hi = _mm512_add_epi32(_mm512_loadu_si512(s + (4 * p + 2) * 16),
                              _mm512_loadu_si512(s + (4 * p + 3) * 16));
      }
      pairs[p] = _mm512_or_si512(_mm512_and_si512(lo, _mm512_set1_epi32(0xFFFF)),
                                 _mm512_slli_epi32(hi, 16));
    }
    for (int r = 0; r < R; ++r) {
      const LaneSuperBlock& f = rows[r][sb];
      acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sums[r]), _mm512_mul_ps(_mm512_set1_ps(f.d), dx),
                               acc[r]);
      if constexpr (kMinPairs > 0) {
        __m512i n = _mm512_setzero_si512();
        for (int p = 0; p < kMinPairs; ++p) {
          n = _mm512_dpwssd_epi32(n, pairs[p], _mm512_set1_epi32(f.min_pairs[p]));
        }
        acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(n), _mm512_mul_ps(_mm512_set1_ps(f.dmin), dx),
                                 acc[r]);
      }
    }
  }
  for (int r = 0; r < R; ++r) _mm512_storeu_ps(acc_out + 16 * r, acc[r]);
}

// What the blocks of 32 add to their quants to make them dpbusd's unsigned operand (and
// take off again through the activations' lane sums): Q8_0's and IQ4_NL's signed bytes
// + 128, Q4_0's and Q5_0's stored unsigned quants.
constexpr int Unsigned32(GgmlType t) {
  return t == GgmlType::kQ8_0 || t == GgmlType::kIQ4_NL ? 128 : Offset(t);
}

// Blocks 2p and 2p + 1 decoded once for a batch: their quants + Unsigned32 as bytes,
// their D (and M) each in its block's eight lanes.
struct alignas(64) DecodedBlockPair {
  __m512i a;
  __m512 d, dmin;
};

template <GgmlType T>
TANDEM_VNNI void DecodeRowPairs32(const uint8_t* row, int64_t nb, DecodedBlockPair* pairs) {
  constexpr int64_t bb = model::TypeBytes(T);
  const __m512i offset = _mm512_set1_epi8(static_cast<char>(Unsigned32(T)));
  for (int64_t b = 0; b < nb; b += 2) {
    const uint8_t* w0 = row + b * bb;
    const bool two = b + 1 < nb;  // an odd last block pairs with nothing (masked in the tile)
    const uint8_t* w1 = two ? w0 + bb : w0;
    DecodedBlockPair& o = pairs[b / 2];
    o.a = _mm512_add_epi8(Join(ChunkBytes<T>(w0, 0), ChunkBytes<T>(w1, 0)), offset);
    o.d = Join(_mm256_set1_ps(Half(w0)), _mm256_set1_ps(Half(w1)));
    if constexpr (HasMin(T))
      o.dmin = Join(_mm256_set1_ps(Half(w0 + 2)), _mm256_set1_ps(Half(w1 + 2)));
  }
}

// DecodedTile32Avx2's arithmetic, MT rows of x × NT weight rows, two blocks a step: the
// 16 float lanes are the even set (lanes 0–7, block 2p) and the odd one (8–15, block
// 2p + 1), so one fma takes both blocks' steps. P_l = dpbusd(w + u, q) − u · s_l, u =
// Unsigned32 (the subtraction first, as dpbusd's start value: exact integers).
template <GgmlType T, int MT, int NT>
TANDEM_VNNI void PairTile32(const QuantizedRows& x, int64_t i0, const DecodedBlockPair* const* rows,
                            int64_t nb, float* out, int64_t ldo) {
  __m512 acc[MT][NT];
  for (int i = 0; i < MT; ++i) {
    for (int j = 0; j < NT; ++j) acc[i][j] = _mm512_setzero_ps();
  }
  const int64_t np = (nb + 1) / 2;
  const __m512 minus_u = _mm512_set1_ps(-static_cast<float>(Unsigned32(T)));
  for (int64_t p = 0; p < np; ++p) {
    const bool two = 2 * p + 1 < nb;
    const __mmask16 lanes = two ? 0xFFFF : 0x00FF;
    for (int i = 0; i < MT; ++i) {
      const int64_t r = i0 + i;
      const int8_t* q = x.q.data() + r * x.cols + 2 * p * kQ8Block;
      const float* s = x.sums.data() + (r * nb + 2 * p) * 8;
      const float* dx = x.d.data() + r * nb + 2 * p;
      const __m512i qv = two ? _mm512_loadu_si512(q) : _mm512_maskz_loadu_epi8(0xFFFFFFFFull, q);
      const __m512 sv = _mm512_maskz_loadu_ps(lanes, s);
      const __m512i start = Unsigned32(T) == 0 ? _mm512_setzero_si512()
                                               : _mm512_cvtps_epi32(_mm512_mul_ps(sv, minus_u));
      const __m512 dxv = Join(_mm256_set1_ps(dx[0]), _mm256_set1_ps(dx[two ? 1 : 0]));
      for (int j = 0; j < NT; ++j) {
        const DecodedBlockPair& w = rows[j][p];
        const __m512 prod = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(start, w.a, qv));
        acc[i][j] = _mm512_mask3_fmadd_ps(prod, _mm512_mul_ps(w.d, dxv), acc[i][j], lanes);
        if constexpr (HasMin(T)) {
          acc[i][j] = _mm512_mask3_fmadd_ps(sv, _mm512_mul_ps(w.dmin, dxv), acc[i][j], lanes);
        }
      }
    }
  }
  for (int i = 0; i < MT; ++i) {
    for (int j = 0; j < NT; ++j) {
      out[i * ldo + j] =
          ReduceAdd256x2(_mm512_castps512_ps256(acc[i][j]), _mm512_extractf32x8_ps(acc[i][j], 1));
    }
  }
}

// Rows n0 … n1 of W against m > 1 rows of x on AVX-512 VNNI: the blocks of 32 four
// weight rows decoded at a time, tiles of 4, 2 and 1 rows of x down the batch; the
// super-blocks (x.lane_tiles > 0) eight weight rows at a time against each tile of 16
// rows of x.
template <GgmlType T>
TANDEM_VNNI void BatchRangeVnni(const QuantizedRows& x, const WeightMatrix& w, float* out,
                                int64_t n0, int64_t n1) {
  const int64_t m = x.rows, n = w.rows;
  const size_t rb = w.RowBytes();
  if constexpr (ChunksPerBlock(T) == 1) {
    constexpr int kWide = 4;
    // tile.operator()<MT>(i, j) for MT = 4, 2, 1 down the batch.
    auto down = [m](auto&& tile, int64_t j) {
      int64_t i = 0;
      for (; i + 4 <= m; i += 4) tile.template operator()<4>(i, j);
      for (; i + 2 <= m; i += 2) tile.template operator()<2>(i, j);
      if (i < m) tile.template operator()<1>(i, j);
    };
    const int64_t nb = w.cols / kQ8Block, np = (nb + 1) / 2;
    thread_local std::vector<DecodedBlockPair> buffer;  // grows to the widest matrix, then reused
    if (buffer.size() < static_cast<size_t>(kWide * np)) {
      buffer.resize(static_cast<size_t>(kWide * np));
    }
    const DecodedBlockPair* rows[kWide];
    for (int t = 0; t < kWide; ++t) rows[t] = buffer.data() + t * np;
    for (int64_t j = n0; j < n1;) {
      const int64_t left = n1 - j;
      const int nt = left >= kWide ? kWide : left >= 2 ? 2 : 1;
      for (int t = 0; t < nt; ++t)
        DecodeRowPairs32<T>(w.data + (j + t) * rb, nb, buffer.data() + t * np);
      down(
          [&]<int MT>(int64_t i, int64_t j0) TANDEM_VNNI {
            float* o = out + i * n + j0;
            if (nt == kWide) return PairTile32<T, MT, kWide>(x, i, rows, nb, o, n);
            if (nt == 2) return PairTile32<T, MT, 2>(x, i, rows, nb, o, n);
            PairTile32<T, MT, 1>(x, i, rows, nb, o, n);
          },
          j);
      j += nt;
    }
  } else {
    // Eight weight rows decoded at a time, then every tile of 16 rows of x against them.
    constexpr int kRows = 8;
    const int64_t nsb = w.cols / kQ8SuperBlock;
    thread_local std::vector<LaneSuperBlock> buffer;
    if (buffer.size() < static_cast<size_t>(kRows * nsb)) {
      buffer.resize(static_cast<size_t>(kRows * nsb));
    }
    alignas(64) float acc[kRows * 16];
    for (int64_t j = n0; j < n1; j += kRows) {
      const int nt = static_cast<int>(std::min<int64_t>(kRows, n1 - j));
      const LaneSuperBlock* rows[kRows];
      for (int t = 0; t < nt; ++t) {
        DecodeLaneRow<T>(w.data + (j + t) * rb, nsb, buffer.data() + t * nsb);
        rows[t] = buffer.data() + t * nsb;
      }
      for (int64_t tile = 0; tile < x.lane_tiles; ++tile) {
        // Runs of 8, 4, 2, 1 weight rows.
        for (int r0 = 0; r0 < nt;) {
          const int left = nt - r0;
          const int run = left >= 8 ? 8 : left >= 4 ? 4 : left >= 2 ? 2 : 1;
          const LaneSuperBlock* const* rr = rows + r0;
          float* a = acc + 16 * r0;
          if (run == 8) LaneTile256<T, 8>(x, tile, rr, nsb, a);
          if (run == 4) LaneTile256<T, 4>(x, tile, rr, nsb, a);
          if (run == 2) LaneTile256<T, 2>(x, tile, rr, nsb, a);
          if (run == 1) LaneTile256<T, 1>(x, tile, rr, nsb, a);
          r0 += run;
        }
        const int64_t live = std::min<int64_t>(16, m - 16 * tile);
        for (int64_t t = 0; t < live; ++t) {
          float* o = out + (16 * tile + t) * n + j;
          for (int r = 0; r < nt; ++r) o[r] = acc[16 * r + t];
        }
      }
    }
  }
}

// ---------------------------------------------------------------------------------
// Ranges of weight rows.

// Rows n0 … n1 of W against m > 1 rows of x: two weight rows decoded at a time, then
// tiles down the batch (2 × 2 for the blocks of 32, whose float steps take the
// registers; 4 × 2 for the super-blocks, whose chunks only add integers).
template <GgmlType T>
TANDEM_AVX2 void BatchRangeAvx2(const QuantizedRows& x, const WeightMatrix& w, float* out,
                                int64_t n0, int64_t n1) {
  const int64_t m = x.rows, n = w.rows;
  // Tiles of `wide` rows (4 or 2), then of 2, then 1, down the batch.
  auto tiles = [&](auto&& tile, int64_t j, int nt, int wide) {
    int64_t i = 0;
    for (; i + wide <= m; i += wide) tile(i, wide, nt, out + i * n + j);
    for (; i + 2 <= m; i += 2) tile(i, 2, nt, out + i * n + j);
    if (i < m) tile(i, 1, nt, out + i * n + j);
  };
  if constexpr (ChunksPerBlock(T) == 1) {
    const int64_t nb = w.cols / kQ8Block;
    thread_local std::vector<DecodedBlock> buffer;  // grows to the widest matrix, then reused
    if (buffer.size() < static_cast<size_t>(2 * nb)) buffer.resize(static_cast<size_t>(2 * nb));
    const DecodedBlock* rows[2] = {buffer.data(), buffer.data() + nb};
    for (int64_t j = n0; j < n1; j += 2) {
      const int nt = static_cast<int>(std::min<int64_t>(2, n1 - j));
      for (int t = 0; t < nt; ++t) {
        DecodeRow32<T>(w.data + (j + t) * w.RowBytes(), nb, buffer.data() + t * nb);
      }
      tiles(
          [&](int64_t i, int mt, int nt2, float* o) TANDEM_AVX2 {
            if (mt == 2 && nt2 == 2) return DecodedTile32Avx2<T, 2, 2>(x, i, rows, nb, o, n);
            if (mt == 2) return DecodedTile32Avx2<T, 2, 1>(x, i, rows, nb, o, n);
            if (nt2 == 2) return DecodedTile32Avx2<T, 1, 2>(x, i, rows, nb, o, n);
            DecodedTile32Avx2<T, 1, 1>(x, i, rows, nb, o, n);
          },
          j, nt, 2);
    }
  } else {
    const int64_t nsb = w.cols / kQ8SuperBlock;
    thread_local std::vector<DecodedChunk> buffer;
    thread_local std::vector<SuperFactors<T>> super_buffer;
    if (buffer.size() < static_cast<size_t>(16 * nsb)) buffer.resize(static_cast<size_t>(16 * nsb));
    if (super_buffer.size() < static_cast<size_t>(2 * nsb)) {
      super_buffer.resize(static_cast<size_t>(2 * nsb));
    }
    const DecodedChunk* rows[2] = {buffer.data(), buffer.data() + 8 * nsb};
    const SuperFactors<T>* supers[2] = {super_buffer.data(), super_buffer.data() + nsb};
    for (int64_t j = n0; j < n1; j += 2) {
      const int nt = static_cast<int>(std::min<int64_t>(2, n1 - j));
      for (int t = 0; t < nt; ++t) {
        DecodeRow256<T>(w.data + (j + t) * w.RowBytes(), nsb, buffer.data() + t * 8 * nsb,
                        super_buffer.data() + t * nsb);
      }
      tiles(
          [&](int64_t i, int mt, int nt2, float* o) TANDEM_AVX2 {
            if (mt == 4 && nt2 == 2) {
              return DecodedTile256Avx2<T, 4, 2>(x, i, rows, supers, nsb, o, n);
            }
            if (mt == 4) return DecodedTile256Avx2<T, 4, 1>(x, i, rows, supers, nsb, o, n);
            if (mt == 2 && nt2 == 2)
              return DecodedTile256Avx2<T, 2, 2>(x, i, rows, supers, nsb, o, n);
            if (mt == 2) return DecodedTile256Avx2<T, 2, 1>(x, i, rows, supers, nsb, o, n);
            if (nt2 == 2) return DecodedTile256Avx2<T, 1, 2>(x, i, rows, supers, nsb, o, n);
            DecodedTile256Avx2<T, 1, 1>(x, i, rows, supers, nsb, o, n);
          },
          j, nt, T == GgmlType::kQ2_K ? 2 : 4);  // Q2_K: twice the integer lanes
    }
  }
}

template <GgmlType T>
TANDEM_AVX2 void RangeAvx2(const QuantizedRows& x, const WeightMatrix& w, float* out, int64_t n0,
                           int64_t n1) {
  if (x.rows > 1) {
    if (HaveAvx512Vnni() && (ChunksPerBlock(T) == 1 || x.lane_tiles > 0)) {
      return BatchRangeVnni<T>(x, w, out, n0, n1);
    }
    return BatchRangeAvx2<T>(x, w, out, n0, n1);
  }
  // Decode (m = 1): one weight row at a time, decoded on the fly.
  const size_t rb = w.RowBytes();
  if constexpr (Pairs(T)) {
    const int64_t nb = w.cols / kQ8Block;
    thread_local PairedRow paired;  // grows to the widest row, then reused
    PairRow(x, 0, nb, &paired);
    for (int64_t j = n0; j < n1; ++j)
      out[j] = RowDotPairsAvx2<T>(x, paired, 0, w.data + j * rb, nb);
    return;
  }
  for (int64_t j = n0; j < n1; ++j) {
    if constexpr (ChunksPerBlock(T) == 1) {
      out[j] = RowDot32Avx2<T>(x, 0, w.data + j * rb, w.cols / kQ8Block);
    } else {
      out[j] = RowDot256Avx2<T>(x, 0, w.data + j * rb, w.cols / kQ8SuperBlock);
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
  FillSums(q, k, out->sums.data() + i * nb * 8, out->block_sums.data() + i * nb);
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
  if (out->sums.size() < 8 * blocks) out->sums.resize(8 * blocks);
  if (out->block_sums.size() < blocks) out->block_sums.resize(blocks);
}

// The header's lane layout of x's rows (x->block == kQ8SuperBlock), from its quants,
// sums and scales.
void FillLanes(QuantizedRows* x) {
  const int64_t m = x->rows, k = x->cols, nsb = k / kQ8SuperBlock, tiles = (m + 15) / 16;
  x->lanes.assign(static_cast<size_t>(tiles * k * 16), 0);
  x->lane_sums.assign(static_cast<size_t>(tiles * (k / 16) * 16), 0);
  x->lane_d.assign(static_cast<size_t>(tiles * nsb * 16), 0.0f);
  for (int64_t i = 0; i < m; ++i) {
    const int64_t tile = i / 16, t = i % 16;
    const int8_t* q = x->q.data() + i * k;
    const float* sums = x->sums.data() + i * (k / 4);
    for (int64_t g = 0; g < k / 4; ++g) {
      std::memcpy(x->lanes.data() + ((tile * (k / 4) + g) * 16 + t) * 4, q + 4 * g, 4);
    }
    for (int64_t h = 0; h < k / 16; ++h) {
      x->lane_sums[static_cast<size_t>((tile * (k / 16) + h) * 16 + t)] =
          static_cast<int32_t>(sums[4 * h] + sums[4 * h + 1] + sums[4 * h + 2] + sums[4 * h + 3]);
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
      return true;
    default:
      return ChunksPerBlock(type) == 8;  // Q2_K … Q6_K, IQ4_XS
  }
}

int64_t Q8ActivationBlock(GgmlType type) {
  return ChunksPerBlock(type) == 8 ? kQ8SuperBlock : kQ8Block;
}

const char* MatMulQ8Isa() {
  return HaveAvx512Vnni() ? "avx512vnni" : HaveAvx2Fma() ? "avx2" : "generic";
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
    FillSums(out->q.data() + i * k, k, out->sums.data() + i * nb * 8,
             out->block_sums.data() + i * nb);
  }
  if (block == kQ8SuperBlock && m >= kQ8LaneRows) FillLanes(out);
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
  if (block == kQ8SuperBlock && m >= kQ8LaneRows && HaveAvx512Vnni()) FillLanes(out);
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
