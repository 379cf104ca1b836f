#include "kernels/cpu/matmul.h"

#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string_view>
#include <vector>

#include "common/model/dequantize.h"
#include "common/util/check.h"
#include "common/util/half.h"
#include "kernels/cpu/quant_simd.h"
#include "kernels/cpu/vec_math.h"

namespace tandem::kernels {

using model::GgmlType;

size_t WeightMatrix::RowBytes() const {
  const auto& t = model::Traits(type);
  return static_cast<size_t>(cols / t.block_size * t.type_size);
}

void MatMulReference(const float* x, int64_t m, const WeightMatrix& w, float* out) {
  std::vector<float> row(w.cols);
  for (int64_t j = 0; j < w.rows; ++j) {
    const uint8_t* src = w.data + j * w.RowBytes();
    TANDEM_CHECK(model::Dequantize(w.type, {src, w.RowBytes()}, row).ok());
    for (int64_t i = 0; i < m; ++i) {
      double acc = 0;
      for (int64_t k = 0; k < w.cols; ++k) acc += static_cast<double>(x[i * w.cols + k]) * row[k];
      out[i * w.rows + j] = static_cast<float>(acc);
    }
  }
}

namespace {

// How a kernel decodes weights: F32, Q8_0, Q4_0 and Q4_1 in each ISA's own registers;
// the other types 8 lanes at a time (DecodeEight), shared by both ISAs.
enum class Kernel {
  kF32,
  kF16,   // converted 8 at a time (exact, as HalfToFloat)
  kBF16,  // widened 8 at a time (exact, as Bf16ToFloat)
  kQ8_0,
  kQ4_0,
  kQ4_1,
  // Decoded 8 lanes at a time by the "K and 5-bit types" section below (both ISAs).
  kQ5_0,
  kQ5_1,
  kIQ4_NL,
  kQ4_K,
  kQ5_K,
  kQ6_K,
  kIQ4_XS,
  kQ2_K,
  kQ3_K,
  kMXFP4,
};

constexpr bool IsEightWide(Kernel k) {
  return k == Kernel::kF16 || k == Kernel::kBF16 || k == Kernel::kQ5_0 || k == Kernel::kQ5_1 ||
         k == Kernel::kIQ4_NL || k == Kernel::kQ4_K || k == Kernel::kQ5_K || k == Kernel::kQ6_K ||
         k == Kernel::kIQ4_XS || k == Kernel::kQ2_K || k == Kernel::kQ3_K || k == Kernel::kMXFP4;
}

// The kernel of a weight type, or nullopt: the one table MatMulSupports and the dispatch read.
std::optional<Kernel> KernelFor(GgmlType type) {
  switch (type) {
    case GgmlType::kF32:
      return Kernel::kF32;
    case GgmlType::kF16:
      return Kernel::kF16;
    case GgmlType::kBF16:
      return Kernel::kBF16;
    case GgmlType::kQ8_0:
      return Kernel::kQ8_0;
    case GgmlType::kQ4_0:
      return Kernel::kQ4_0;
    case GgmlType::kQ4_1:
      return Kernel::kQ4_1;
    case GgmlType::kQ5_0:
      return Kernel::kQ5_0;
    case GgmlType::kQ5_1:
      return Kernel::kQ5_1;
    case GgmlType::kIQ4_NL:
      return Kernel::kIQ4_NL;
    case GgmlType::kQ4_K:
      return Kernel::kQ4_K;
    case GgmlType::kQ5_K:
      return Kernel::kQ5_K;
    case GgmlType::kQ6_K:
      return Kernel::kQ6_K;
    case GgmlType::kIQ4_XS:
      return Kernel::kIQ4_XS;
    case GgmlType::kQ2_K:
      return Kernel::kQ2_K;
    case GgmlType::kQ3_K:
      return Kernel::kQ3_K;
    case GgmlType::kMXFP4:
      return Kernel::kMXFP4;
    default:
      return std::nullopt;
  }
}

constexpr int kMaxM = 6;        // rows of x per micro-tile
constexpr int kMaxN = 4;        // weight rows per micro-tile
constexpr int kPanelRows = 16;  // weight rows decoded together on the panel path
constexpr int64_t kPanelMinM = 8;

// ---------------------------------------------------------------------------
// The K, IQ4 and 5-bit types, decoded 32 weights (one chunk, Dequantize's unit)
// into four registers of eight with AVX2. Each value takes the chunk decoder's float
// operations in its order — the per-chunk scale products in scalar float arithmetic,
// then one multiply and at most one add or subtract per weight, never fused — so the
// floats are Dequantize's (matmul_test holds every type to that). The AVX-512 path
// joins the four into two.

// Lanes 8q … 8q + 7 of 32 int8 values, as floats (signed: every type's quant fits).
TANDEM_AVX2 inline void Int8ToFloat(__m256i v, __m256* w) {
  const __m128i lo = _mm256_castsi256_si128(v), hi = _mm256_extracti128_si256(v, 1);
  w[0] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(lo));
  w[1] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(lo, 8)));
  w[2] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(hi));
  w[3] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(hi, 8)));
}

