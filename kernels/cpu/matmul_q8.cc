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

// Whether the type's values are d · q + m (a min per block; q unsigned) rather than d · q.
constexpr bool HasMin(GgmlType t) { return t == GgmlType::kQ4_1 || t == GgmlType::kQ5_1; }

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

// A block's quants as QuantAt gives them: signed bytes, or unsigned ones for the types
// with a min.
template <GgmlType T>
TANDEM_AVX2 inline __m256i WeightBytes(const uint8_t* block) {
  const uint8_t* qs = block + QsOffset(T);
  if constexpr (T == GgmlType::kQ8_0) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs));
  } else if constexpr (T == GgmlType::kQ4_0) {
    return _mm256_sub_epi8(Nibbles(qs), _mm256_set1_epi8(8));
  } else if constexpr (T == GgmlType::kQ4_1) {
    return Nibbles(qs);
  } else if constexpr (T == GgmlType::kQ5_0) {
    return _mm256_sub_epi8(_mm256_or_si256(Nibbles(qs), FifthBits(block + QhOffset(T))),
                           _mm256_set1_epi8(16));
  } else if constexpr (T == GgmlType::kQ5_1) {
    return _mm256_or_si256(Nibbles(qs), FifthBits(block + QhOffset(T)));
  } else {
    static_assert(T == GgmlType::kIQ4_NL);
    return Iq4Levels(Nibbles(qs));
  }
}

// The eight sums of four products w_e · q_e: maddubs on |w| and q · sign(w) for signed
// quants, on w and q directly for unsigned ones (no pair exceeds 2 · 128 · 127, so
// nothing saturates).
template <GgmlType T>
TANDEM_AVX2 inline __m256i FourProductSums(__m256i w, __m256i q) {
  __m256i pairs;
  if constexpr (HasMin(T)) {
    pairs = _mm256_maddubs_epi16(w, q);
  } else {
    pairs = _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(q, w));
  }
  return _mm256_madd_epi16(pairs, _mm256_set1_epi16(1));
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

// out[i][j] for MT rows of x and NT weight rows: two accumulators an output (lanes 0–7
// for even blocks, 8–15 for odd ones), summed by ReduceAdd256x2.
template <GgmlType T, int MT, int NT>
TANDEM_AVX2 void TileAvx2(const QuantizedRows& x, int64_t i0, const uint8_t* const* wrows,
                          int64_t nb, float* out, int64_t ldo) {
  const int64_t bb = BlockBytes(T);
  __m256 acc[MT][NT][2];
  for (int i = 0; i < MT; ++i) {
    for (int j = 0; j < NT; ++j) acc[i][j][0] = acc[i][j][1] = _mm256_setzero_ps();
  }
  for (int64_t b = 0; b < nb; ++b) {
    __m256i w[NT];
    float dw[NT], mw[NT];
    for (int j = 0; j < NT; ++j) {
      const uint8_t* block = wrows[j] + b * bb;
      w[j] = WeightBytes<T>(block);
      dw[j] = Half(block);
      if constexpr (HasMin(T)) mw[j] = Half(block + 2);
    }
    const int h = static_cast<int>(b & 1);
    for (int i = 0; i < MT; ++i) {
      const int64_t row = i0 + i;
      const __m256i q = _mm256_loadu_si256(
          reinterpret_cast<const __m256i*>(x.q.data() + row * x.cols + b * kQ8Block));
      const float dx = x.d[static_cast<size_t>(row * nb + b)];
      __m256 sums;
      if constexpr (HasMin(T)) sums = _mm256_loadu_ps(x.sums.data() + (row * nb + b) * 8);
      for (int j = 0; j < NT; ++j) {
        const __m256 p = _mm256_cvtepi32_ps(FourProductSums<T>(w[j], q));
        acc[i][j][h] = _mm256_fmadd_ps(p, _mm256_set1_ps(dw[j] * dx), acc[i][j][h]);
        if constexpr (HasMin(T)) {
          acc[i][j][h] = _mm256_fmadd_ps(sums, _mm256_set1_ps(mw[j] * dx), acc[i][j][h]);
        }
      }
    }
  }
  for (int i = 0; i < MT; ++i) {
    for (int j = 0; j < NT; ++j) out[i * ldo + j] = ReduceAdd256x2(acc[i][j][0], acc[i][j][1]);
  }
}