// Chunk b of a row (weights 32b … 32b + 31) of kernel K as four registers of eight.
template <Kernel K>
TANDEM_AVX2 inline void DecodeEight(const uint8_t* row, int64_t b, __m256* w) {
  if constexpr (K == Kernel::kF16 || K == Kernel::kBF16) {
    const uint8_t* p = row + 64 * b;  // 32 values of 2 bytes
    for (int i = 0; i < 4; ++i) {
      const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16 * i));
      if constexpr (K == Kernel::kF16) {
        w[i] = _mm256_cvtph_ps(v);
      } else {
        w[i] = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(v), 16));
      }
    }
  } else if constexpr (K == Kernel::kMXFP4) {
    // 32-weight blocks of 17 bytes: x = E8m0Half(e) * level[q] (an exact product).
    const uint8_t* blk = row + 17 * b;
    const __m256 d = _mm256_set1_ps(model::E8m0Half(blk[0]));
    Int8ToFloat(Mxfp4Levels(Nibbles(blk + 1)), w);
    for (int i = 0; i < 4; ++i) w[i] = _mm256_mul_ps(d, w[i]);
  } else if constexpr (K == Kernel::kQ5_0 || K == Kernel::kQ5_1 || K == Kernel::kIQ4_NL) {
    // 32-weight blocks: x = d * (q - 16), d * q + m, d * level[q].
    constexpr int kBytes = K == Kernel::kQ5_0 ? 22 : K == Kernel::kQ5_1 ? 24 : 18;
    const uint8_t* blk = row + kBytes * b;
    const __m256 d = _mm256_set1_ps(Half(blk));
    __m256i q;
    if constexpr (K == Kernel::kIQ4_NL) {
      q = Iq4Levels(Nibbles(blk + 2));
    } else {
      constexpr int kQh = K == Kernel::kQ5_0 ? 2 : 4;
      q = _mm256_or_si256(Nibbles(blk + kQh + 4), FifthBits(blk + kQh));
      if constexpr (K == Kernel::kQ5_0) q = _mm256_sub_epi8(q, _mm256_set1_epi8(16));
    }
    Int8ToFloat(q, w);
    if constexpr (K == Kernel::kQ5_1) {
      const __m256 m = _mm256_set1_ps(Half(blk + 2));
      for (int i = 0; i < 4; ++i) w[i] = _mm256_add_ps(_mm256_mul_ps(d, w[i]), m);
    } else {
      for (int i = 0; i < 4; ++i) w[i] = _mm256_mul_ps(d, w[i]);
    }
  } else if constexpr (K == Kernel::kQ4_K || K == Kernel::kQ5_K) {
    // Sub-block c of a 256-weight block: x = (d * sc) * q - dmin * m.
    constexpr int kBytes = K == Kernel::kQ4_K ? 144 : 176;
    const uint8_t* blk = row + kBytes * (b / 8);
    const int c = static_cast<int>(b % 8);
    uint8_t sc, mn;
    model::KQuantScaleMin(blk + 4, c, &sc, &mn);
    const __m256 d = _mm256_set1_ps(Half(blk) * static_cast<float>(sc));
    const __m256 dm = _mm256_set1_ps(Half(blk + 2) * static_cast<float>(mn));
    const uint8_t* qs = blk + (K == Kernel::kQ4_K ? 16 : 48) + 32 * (c / 2);
    __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs));
    q = _mm256_and_si256(_mm256_srl_epi16(q, _mm_cvtsi32_si128(4 * (c % 2))),
                         _mm256_set1_epi8(0x0F));
    if constexpr (K == Kernel::kQ5_K) {
      const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 16));
      const __m256i bit =
          _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(c)), _mm256_set1_epi8(1));
      q = _mm256_or_si256(q, _mm256_slli_epi16(bit, 4));
    }
    Int8ToFloat(q, w);
    for (int i = 0; i < 4; ++i) w[i] = _mm256_sub_ps(_mm256_mul_ps(d, w[i]), dm);
  } else if constexpr (K == Kernel::kQ6_K) {
    // Quarter p of half n: q = (4 low bits | 2 high bits << 4) - 32; x = (d * scale) * q,
    // a scale per 16 weights.
    const uint8_t* blk = row + 210 * (b / 8);
    const int c = static_cast<int>(b % 8), n = c / 4, p = c % 4;
    __m256i ql = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 64 * n + 32 * (p % 2)));
    ql = _mm256_and_si256(_mm256_srl_epi16(ql, _mm_cvtsi32_si128(4 * (p / 2))),
                          _mm256_set1_epi8(0x0F));
    __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 128 + 32 * n));
    qh = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * p)), _mm256_set1_epi8(3));
    const __m256i q =
        _mm256_sub_epi8(_mm256_or_si256(ql, _mm256_slli_epi16(qh, 4)), _mm256_set1_epi8(32));
    Int8ToFloat(q, w);
    const int8_t* sc = reinterpret_cast<const int8_t*>(blk + 192) + 8 * n + 2 * p;
    const float d = Half(blk + 208);
    const __m256 d0 = _mm256_set1_ps(d * static_cast<float>(sc[0]));
    const __m256 d1 = _mm256_set1_ps(d * static_cast<float>(sc[1]));
    w[0] = _mm256_mul_ps(d0, w[0]);
    w[1] = _mm256_mul_ps(d0, w[1]);
    w[2] = _mm256_mul_ps(d1, w[2]);
    w[3] = _mm256_mul_ps(d1, w[3]);
  } else if constexpr (K == Kernel::kQ2_K || K == Kernel::kQ3_K) {
    // Shift j of half n, 2 bits a weight: Q2_K x = (d * sc) * q - dmin * m with a 4-bit
    // scale and min per 16 weights; Q3_K x = (d * (scale - 32)) * q, q minus 4 where the
    // chunk's bit of hmask is clear, a 6-bit scale per 16 weights.
    constexpr int kBytes = K == Kernel::kQ2_K ? 84 : 110;
    const uint8_t* blk = row + kBytes * (b / 8);
    const int c = static_cast<int>(b % 8), n = c / 4, j = c % 4;
    const uint8_t* qs = blk + (K == Kernel::kQ2_K ? 16 : 32) + 32 * n;
    __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs));
    q = _mm256_and_si256(_mm256_srl_epi16(q, _mm_cvtsi32_si128(2 * j)), _mm256_set1_epi8(3));
    if constexpr (K == Kernel::kQ3_K) {
      const __m256i hmask = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk));
      const __m256i bit =
          _mm256_and_si256(_mm256_srl_epi16(hmask, _mm_cvtsi32_si128(c)), _mm256_set1_epi8(1));
      q = _mm256_sub_epi8(_mm256_or_si256(q, _mm256_slli_epi16(bit, 2)), _mm256_set1_epi8(4));
    }
    Int8ToFloat(q, w);
    for (int h = 0; h < 2; ++h) {
      if constexpr (K == Kernel::kQ2_K) {
        const uint8_t sc = blk[2 * c + h];
        const __m256 dl = _mm256_set1_ps(Half(blk + 80) * static_cast<float>(sc & 0x0F));
        const __m256 ml = _mm256_set1_ps(Half(blk + 82) * static_cast<float>(sc >> 4));
        w[2 * h] = _mm256_sub_ps(_mm256_mul_ps(dl, w[2 * h]), ml);
        w[2 * h + 1] = _mm256_sub_ps(_mm256_mul_ps(dl, w[2 * h + 1]), ml);
      } else {
        const uint8_t* scales = blk + 96;
        const int s = 2 * c + h;
        const int lo = (scales[s % 8] >> (4 * (s / 8))) & 0x0F;
        const int hi = (scales[8 + s % 4] >> (2 * (s / 4))) & 3;
        const __m256 dl =
            _mm256_set1_ps(Half(blk + 108) * static_cast<float>((lo | (hi << 4)) - 32));
        w[2 * h] = _mm256_mul_ps(dl, w[2 * h]);
        w[2 * h + 1] = _mm256_mul_ps(dl, w[2 * h + 1]);
      }
    }
  } else {
    // IQ4_XS, sub-block c: x = (d * (scale - 32)) * level[q].
    static_assert(K == Kernel::kIQ4_XS);
    const uint8_t* blk = row + 136 * (b / 8);
    const int c = static_cast<int>(b % 8);
    uint16_t scales_h;
    std::memcpy(&scales_h, blk + 2, 2);
    const int ls = ((blk[4 + c / 2] >> (4 * (c % 2))) & 0x0F) | (((scales_h >> (2 * c)) & 3) << 4);
    const __m256 d = _mm256_set1_ps(Half(blk) * static_cast<float>(ls - 32));
    Int8ToFloat(Iq4Levels(Nibbles(blk + 8 + 16 * c)), w);
    for (int i = 0; i < 4; ++i) w[i] = _mm256_mul_ps(d, w[i]);
  }
}

// ---------------------------------------------------------------------------
// AVX-512 path.

// out[j] = ReduceAdd512(acc[j]) for the NT sums of one row of a tile.
template <int NT>
TANDEM_AVX512 inline void StoreSums(const __m512* acc, float* out) {
  if constexpr (NT == 4) {
    ReduceAdd512x4(acc[0], acc[1], acc[2], acc[3], out);
  } else {
    for (int j = 0; j < NT; ++j) out[j] = ReduceAdd512(acc[j]);
  }
}

// A block's f16 scale as a broadcast float (F16C: exact, as HalfToFloat). The
// zero-extending scalar load avoids vpinsrw's false dependency on a register.
TANDEM_AVX512 inline __m512 Scale(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _mm512_broadcastss_ps(_mm_cvtph_ps(_mm_cvtsi32_si128(h)));
}

template <Kernel K>
TANDEM_AVX512 inline void DecodeBlock(const uint8_t* row, int64_t b, __m512* lo, __m512* hi) {
  if constexpr (K == Kernel::kF32) {
    const float* f = reinterpret_cast<const float*>(row) + 32 * b;
    *lo = _mm512_loadu_ps(f);
    *hi = _mm512_loadu_ps(f + 16);
  } else if constexpr (K == Kernel::kQ8_0) {
    const uint8_t* blk = row + 34 * b;
    const __m512 d = Scale(blk);
    const __m128i q0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 2));
    const __m128i q1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 18));
    *lo = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q0)), d);
    *hi = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q1)), d);
  } else if constexpr (IsEightWide(K)) {
    __m256 w[4];
    DecodeEight<K>(row, b, w);
    *lo = _mm512_insertf32x8(_mm512_castps256_ps512(w[0]), w[1], 1);
    *hi = _mm512_insertf32x8(_mm512_castps256_ps512(w[2]), w[3], 1);
  } else {
    // 4-bit types: the 16 values a nibble can take, computed once per block exactly as
    // dequantize.cc computes them (multiply, then add), then looked up per weight.
    // vpermps reads only the low 4 bits of each index, so no masking is needed.
    static_assert(K == Kernel::kQ4_0 || K == Kernel::kQ4_1);
    constexpr int kBytes = K == Kernel::kQ4_0 ? 18 : 20;
    const uint8_t* blk = row + kBytes * b;
    const __m512 iota = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    __m512 table;
    if constexpr (K == Kernel::kQ4_0) {
      table = _mm512_mul_ps(_mm512_sub_ps(iota, _mm512_set1_ps(8.0f)), Scale(blk));
    } else {
      // d and m converted together, then broadcast.
      uint32_t dm_bits;
      std::memcpy(&dm_bits, blk, 4);
      const __m128 dm = _mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(dm_bits)));
      table = _mm512_add_ps(_mm512_mul_ps(iota, _mm512_broadcastss_ps(dm)),
                            _mm512_broadcastss_ps(_mm_movehdup_ps(dm)));
    }
    const __m512i q =
        _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + kBytes - 16)));
    *lo = _mm512_permutexvar_ps(q, table);
    *hi = _mm512_permutexvar_ps(_mm512_srli_epi32(q, 4), table);
  }
}