template <GgmlType T>
TANDEM_AVX2 void RangeAvx2(const QuantizedRows& x, const WeightMatrix& w, float* out, int64_t n0,
                           int64_t n1) {
  const int64_t nb = w.cols / kQ8Block, m = x.rows, n = w.rows;
  const size_t rb = w.RowBytes();
  // Decode (m = 1): 1 row × 4 weight rows; else 2 × 2 (eight accumulators either way).
  constexpr int kNt1 = 4, kMt = 2, kNt = 2;
  for (int64_t j = n0; j < n1;) {
    const int nt = static_cast<int>(std::min<int64_t>(m == 1 ? kNt1 : kNt, n1 - j));
    const uint8_t* rows[kNt1];
    for (int t = 0; t < nt; ++t) rows[t] = w.data + (j + t) * rb;
    for (int64_t i = 0; i < m;) {
      const int mt = static_cast<int>(std::min<int64_t>(m == 1 ? 1 : kMt, m - i));
      float* o = out + i * n + j;
      if (mt == 1) {
        switch (nt) {
          case 4:
            TileAvx2<T, 1, 4>(x, i, rows, nb, o, n);
            break;
          case 3:
            TileAvx2<T, 1, 3>(x, i, rows, nb, o, n);
            break;
          case 2:
            TileAvx2<T, 1, 2>(x, i, rows, nb, o, n);
            break;
          default:
            TileAvx2<T, 1, 1>(x, i, rows, nb, o, n);
        }
      } else if (nt == 2) {
        TileAvx2<T, 2, 2>(x, i, rows, nb, o, n);
      } else {
        TileAvx2<T, 2, 1>(x, i, rows, nb, o, n);
      }
      i += mt;
    }
    j += nt;
  }
}

// The portable path: the reference's arithmetic over a range of weight rows.
void RangeGeneric(const QuantizedRows& x, const WeightMatrix& w, float* out, int64_t n0,
                  int64_t n1) {
  const int64_t nb = w.cols / kQ8Block, bb = BlockBytes(w.type);
  for (int64_t i = 0; i < x.rows; ++i) {
    const int8_t* q = x.q.data() + i * x.cols;
    for (int64_t j = n0; j < n1; ++j) {
      const uint8_t* row = w.data + j * w.RowBytes();
      float acc[16] = {};
      for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* block = row + b * bb;
        const float dx = x.d[static_cast<size_t>(i * nb + b)];
        const float s = HalfAt(block) * dx;
        const float sm = HasMin(w.type) ? HalfAt(block + 2) * dx : 0.0f;
        for (int l = 0; l < 8; ++l) {
          int32_t p = 0, qsum = 0;
          for (int e = 4 * l; e < 4 * l + 4; ++e) {
            p += QuantAt(w.type, block, e) * q[b * kQ8Block + e];
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

void Range(const QuantizedRows& x, const WeightMatrix& w, float* out, int64_t n0, int64_t n1) {
  if (!HaveAvx2Fma()) return RangeGeneric(x, w, out, n0, n1);
  switch (w.type) {
    case GgmlType::kQ8_0:
      return RangeAvx2<GgmlType::kQ8_0>(x, w, out, n0, n1);
    case GgmlType::kQ4_0:
      return RangeAvx2<GgmlType::kQ4_0>(x, w, out, n0, n1);
    case GgmlType::kQ4_1:
      return RangeAvx2<GgmlType::kQ4_1>(x, w, out, n0, n1);
    case GgmlType::kQ5_0:
      return RangeAvx2<GgmlType::kQ5_0>(x, w, out, n0, n1);
    case GgmlType::kQ5_1:
      return RangeAvx2<GgmlType::kQ5_1>(x, w, out, n0, n1);
    default:
      return RangeAvx2<GgmlType::kIQ4_NL>(x, w, out, n0, n1);
  }
}

// Row i of x into row i of `out` (shaped by Prepare).
void QuantizeRow(const float* x, int64_t i, QuantizedRows* out) {
  const int64_t k = out->cols, nb = k / kQ8Block;
  int8_t* q = out->q.data() + i * k;
  float* d = out->d.data() + i * nb;
  float* sums = out->sums.data() + i * nb * 8;
  if (HaveAvx2Fma()) return QuantizeRowAvx2(x + i * k, k, q, d, sums);
  for (int64_t b = 0; b < nb; ++b) {
    QuantizeBlock(x + i * k + b * kQ8Block, q + b * kQ8Block, d + b, sums + 8 * b);
  }
}

void Prepare(QuantizedRows* out, int64_t m, int64_t k) {
  out->rows = m;
  out->cols = k;
  if (out->q.size() < static_cast<size_t>(m * k)) out->q.resize(static_cast<size_t>(m * k));
  const size_t blocks = static_cast<size_t>(m * (k / kQ8Block));
  if (out->d.size() < blocks) out->d.resize(blocks);
  if (out->sums.size() < 8 * blocks) out->sums.resize(8 * blocks);
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
      return false;
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