// out[i][j] for MT rows of x and NT weight rows decoded on the fly.
template <Kernel K, int MT, int NT>
TANDEM_AVX512 void TileDirect(const float* x, int64_t k, const uint8_t* const* wrows, float* out,
                              int64_t ldo) {
  __m512 acc[MT][NT];
  for (int i = 0; i < MT; ++i)
    for (int j = 0; j < NT; ++j) acc[i][j] = _mm512_setzero_ps();
  for (int64_t b = 0; b < k / 32; ++b) {
    __m512 lo[NT], hi[NT];
    for (int j = 0; j < NT; ++j) DecodeBlock<K>(wrows[j], b, &lo[j], &hi[j]);
    for (int i = 0; i < MT; ++i) {
      const __m512 x0 = _mm512_loadu_ps(x + i * k + 32 * b);
      const __m512 x1 = _mm512_loadu_ps(x + i * k + 32 * b + 16);
      for (int j = 0; j < NT; ++j) {
        acc[i][j] = _mm512_fmadd_ps(x0, lo[j], acc[i][j]);
        acc[i][j] = _mm512_fmadd_ps(x1, hi[j], acc[i][j]);
      }
    }
  }
  for (int i = 0; i < MT; ++i) StoreSums<NT>(acc[i], out + i * ldo);
}

// Same arithmetic with weights already decoded into `panel` rows of k floats.
template <int MT, int NT>
TANDEM_AVX512 void TilePanel(const float* x, int64_t k, const float* panel, float* out,
                             int64_t ldo) {
  __m512 acc[MT][NT];
  for (int i = 0; i < MT; ++i)
    for (int j = 0; j < NT; ++j) acc[i][j] = _mm512_setzero_ps();
  for (int64_t kk = 0; kk < k; kk += 16) {
    __m512 w[NT];
    for (int j = 0; j < NT; ++j) w[j] = _mm512_loadu_ps(panel + j * k + kk);
    for (int i = 0; i < MT; ++i) {
      const __m512 xv = _mm512_loadu_ps(x + i * k + kk);
      for (int j = 0; j < NT; ++j) acc[i][j] = _mm512_fmadd_ps(xv, w[j], acc[i][j]);
    }
  }
  for (int i = 0; i < MT; ++i) StoreSums<NT>(acc[i], out + i * ldo);
}

template <Kernel K>
TANDEM_AVX512 void DecodeRow(const uint8_t* row, int64_t k, float* dst) {
  for (int64_t b = 0; b < k / 32; ++b) {
    __m512 lo, hi;
    DecodeBlock<K>(row, b, &lo, &hi);
    _mm512_storeu_ps(dst + 32 * b, lo);
    _mm512_storeu_ps(dst + 32 * b + 16, hi);
  }
}

// Dispatch a tile of runtime size (mt ≤ kMaxM, nt ≤ kMaxN) to its instantiation.
template <Kernel K, int MT = kMaxM>
TANDEM_AVX512 void DirectDispatch(int mt, int nt, const float* x, int64_t k,
                                  const uint8_t* const* wrows, float* out, int64_t ldo) {
  if constexpr (MT > 0) {
    if (mt == MT) {
      switch (nt) {
        case 1:
          return TileDirect<K, MT, 1>(x, k, wrows, out, ldo);
        case 2:
          return TileDirect<K, MT, 2>(x, k, wrows, out, ldo);
        case 3:
          return TileDirect<K, MT, 3>(x, k, wrows, out, ldo);
        default:
          return TileDirect<K, MT, 4>(x, k, wrows, out, ldo);
      }
    }
    DirectDispatch<K, MT - 1>(mt, nt, x, k, wrows, out, ldo);
  }
}

template <int MT = kMaxM>
TANDEM_AVX512 void PanelDispatch(int mt, int nt, const float* x, int64_t k, const float* panel,
                                 float* out, int64_t ldo) {
  if constexpr (MT > 0) {
    if (mt == MT) {
      switch (nt) {
        case 1:
          return TilePanel<MT, 1>(x, k, panel, out, ldo);
        case 2:
          return TilePanel<MT, 2>(x, k, panel, out, ldo);
        case 3:
          return TilePanel<MT, 3>(x, k, panel, out, ldo);
        default:
          return TilePanel<MT, 4>(x, k, panel, out, ldo);
      }
    }
    PanelDispatch<MT - 1>(mt, nt, x, k, panel, out, ldo);
  }
}

template <Kernel K>
TANDEM_AVX512 void MatMulRangeAvx512(const float* x, int64_t m, const WeightMatrix& w, float* out,
                                     int64_t n0, int64_t n1) {
  const int64_t k = w.cols, n = w.rows;
  const size_t rb = w.RowBytes();
  if (m < kPanelMinM) {
    for (int64_t j = n0; j < n1; j += kMaxN) {
      const int nt = static_cast<int>(std::min<int64_t>(kMaxN, n1 - j));
      // Weights stream from L3 or DRAM once per token: ask for the tile after next now.
      const int64_t ahead = j + 2 * kMaxN;
      if (ahead < n1) {
        const uint8_t* p = w.data + ahead * rb;
        const uint8_t* end = w.data + std::min<int64_t>(n1, ahead + kMaxN) * rb;
        for (; p < end; p += 64) _mm_prefetch(reinterpret_cast<const char*>(p), _MM_HINT_T0);
      }
      const uint8_t* rows[kMaxN];
      for (int t = 0; t < nt; ++t) rows[t] = w.data + (j + t) * rb;
      for (int64_t i = 0; i < m; i += kMaxM) {
        const int mt = static_cast<int>(std::min<int64_t>(kMaxM, m - i));
        DirectDispatch<K>(mt, nt, x + i * k, k, rows, out + i * n + j, n);
      }
    }
    return;
  }
  thread_local std::vector<float> panel;
  panel.resize(static_cast<size_t>(kPanelRows) * k);
  for (int64_t j0 = n0; j0 < n1; j0 += kPanelRows) {
    const int64_t pr = std::min<int64_t>(kPanelRows, n1 - j0);
    for (int64_t t = 0; t < pr; ++t) {
      DecodeRow<K>(w.data + (j0 + t) * rb, k, panel.data() + t * k);
    }
    for (int64_t i = 0; i < m; i += kMaxM) {
      const int mt = static_cast<int>(std::min<int64_t>(kMaxM, m - i));
      for (int64_t j = 0; j < pr; j += kMaxN) {
        const int nt = static_cast<int>(std::min<int64_t>(kMaxN, pr - j));
        PanelDispatch(mt, nt, x + i * k, k, panel.data() + j * k, out + i * n + j0 + j, n);
      }
    }
  }
}

// ---------------------------------------------------------------------------
// AVX2 + FMA path: the AVX-512 path's arithmetic in 8-wide halves. An output keeps the
// same 16 lanes (two registers: lanes 0–7 and 8–15), each takes the same fused
// multiply-adds in the same order, the weights decode to the same floats and the lanes
// are summed by the same tree, so both paths give the same bits (matmul_test states
// that arithmetic in scalar code and holds each path to it).

constexpr int kMaxM2 = 3;  // 3 × 2 outputs × 2 registers = 12 accumulators of 16
constexpr int kMaxN2 = 2;

// A block's f16 scale as a broadcast float (F16C: exact, as HalfToFloat).
TANDEM_AVX2 inline __m256 Scale8(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _mm256_broadcastss_ps(_mm_cvtph_ps(_mm_cvtsi32_si128(h)));
}

// Block b of a row (weights 32b … 32b + 31) as four registers of eight.
template <Kernel K>
TANDEM_AVX2 inline void DecodeBlock2(const uint8_t* row, int64_t b, __m256* w) {
  if constexpr (K == Kernel::kF32) {
    const float* f = reinterpret_cast<const float*>(row) + 32 * b;
    for (int q = 0; q < 4; ++q) w[q] = _mm256_loadu_ps(f + 8 * q);
  } else if constexpr (K == Kernel::kQ8_0) {
    const uint8_t* blk = row + 34 * b;
    const __m256 d = Scale8(blk);
    for (int h = 0; h < 2; ++h) {
      const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 2 + 16 * h));
      w[2 * h] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)), d);
      w[2 * h + 1] =
          _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(q, 8))), d);
    }
  } else if constexpr (IsEightWide(K)) {
    DecodeEight<K>(row, b, w);
  } else {
    // Element e < 16 of a block is the low nibble of byte e, element 16 + e its high
    // nibble; values as dequantize.cc computes them (multiply, then add).
    static_assert(K == Kernel::kQ4_0 || K == Kernel::kQ4_1);
    constexpr int kBytes = K == Kernel::kQ4_0 ? 18 : 20;
    const uint8_t* blk = row + kBytes * b;
    const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + kBytes - 16));
    const __m128i mask = _mm_set1_epi8(0x0F);
    const __m128i nib[2] = {_mm_and_si128(bytes, mask),
                            _mm_and_si128(_mm_srli_epi16(bytes, 4), mask)};
    const __m256 d = Scale8(blk);
    for (int h = 0; h < 2; ++h) {
      const __m256 v0 = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(nib[h]));
      const __m256 v1 = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(nib[h], 8)));
      if constexpr (K == Kernel::kQ4_0) {
        const __m256 eight = _mm256_set1_ps(8.0f);
        w[2 * h] = _mm256_mul_ps(_mm256_sub_ps(v0, eight), d);
        w[2 * h + 1] = _mm256_mul_ps(_mm256_sub_ps(v1, eight), d);
      } else {
        const __m256 m = Scale8(blk + 2);
        w[2 * h] = _mm256_add_ps(_mm256_mul_ps(v0, d), m);
        w[2 * h + 1] = _mm256_add_ps(_mm256_mul_ps(v1, d), m);
      }
    }
  }
}

// out[i][j] for MT rows of x and NT weight rows decoded on the fly, a block at a time.
template <Kernel K, int MT, int NT>
TANDEM_AVX2 void TileDirect2(const float* x, int64_t k, const uint8_t* const* wrows, float* out,
                             int64_t ldo) {
  __m256 acc[MT][NT][2];
  for (int i = 0; i < MT; ++i)
    for (int j = 0; j < NT; ++j) acc[i][j][0] = acc[i][j][1] = _mm256_setzero_ps();
  for (int64_t b = 0; b < k / 32; ++b) {
    __m256 w[NT][4];
    for (int j = 0; j < NT; ++j) DecodeBlock2<K>(wrows[j], b, w[j]);
    for (int i = 0; i < MT; ++i) {
      const float* xb = x + i * k + 32 * b;
      for (int q = 0; q < 4; ++q) {
        const __m256 xv = _mm256_loadu_ps(xb + 8 * q);
        for (int j = 0; j < NT; ++j)
          acc[i][j][q & 1] = _mm256_fmadd_ps(xv, w[j][q], acc[i][j][q & 1]);
      }
    }
  }
  for (int i = 0; i < MT; ++i)
    for (int j = 0; j < NT; ++j) out[i * ldo + j] = ReduceAdd256x2(acc[i][j][0], acc[i][j][1]);
}

// Same arithmetic with weights already decoded into `panel` rows of k floats.
template <int MT, int NT>
TANDEM_AVX2 void TilePanel2(const float* x, int64_t k, const float* panel, float* out,
                            int64_t ldo) {
  __m256 acc[MT][NT][2];
  for (int i = 0; i < MT; ++i)
    for (int j = 0; j < NT; ++j) acc[i][j][0] = acc[i][j][1] = _mm256_setzero_ps();
  for (int64_t kk = 0; kk < k; kk += 16) {
    __m256 w[NT][2];
    for (int j = 0; j < NT; ++j) {
      w[j][0] = _mm256_loadu_ps(panel + j * k + kk);
      w[j][1] = _mm256_loadu_ps(panel + j * k + kk + 8);
    }
    for (int i = 0; i < MT; ++i) {
      const __m256 x0 = _mm256_loadu_ps(x + i * k + kk);
      const __m256 x1 = _mm256_loadu_ps(x + i * k + kk + 8);
      for (int j = 0; j < NT; ++j) {
        acc[i][j][0] = _mm256_fmadd_ps(x0, w[j][0], acc[i][j][0]);
        acc[i][j][1] = _mm256_fmadd_ps(x1, w[j][1], acc[i][j][1]);
      }
    }
  }
  for (int i = 0; i < MT; ++i)
    for (int j = 0; j < NT; ++j) out[i * ldo + j] = ReduceAdd256x2(acc[i][j][0], acc[i][j][1]);
}

template <Kernel K>
TANDEM_AVX2 void DecodeRow2(const uint8_t* row, int64_t k, float* dst) {
  for (int64_t b = 0; b < k / 32; ++b) {
    __m256 w[4];
    DecodeBlock2<K>(row, b, w);
    for (int q = 0; q < 4; ++q) _mm256_storeu_ps(dst + 32 * b + 8 * q, w[q]);
  }
}

// A tile of runtime size (mt ≤ kMaxM2, nt ≤ kMaxN2) to its instantiation.
template <Kernel K, int MT = kMaxM2>
TANDEM_AVX2 void DirectDispatch2(int mt, int nt, const float* x, int64_t k,
                                 const uint8_t* const* wrows, float* out, int64_t ldo) {
  if constexpr (MT > 0) {
    if (mt == MT) {
      return nt == 1 ? TileDirect2<K, MT, 1>(x, k, wrows, out, ldo)
                     : TileDirect2<K, MT, 2>(x, k, wrows, out, ldo);
    }
    DirectDispatch2<K, MT - 1>(mt, nt, x, k, wrows, out, ldo);
  }
}

template <int MT = kMaxM2>
TANDEM_AVX2 void PanelDispatch2(int mt, int nt, const float* x, int64_t k, const float* panel,
                                float* out, int64_t ldo) {
  if constexpr (MT > 0) {
    if (mt == MT) {
      return nt == 1 ? TilePanel2<MT, 1>(x, k, panel, out, ldo)
                     : TilePanel2<MT, 2>(x, k, panel, out, ldo);
    }
    PanelDispatch2<MT - 1>(mt, nt, x, k, panel, out, ldo);
  }
}

// MatMulRangeAvx512's loop structure with the AVX2 tiles. Kept as its own function: a
// loop shared by both ISAs could carry neither's target attribute, so the tiles would
// not inline into it (tried: 9 % slower AVX-512 prefill, bench/ab_engine.sh).
template <Kernel K>
TANDEM_AVX2 void MatMulRangeAvx2(const float* x, int64_t m, const WeightMatrix& w, float* out,
                                 int64_t n0, int64_t n1) {
  const int64_t k = w.cols, n = w.rows;
  const size_t rb = w.RowBytes();
  if (m < kPanelMinM) {
    for (int64_t j = n0; j < n1; j += kMaxN2) {
      const int nt = static_cast<int>(std::min<int64_t>(kMaxN2, n1 - j));
      const int64_t ahead = j + 2 * kMaxN2;
      if (ahead < n1) {
        const uint8_t* p = w.data + ahead * rb;
        const uint8_t* end = w.data + std::min<int64_t>(n1, ahead + kMaxN2) * rb;
        for (; p < end; p += 64) _mm_prefetch(reinterpret_cast<const char*>(p), _MM_HINT_T0);
      }
      const uint8_t* rows[kMaxN2];
      for (int t = 0; t < nt; ++t) rows[t] = w.data + (j + t) * rb;
      for (int64_t i = 0; i < m; i += kMaxM2) {
        const int mt = static_cast<int>(std::min<int64_t>(kMaxM2, m - i));
        DirectDispatch2<K>(mt, nt, x + i * k, k, rows, out + i * n + j, n);
      }
    }
    return;
  }
  thread_local std::vector<float> panel;
  panel.resize(static_cast<size_t>(kPanelRows) * k);
  for (int64_t j0 = n0; j0 < n1; j0 += kPanelRows) {
    const int64_t pr = std::min<int64_t>(kPanelRows, n1 - j0);
    for (int64_t t = 0; t < pr; ++t) {
      DecodeRow2<K>(w.data + (j0 + t) * rb, k, panel.data() + t * k);
    }
    for (int64_t i = 0; i < m; i += kMaxM2) {
      const int mt = static_cast<int>(std::min<int64_t>(kMaxM2, m - i));
      for (int64_t j = 0; j < pr; j += kMaxN2) {
        const int nt = static_cast<int>(std::min<int64_t>(kMaxN2, pr - j));
        PanelDispatch2(mt, nt, x + i * k, k, panel.data() + j * k, out + i * n + j0 + j, n);
      }
    }
  }
}

// ---------------------------------------------------------------------------
// Portable path: the same lane structure in plain C++ (16 partial sums per output).

void DecodeRowGeneric(const WeightMatrix& w, const uint8_t* row, float* dst) {
  TANDEM_CHECK(
      model::Dequantize(w.type, {row, w.RowBytes()}, {dst, static_cast<size_t>(w.cols)}).ok());
}

void MatMulRangeGeneric(const float* x, int64_t m, const WeightMatrix& w, float* out, int64_t n0,
                        int64_t n1) {
  const int64_t k = w.cols, n = w.rows;
  std::vector<float> row(k);
  for (int64_t j = n0; j < n1; ++j) {
    DecodeRowGeneric(w, w.data + j * w.RowBytes(), row.data());
    for (int64_t i = 0; i < m; ++i) {
      float lanes[16] = {};
      const float* xi = x + i * k;
      for (int64_t kk = 0; kk < k; kk += 16)
        for (int l = 0; l < 16; ++l) lanes[l] += xi[kk + l] * row[kk + l];
      float s = 0;
      for (int l = 0; l < 16; ++l) s += lanes[l];
      out[i * n + j] = s;
    }
  }
}

template <Kernel K>
void RunKernel(bool avx512, const float* x, int64_t m, const WeightMatrix& w, float* out,
               int64_t n0, int64_t n1) {
  if (avx512) return MatMulRangeAvx512<K>(x, m, w, out, n0, n1);
  MatMulRangeAvx2<K>(x, m, w, out, n0, n1);
}

void MatMulRange(const float* x, int64_t m, const WeightMatrix& w, float* out, int64_t n0,
                 int64_t n1) {
  if (w.cols % 32 != 0 || (!HaveAvx512() && !HaveAvx2Fma())) {
    return MatMulRangeGeneric(x, m, w, out, n0, n1);
  }
  const bool avx512 = HaveAvx512();
  switch (*KernelFor(w.type)) {  // MatMulGroup checked MatMulSupports
    case Kernel::kF32:
      return RunKernel<Kernel::kF32>(avx512, x, m, w, out, n0, n1);
    case Kernel::kF16:
      return RunKernel<Kernel::kF16>(avx512, x, m, w, out, n0, n1);
    case Kernel::kBF16:
      return RunKernel<Kernel::kBF16>(avx512, x, m, w, out, n0, n1);
    case Kernel::kQ8_0:
      return RunKernel<Kernel::kQ8_0>(avx512, x, m, w, out, n0, n1);
    case Kernel::kQ4_0:
      return RunKernel<Kernel::kQ4_0>(avx512, x, m, w, out, n0, n1);
    case Kernel::kQ4_1:
      return RunKernel<Kernel::kQ4_1>(avx512, x, m, w, out, n0, n1);
    case Kernel::kQ5_0:
      return RunKernel<Kernel::kQ5_0>(avx512, x, m, w, out, n0, n1);
    case Kernel::kQ5_1:
      return RunKernel<Kernel::kQ5_1>(avx512, x, m, w, out, n0, n1);
    case Kernel::kIQ4_NL:
      return RunKernel<Kernel::kIQ4_NL>(avx512, x, m, w, out, n0, n1);
    case Kernel::kQ4_K:
      return RunKernel<Kernel::kQ4_K>(avx512, x, m, w, out, n0, n1);
    case Kernel::kQ5_K:
      return RunKernel<Kernel::kQ5_K>(avx512, x, m, w, out, n0, n1);
    case Kernel::kQ6_K:
      return RunKernel<Kernel::kQ6_K>(avx512, x, m, w, out, n0, n1);
    case Kernel::kIQ4_XS:
      return RunKernel<Kernel::kIQ4_XS>(avx512, x, m, w, out, n0, n1);
    case Kernel::kQ2_K:
      return RunKernel<Kernel::kQ2_K>(avx512, x, m, w, out, n0, n1);
    case Kernel::kQ3_K:
      return RunKernel<Kernel::kQ3_K>(avx512, x, m, w, out, n0, n1);
    case Kernel::kMXFP4:
      return RunKernel<Kernel::kMXFP4>(avx512, x, m, w, out, n0, n1);
  }
}

}  // namespace

namespace {

// 0: no cap, 1: AVX2 at most, 2: portable only, 3: AVX-512 without AMX; -1: as
// TANDEM_CPU_ISA says.
std::atomic<int> g_isa_cap{-1};

int IsaCap() {
  const int cap = g_isa_cap.load(std::memory_order_relaxed);
  if (cap >= 0) return cap;
  static const int from_env = [] {
    const char* e = std::getenv("TANDEM_CPU_ISA");
    const std::string_view v = e == nullptr ? "" : e;
    return v == "portable" ? 2 : v == "avx2" ? 1 : v == "avx512" ? 3 : 0;
  }();
  return from_env;
}

}  // namespace

void ForcePortableKernels(bool force) { g_isa_cap = force ? 2 : -1; }
void ForceAvx2Kernels(bool force) { g_isa_cap = force ? 1 : -1; }
void ForceAvx512Kernels(bool force) { g_isa_cap = force ? 3 : -1; }

namespace {
// F16C by CPUID (clang 14's __builtin_cpu_supports does not know the name).
bool HaveF16c() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
}
}  // namespace

bool HaveAvx512() {
  if (IsaCap() == 1 || IsaCap() == 2) return false;
  static const bool have =
      __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("fma") && HaveF16c();
  return have;
}

bool HaveAvx512Vnni() {
  if (!HaveAvx512()) return false;
  static const bool have = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    return __get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_AVX512VNNI) != 0;
  }();
  return have;
}

bool HaveAmxInt8() {
  if (IsaCap() != 0 || !HaveAvx512Vnni()) return false;
  static const bool have = [] {
#if defined(__linux__) && defined(__x86_64__)
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    // CPUID.(7,0):EDX bits 24 and 25: AMX-TILE and AMX-INT8.
    if (__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) == 0 || (edx & (3u << 24)) != (3u << 24)) {
      return false;
    }
    // XCR0 bits 17 and 18: the OS saves the tile configuration and data.
    uint32_t xcr0_low = 0, xcr0_high = 0;
    __asm__ volatile("xgetbv" : "=a"(xcr0_low), "=d"(xcr0_high) : "c"(0));
    if ((xcr0_low & (3u << 17)) != (3u << 17)) return false;
    // Linux hands the tile data state to a process that asks for it (5.16 on); a kernel
    // or hypervisor that refuses leaves the AVX-512 path.
    constexpr int kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
    return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
#else
    return false;
#endif
  }();
  return have;
}

bool HaveAvx2Fma() {
  if (IsaCap() == 2) return false;
  static const bool have =
      __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && HaveF16c();
  return have;
}

void MatMulRows(const float* x, int64_t m, const WeightMatrix& w, float* out, int64_t n0,
                int64_t n1) {
  TANDEM_CHECK(MatMulSupports(w.type));
  MatMulRange(x, m, w, out, n0, n1);
}

int64_t MatMulGrain(int64_t m) { return m < kPanelMinM ? kMaxN : kPanelRows; }

bool MatMulSupports(GgmlType type) { return KernelFor(type).has_value(); }

const char* MatMulIsa() { return HaveAvx512() ? "avx512" : HaveAvx2Fma() ? "avx2" : "generic"; }

void MatMul(const float* x, int64_t m, const WeightMatrix& w, float* out, ThreadPool* pool) {
  MatMulGroup(x, m, {&w}, {&out}, pool);
}

MatrixGroup::MatrixGroup(std::initializer_list<const WeightMatrix*> ws,
                         std::initializer_list<float* const*> outs) {
  TANDEM_CHECK(ws.size() == outs.size() && ws.size() <= 4);
  for (const WeightMatrix* wi : ws) {
    TANDEM_CHECK(wi->cols == (*ws.begin())->cols);
    w[n] = wi;
    out[n] = *outs.begin()[n];
    start[n + 1] = start[n] + wi->rows;
    ++n;
  }
}

void MatMulGroup(const float* x, int64_t m, std::initializer_list<const WeightMatrix*> ws,
                 std::initializer_list<float* const*> outs, ThreadPool* pool) {
  const MatrixGroup group(ws, outs);
  for (int i = 0; i < group.n; ++i) TANDEM_CHECK(MatMulSupports(group.w[i]->type));
  if (m <= 0 || group.rows() == 0) return;
  // Matrix row counts are multiples of the grain in practice.
  auto run = [&](int64_t b, int64_t e, int) {
    group.Split(b, e, [&](const WeightMatrix& w, float* o, int64_t lo, int64_t hi) {
      MatMulRange(x, m, w, o, lo, hi);
    });
  };
  const int64_t grain = MatMulGrain(m);
  if (pool == nullptr) return run(0, group.rows(), 0);
  pool->ParallelFor(group.rows(), run, grain);
}

}  // namespace tandem::kernels
