#include "kernels/cpu/attention.h"

#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#include "common/util/half.h"
#include "kernels/cpu/vec_math.h"

namespace tandem::kernels {

// Every query row (row t, head h, position p) is computed the same way wherever it
// sits in a batch:
//   s_j = (Σ_d q[d]·k_j[d], summed over d in order) · scale      for j = 0..p
//   e_j = exp(s_j − max_j s_j)
//   Z   = Σ_j e_j in 16 lane partials (lane = j mod 16), then a fixed lane sum
//   out = (Σ_j e_j·v_j, summed over j in order) / Z
// The AVX-512 path vectorizes over 16 keys for s (K is stored transposed per block)
// and over head_dim for out; the portable path is the same order of operations in
// plain C++ (with libm's exp, where AVX-512 has its own polynomial), built once for any
// x86-64 and once for AVX2 + FMA with identical results.

namespace {

struct Row {
  int32_t seq, pos;
};

std::vector<Row> Rows(const PagedBatch& b) {
  std::vector<Row> rows(b.q_indptr.back());
  for (int32_t s = 0; s < b.num_seqs(); ++s) {
    const int32_t n = b.q_indptr[s + 1] - b.q_indptr[s];
    for (int32_t i = 0; i < n; ++i) rows[b.q_indptr[s] + i] = {s, b.kv_len[s] - n + i};
  }
  return rows;
}

std::span<const int32_t> Table(const PagedBatch& b, int32_t s) {
  return b.block_ids.subspan(b.block_indptr[s], b.block_indptr[s + 1] - b.block_indptr[s]);
}

// Element types of the cache. F32 is float itself; the 16-bit types are tags over
// their bits so the kernels below are written once.
struct Bf16 {
  uint16_t bits;
};
struct Fp16 {
  uint16_t bits;
};
inline float ToFloat(float x) { return x; }
inline float ToFloat(Bf16 x) { return Bf16ToFloat(x.bits); }
inline float ToFloat(Fp16 x) { return HalfToFloat(x.bits); }
template <class T>
T FromFloat(float x);
template <>
inline float FromFloat<float>(float x) {
  return x;
}
template <>
inline Bf16 FromFloat<Bf16>(float x) {
  return {FloatToBf16(x)};
}
template <>
inline Fp16 FromFloat<Fp16>(float x) {
  return {FloatToHalf(x)};
}

// 16 consecutive elements (those in `m`; the rest 0) as float32.
TANDEM_AVX512 inline __m512 Load16(__mmask16 m, const float* p) {
  return _mm512_maskz_loadu_ps(m, p);
}
TANDEM_AVX512 inline __m512 Load16(__mmask16 m, const Bf16* p) {
  const __m256i b = _mm256_maskz_loadu_epi16(m, p);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(b), 16));
}
TANDEM_AVX512 inline __m512 Load16(__mmask16 m, const Fp16* p) {
  return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p));
}

// K[j][d] of kv head h and V row of position j.
template <class T>
inline const T* KColumn(const KvView& c, std::span<const int32_t> table, int32_t j, int32_t layer,
                        int32_t h) {
  const kv::KvLayout& L = c.layout;
  return c.Part<T>(table[j / L.block_size], layer, 0) +
         static_cast<int64_t>(h) * L.head_dim * L.block_size + j % L.block_size;
}
template <class T>
inline const T* VRow(const KvView& c, std::span<const int32_t> table, int32_t j, int32_t layer,
                     int32_t h) {
  const kv::KvLayout& L = c.layout;
  return c.Part<T>(table[j / L.block_size], layer, 1) +
         (static_cast<int64_t>(j % L.block_size) * L.n_kv_heads + h) * L.head_dim;
}

// x, or softcap · tanh(x / softcap) when soft-capping (tanhf: the same function in
// every build of this file).
inline float SoftCap(float x, float softcap) {
  return softcap > 0 ? softcap * std::tanh(x / softcap) : x;
}

// f(std::integral_constant<int, ng>{}) for ng = 1 … 4: the kernels below take the heads
// of a group four at a time with their count a constant, so that their accumulators
// stay in registers.
template <class F>
__attribute__((always_inline)) inline void WithHeads(int32_t ng, F&& f) {
  switch (ng) {
    case 4:
      return f(std::integral_constant<int, 4>{});
    case 3:
      return f(std::integral_constant<int, 3>{});
    case 2:
      return f(std::integral_constant<int, 2>{});
    default:
      return f(std::integral_constant<int, 1>{});
  }
}

// One head's scaled scores s[lo, n) → soft-capped, then exp(s − m) in place, m the
// largest of them and of *sink where there is one; returns 1 / Z, Z their sum in 16
// lanes (key j in lane j mod 16, folded (l + l⊕8), (+ l⊕4), (+ l⊕2), (+ l⊕1)) plus
// exp(*sink − m) last. The portable and AVX2 paths both take these steps.
__attribute__((always_inline)) inline float SoftmaxInPlace(float* s, int32_t lo, int32_t n,
                                                           float softcap, const float* sink) {
  float mx = sink != nullptr ? *sink : -INFINITY;
  for (int32_t j = lo; j < n; ++j) {
    s[j] = SoftCap(s[j], softcap);
    mx = std::max(mx, s[j]);
  }
  float lanes[16] = {};
  for (int32_t j = lo; j < n; ++j) {
    s[j] = std::exp(s[j] - mx);
    lanes[j % 16] += s[j];
  }
  for (int w = 8; w >= 1; w /= 2)
    for (int l = 0; l < w; ++l) lanes[l] += lanes[l + w];
  if (sink != nullptr) lanes[0] += std::exp(*sink - mx);
  return 1.0f / lanes[0];
}

// --- portable path -------------------------------------------------------------

// One body, built twice: for any x86-64, and with AVX2 and FMA for the CPUs that have
// them but not AVX-512 (std::fma is then one instruction instead of a libm call, and
// the compiler vectorizes the 8-key and head_dim loops). Both builds give the same bits:
// fma rounds once either way, exp is the same function, and every sum keeps its order
// (each score is a chain over d; keys are only computed side by side).
template <class T>
__attribute__((always_inline)) inline void AttendPortable(const float* q, int32_t pos,
                                                          std::span<const int32_t> table,
                                                          int32_t layer, int32_t kvh,
                                                          const AttentionShape& sh,
                                                          const KvView& cache, const float* sink,
                                                          std::vector<float>& scores, float* out) {
  const int32_t hd = sh.head_dim, bs = cache.layout.block_size, lo = sh.FirstKey(pos);
  scores.resize(pos + 1);
  for (int32_t j0 = lo; j0 <= pos;) {
    const T* k = KColumn<T>(cache, table, j0, layer, kvh);
    if (pos + 1 - j0 >= 8 && j0 % bs + 8 <= bs) {
      // Eight keys of one block: their K columns are adjacent.
      float s[8] = {};
      for (int32_t d = 0; d < hd; ++d) {
        const T* kd = k + static_cast<int64_t>(d) * bs;
        for (int32_t i = 0; i < 8; ++i) s[i] = std::fma(q[d], ToFloat(kd[i]), s[i]);
      }
      for (int32_t i = 0; i < 8; ++i) scores[j0 + i] = s[i] * sh.scale;
      j0 += 8;
    } else {
      float s = 0;
      for (int32_t d = 0; d < hd; ++d)
        s = std::fma(q[d], ToFloat(k[static_cast<int64_t>(d) * bs]), s);
      scores[j0] = s * sh.scale;
      j0 += 1;
    }
  }
  const float inv = SoftmaxInPlace(scores.data(), lo, pos + 1, sh.softcap, sink);
  for (int32_t d = 0; d < hd; ++d) out[d] = 0;
  for (int32_t j = lo; j <= pos; ++j) {
    const T* v = VRow<T>(cache, table, j, layer, kvh);
    for (int32_t d = 0; d < hd; ++d) out[d] = std::fma(scores[j], ToFloat(v[d]), out[d]);
  }
  for (int32_t d = 0; d < hd; ++d) out[d] *= inv;
}

template <class T>
void AttendGeneric(const float* q, int32_t pos, std::span<const int32_t> table, int32_t layer,
                   int32_t kvh, const AttentionShape& sh, const KvView& cache, const float* sink,
                   std::vector<float>& scores, float* out) {
  AttendPortable<T>(q, pos, table, layer, kvh, sh, cache, sink, scores, out);
}

template <class T>
TANDEM_AVX2 void AttendGenericAvx2(const float* q, int32_t pos, std::span<const int32_t> table,
                                   int32_t layer, int32_t kvh, const AttentionShape& sh,
                                   const KvView& cache, const float* sink,
                                   std::vector<float>& scores, float* out) {
  AttendPortable<T>(q, pos, table, layer, kvh, sh, cache, sink, scores, out);
}

// --- AVX2 path ------------------------------------------------------------------

// AttendPortable for all `group` query heads of one KV head at once: each K column and V
// row is read once per group instead of once per head, and up to eight score chains run
// side by side (four heads × two runs of eight keys) instead of one. Every value takes
// AttendPortable's steps in its order — a score is an fma chain over d from 0 whether its
// key is computed alone or among eight, exp is libm's, the lane sums and the V sums go
// key by key — so the bits are the portable path's
// (PagedAttentionAvx2.GivesThePlainPortableBits). head_dim a multiple of 16.
TANDEM_AVX2 inline __m256 Load8(const float* p) { return _mm256_loadu_ps(p); }
TANDEM_AVX2 inline __m256 Load8(const Bf16* p) {
  const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(b), 16));
}
TANDEM_AVX2 inline __m256 Load8(const Fp16* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

// Scores of `runs` × 8 keys (1 or 2 runs, adjacent K columns at k) for heads g0 … g0 + NG
// − 1, times the scale, into sc[g · n + j0 …]. NG a constant, so the chains stay in
// registers.
template <class T, int kRuns, int NG>
TANDEM_AVX2 inline void ScoreRunsOf(const float* q, int32_t g0, const T* k, int32_t bs, int32_t hd,
                                    float scale, int32_t j0, int32_t n, float* sc) {
  __m256 s[NG][kRuns];
  for (int g = 0; g < NG; ++g) {
    for (int r = 0; r < kRuns; ++r) s[g][r] = _mm256_setzero_ps();
  }
  for (int32_t d = 0; d < hd; ++d) {
    __m256 kv[kRuns];
    for (int r = 0; r < kRuns; ++r) kv[r] = Load8(k + static_cast<int64_t>(d) * bs + 8 * r);
    for (int g = 0; g < NG; ++g) {
      const __m256 qd = _mm256_set1_ps(q[static_cast<int64_t>(g0 + g) * hd + d]);
      for (int r = 0; r < kRuns; ++r) s[g][r] = _mm256_fmadd_ps(qd, kv[r], s[g][r]);
    }
  }
  const __m256 vs = _mm256_set1_ps(scale);
  for (int g = 0; g < NG; ++g) {
    for (int r = 0; r < kRuns; ++r) {
      _mm256_storeu_ps(sc + static_cast<int64_t>(g0 + g) * n + j0 + 8 * r,
                       _mm256_mul_ps(s[g][r], vs));
    }
  }
}
// ng ≤ 4 heads.
template <class T, int kRuns>
TANDEM_AVX2 inline void ScoreRuns(const float* q, int32_t g0, int32_t ng, const T* k, int32_t bs,
                                  int32_t hd, float scale, int32_t j0, int32_t n, float* sc) {
  WithHeads(ng, [&](auto heads) TANDEM_AVX2 {
    ScoreRunsOf<T, kRuns, heads()>(q, g0, k, bs, hd, scale, j0, n, sc);
  });
}

// 16 elements (from d0) of Σ_j e_j · v_j over keys lo … n − 1 for heads g0 … g0 + NG − 1
// (weights sc[g · n + j]), times each head's 1 / Z, into out; keys in order.
template <class T, int NG>
TANDEM_AVX2 inline void WeighValues16(const float* sc, const float* invs, int32_t g0, int32_t d0,
                                      int32_t hd, int32_t lo, int32_t n,
                                      std::span<const int32_t> table, int32_t layer, int32_t kvh,
                                      const KvView& cache, float* out) {
  const int32_t bs = cache.layout.block_size;
  const int64_t vstride = static_cast<int64_t>(cache.layout.n_kv_heads) * hd;
  __m256 a[NG][2];
  for (int g = 0; g < NG; ++g) a[g][0] = a[g][1] = _mm256_setzero_ps();
  for (int32_t j0 = lo; j0 < n;) {
    const T* vr = VRow<T>(cache, table, j0, layer, kvh) + d0;
    const int32_t len = std::min(bs - j0 % bs, n - j0);
    for (int32_t i = 0; i < len; ++i, vr += vstride) {
      const __m256 v0 = Load8(vr), v1 = Load8(vr + 8);
      for (int g = 0; g < NG; ++g) {
        const __m256 p = _mm256_set1_ps(sc[static_cast<int64_t>(g0 + g) * n + j0 + i]);
        a[g][0] = _mm256_fmadd_ps(p, v0, a[g][0]);
        a[g][1] = _mm256_fmadd_ps(p, v1, a[g][1]);
      }
    }
    j0 += len;
  }
  for (int g = 0; g < NG; ++g) {
    float* o = out + static_cast<int64_t>(g0 + g) * hd + d0;
    const __m256 vi = _mm256_set1_ps(invs[g0 + g]);
    _mm256_storeu_ps(o, _mm256_mul_ps(a[g][0], vi));
    _mm256_storeu_ps(o + 8, _mm256_mul_ps(a[g][1], vi));
  }
}

template <class T>
TANDEM_AVX2 void AttendGroupAvx2(const float* q, int32_t group, int32_t pos,
                                 std::span<const int32_t> table, int32_t layer, int32_t kvh,
                                 const AttentionShape& sh, const KvView& cache, const float* sinks,
                                 std::vector<float>& scores, float* out) {
  const int32_t hd = sh.head_dim, bs = cache.layout.block_size, lo = sh.FirstKey(pos);
  const int32_t n = pos + 1;
  scores.resize(static_cast<size_t>(group) * (n + 1));
  float* sc = scores.data();                           // head g's score of key j at sc[g · n + j]
  float* invs = sc + static_cast<int64_t>(group) * n;  // then 1 / Z of each head
  for (int32_t j0 = lo; j0 < n;) {
    const T* k = KColumn<T>(cache, table, j0, layer, kvh);
    const int32_t run = std::min(bs - j0 % bs, n - j0);  // keys left in j0's block
    if (run >= 8) {
      const int32_t step = run >= 16 ? 16 : 8;
      for (int32_t g0 = 0; g0 < group; g0 += 4) {
        const int32_t ng = std::min(4, group - g0);
        if (step == 16) {
          ScoreRuns<T, 2>(q, g0, ng, k, bs, hd, sh.scale, j0, n, sc);
        } else {
          ScoreRuns<T, 1>(q, g0, ng, k, bs, hd, sh.scale, j0, n, sc);
        }
      }
      j0 += step;
    } else {
      for (int32_t g = 0; g < group; ++g) {
        const float* qg = q + static_cast<int64_t>(g) * hd;
        float s = 0;
        for (int32_t d = 0; d < hd; ++d) {
          s = std::fma(qg[d], ToFloat(k[static_cast<int64_t>(d) * bs]), s);
        }
        sc[static_cast<int64_t>(g) * n + j0] = s * sh.scale;
      }
      j0 += 1;
    }
  }
  // Per head: cap, max, exp and the 16 lane partials, as AttendPortable.
  for (int32_t g = 0; g < group; ++g) {
    invs[g] = SoftmaxInPlace(sc + static_cast<int64_t>(g) * n, lo, n, sh.softcap,
                             sinks != nullptr ? sinks + g : nullptr);
  }
  // out = Σ_j e_j · v_j key by key, 16 elements of four heads at a time.
  for (int32_t g0 = 0; g0 < group; g0 += 4) {
    for (int32_t d0 = 0; d0 < hd; d0 += 16) {
      WithHeads(std::min(4, group - g0), [&](auto heads) TANDEM_AVX2 {
        WeighValues16<T, heads()>(sc, invs, g0, d0, hd, lo, n, table, layer, kvh, cache, out);
      });
    }
  }
}

// --- AVX-512 path ----------------------------------------------------------------

// NG heads' scores against two chunks of 16 keys (k0, k1; m0, m1 their live keys), each
// a sequential FMA chain over d, stored scaled at sc (head g's row padded apart; the
// second chunk `chunk` on). NG a constant, so the chains stay in registers.
template <class T, int NG>
TANDEM_AVX512 inline void ScoreChunks(const float* q, int32_t hd, const T* k0, const T* k1,
                                      int32_t bs, __mmask16 m0, __mmask16 m1, bool two,
                                      __m512 scale, int32_t chunk, float* sc, int64_t padded) {
  __m512 s0[NG], s1[NG];
  for (int g = 0; g < NG; ++g) s0[g] = s1[g] = _mm512_setzero_ps();
  for (int32_t d = 0; d < hd; ++d) {
    const __m512 ka = Load16(m0, k0 + static_cast<int64_t>(d) * bs);
    const __m512 kb = Load16(m1, k1 + static_cast<int64_t>(d) * bs);
    for (int g = 0; g < NG; ++g) {
      const __m512 qd = _mm512_set1_ps(q[static_cast<int64_t>(g) * hd + d]);
      s0[g] = _mm512_fmadd_ps(qd, ka, s0[g]);
      s1[g] = _mm512_fmadd_ps(qd, kb, s1[g]);
    }
  }
  for (int g = 0; g < NG; ++g) {
    _mm512_mask_storeu_ps(sc + g * padded, m0, _mm512_mul_ps(s0[g], scale));
    if (two) _mm512_mask_storeu_ps(sc + g * padded + chunk, m1, _mm512_mul_ps(s1[g], scale));
  }
}

// Σ p · V over keys base … n − 1 for NG heads (their weights at p, padded apart) with
// head_dim 16 · NV, times each head's 1 / Σ, into out (heads hd apart). The keys go in
// order for every accumulator, as one head alone would take them; NV and NG constants,
// so the accumulators stay in registers.
template <class T, int NV, int NG>
TANDEM_AVX512 inline void WeighValues(const float* p, int64_t padded, const float* invs,
                                      int32_t base, int32_t n, std::span<const int32_t> table,
                                      int32_t layer, int32_t kvh, const KvView& cache, float* out) {
  const int32_t bs = cache.layout.block_size;
  const int64_t vstride = static_cast<int64_t>(cache.layout.n_kv_heads) * 16 * NV;
  __m512 acc[NG][NV];
  for (int g = 0; g < NG; ++g) {
    for (int c = 0; c < NV; ++c) acc[g][c] = _mm512_setzero_ps();
  }
  for (int32_t j0 = base; j0 < n;) {  // block by block (no division per key)
    const T* vr = VRow<T>(cache, table, j0, layer, kvh);
    const int32_t len = std::min(bs - j0 % bs, n - j0);
    for (int32_t i = 0; i < len; ++i, vr += vstride) {
      __m512 v[NV];
      for (int c = 0; c < NV; ++c) v[c] = Load16(0xFFFF, vr + 16 * c);
      for (int g = 0; g < NG; ++g) {
        const __m512 w = _mm512_set1_ps(p[g * padded + j0 - base + i]);
        for (int c = 0; c < NV; ++c) acc[g][c] = _mm512_fmadd_ps(w, v[c], acc[g][c]);
      }
    }
    j0 += len;
  }
  for (int g = 0; g < NG; ++g) {
    const __m512 vinv = _mm512_set1_ps(invs[g]);
    for (int c = 0; c < NV; ++c) {
      _mm512_storeu_ps(out + g * 16 * NV + 16 * c, _mm512_mul_ps(acc[g][c], vinv));
    }
  }
}

// All query heads of one KV head (`group` of them, q rows `group` × head_dim apart)
// for one query row. head_dim must be a multiple of 16 and at most 256.
template <class T>
TANDEM_AVX512 void AttendAvx512(const float* q, int32_t group, int32_t pos,
                                std::span<const int32_t> table, int32_t layer, int32_t kvh,
                                const AttentionShape& sh, const KvView& cache, const float* sinks,
                                std::vector<float>& scores, float* out) {
  const int32_t hd = sh.head_dim, bs = cache.layout.block_size, n = pos + 1;
  // Scores, 16 keys at a time (a chunk never crosses a block: block sizes are
  // multiples of 16, or chunks shrink to the block). Each score is a sequential FMA
  // chain over d; up to 4 heads × 2 chunks run side by side to hide FMA latency.
  // With a window, chunks start at the chunk holding the first visible key, and the
  // keys before it in that chunk score −inf (weight exactly 0). sc[j − base] is key j.
  const int32_t chunk = bs >= 16 ? 16 : bs;
  const int32_t lo = sh.FirstKey(pos), base = lo / chunk * chunk;
  const int32_t padded = (n - base + 15) / 16 * 16;
  // The scores, then one 1 / Σ per head.
  scores.resize(static_cast<size_t>(group) * padded + static_cast<size_t>(group));
  const __m512 scale = _mm512_set1_ps(sh.scale);
  auto mask_of = [&](int32_t j0) {
    const int32_t len = std::min(chunk, n - j0);
    return static_cast<__mmask16>((1u << len) - 1);
  };
  for (int32_t j0 = base; j0 < n; j0 += 2 * chunk) {
    const bool two = j0 + chunk < n;
    const __mmask16 m0 = mask_of(j0), m1 = two ? mask_of(j0 + chunk) : 0;
    const T* k0 = KColumn<T>(cache, table, j0, layer, kvh);
    const T* k1 = two ? KColumn<T>(cache, table, j0 + chunk, layer, kvh) : k0;
    for (int32_t g0 = 0; g0 < group; g0 += 4) {
      const float* qg = q + static_cast<int64_t>(g0) * hd;
      float* sc = scores.data() + static_cast<int64_t>(g0) * padded + (j0 - base);
      WithHeads(std::min(4, group - g0), [&](auto heads) TANDEM_AVX512 {
        ScoreChunks<T, heads()>(qg, hd, k0, k1, bs, m0, m1, two, scale, chunk, sc, padded);
      });
    }
  }
  // Softmax of each head's scores in place (1 / Σ kept per head).
  float* invs = scores.data() + static_cast<int64_t>(group) * padded;
  for (int32_t g = 0; g < group; ++g) {
    float* sc = scores.data() + static_cast<int64_t>(g) * padded;
    for (int32_t j = base; j < n; ++j) {
      sc[j - base] = j < lo ? -INFINITY : SoftCap(sc[j - base], sh.softcap);
    }
    const int32_t m_keys = n - base;  // keys base .. pos, as sc[0 .. m_keys)
    // Max over the keys (exact in any order), then exp and the 16-lane partial sums.
    __m512 vmax = _mm512_set1_ps(-INFINITY);
    for (int32_t j = 0; j < m_keys; j += 16) {
      const __mmask16 m =
          static_cast<__mmask16>(m_keys - j >= 16 ? 0xFFFF : (1u << (m_keys - j)) - 1);
      vmax = _mm512_max_ps(vmax, _mm512_mask_loadu_ps(_mm512_set1_ps(-INFINITY), m, sc + j));
    }
    const float sink = sinks != nullptr ? sinks[g] : -INFINITY;
    const __m512 mx = _mm512_set1_ps(std::max(_mm512_reduce_max_ps(vmax), sink));
    __m512 z = _mm512_setzero_ps();
    for (int32_t j = 0; j < m_keys; j += 16) {
      const __mmask16 m =
          static_cast<__mmask16>(m_keys - j >= 16 ? 0xFFFF : (1u << (m_keys - j)) - 1);
      // Keys before the window weigh exactly 0 (Exp512 clamps −inf to a tiny number).
      const __mmask16 live = j == 0 ? static_cast<__mmask16>(m & ~((1u << (lo - base)) - 1)) : m;
      const __m512 e =
          _mm512_maskz_mov_ps(live, Exp512(_mm512_sub_ps(_mm512_loadu_ps(sc + j), mx)));
      _mm512_mask_storeu_ps(sc + j, m, e);
      z = _mm512_add_ps(z, e);
    }
    invs[g] = 1.0f /
              (ReduceAdd512(z) + (sinks != nullptr ? std::exp(sink - _mm512_cvtss_f32(mx)) : 0.0f));
  }
  // Σ p · V for several heads at once (each V row read once for them; every head's
  // accumulators take the keys in order, as one head alone would).
  const int32_t nv = hd / 16;
  const int32_t heads = std::max(1, 16 / nv);
  const int64_t vstride = static_cast<int64_t>(cache.layout.n_kv_heads) * hd;
  for (int32_t g0 = 0; g0 < group; g0 += heads) {
    const int32_t ng = std::min(heads, group - g0);
    const float* p = scores.data() + static_cast<int64_t>(g0) * padded;
    float* o = out + static_cast<int64_t>(g0) * hd;
    // The common head sizes (64, 128) with their accumulators in registers.
    if (nv == 4 && ng == 4) {
      WeighValues<T, 4, 4>(p, padded, invs + g0, base, n, table, layer, kvh, cache, o);
      continue;
    }
    if (nv == 8 && ng == 2) {
      WeighValues<T, 8, 2>(p, padded, invs + g0, base, n, table, layer, kvh, cache, o);
      continue;
    }
    __m512 acc[16];
    for (int32_t a = 0; a < ng * nv; ++a) acc[a] = _mm512_setzero_ps();
    // Walk the blocks (no division per key); keys stay in order.
    for (int32_t j0 = base; j0 < n;) {
      const T* vr = VRow<T>(cache, table, j0, layer, kvh);
      const int32_t len = std::min(bs - j0 % bs, n - j0);
      for (int32_t i = 0; i < len; ++i, vr += vstride) {
        __m512 v[16];
        for (int32_t c = 0; c < nv; ++c) v[c] = Load16(0xFFFF, vr + 16 * c);
        for (int32_t g = 0; g < ng; ++g) {
          const __m512 p =
              _mm512_set1_ps(scores[static_cast<int64_t>(g0 + g) * padded + j0 - base + i]);
          for (int32_t c = 0; c < nv; ++c)
            acc[g * nv + c] = _mm512_fmadd_ps(p, v[c], acc[g * nv + c]);
        }
      }
      j0 += len;
    }
    for (int32_t g = 0; g < ng; ++g) {
      float* o = out + static_cast<int64_t>(g0 + g) * hd;
      const __m512 vinv = _mm512_set1_ps(invs[g0 + g]);
      for (int32_t c = 0; c < nv; ++c) {
        _mm512_storeu_ps(o + 16 * c, _mm512_mul_ps(acc[g * nv + c], vinv));
      }
    }
  }
}

template <class T>
void WriteKvAs(const float* k, const float* v, std::span<const int32_t> slots, int32_t layer,
               const KvView& cache) {
  const kv::KvLayout& L = cache.layout;
  const int64_t row = static_cast<int64_t>(L.n_kv_heads) * L.head_dim;
  for (size_t t = 0; t < slots.size(); ++t) {
    const int32_t block = slots[t] / L.block_size, slot = slots[t] % L.block_size;
    T* kt = cache.Part<T>(block, layer, 0) + slot;  // [kv_head][d][slot]
    T* vt = cache.Part<T>(block, layer, 1) + slot * row;
    const float* ks = k + t * row;
    const float* vs = v + t * row;
    for (int64_t i = 0; i < row; ++i) kt[i * L.block_size] = FromFloat<T>(ks[i]);
    for (int64_t i = 0; i < row; ++i) vt[i] = FromFloat<T>(vs[i]);
  }
}

template <class T>
void PagedAttentionAs(const float* q, const PagedBatch& batch, const AttentionShape& sh,
                      int32_t layer, const KvView& cache, float* out, ThreadPool* pool,
                      const float* sinks) {
  const std::vector<Row> rows = Rows(batch);
  const int32_t group = sh.n_heads / sh.n_kv_heads, hd = sh.head_dim;
  const int32_t bs = cache.layout.block_size;
  const bool fast = HaveAvx512() && hd % 16 == 0 && hd <= 256 && (bs % 16 == 0 || bs < 16);
  const bool avx2 = !fast && HaveAvx2Fma();
  // One item = one query row × one KV head (its `group` query heads together).
  auto work = [&](int64_t begin, int64_t end, int) {
    std::vector<float> scores;
    for (int64_t item = begin; item < end; ++item) {
      const int32_t t = static_cast<int32_t>(item / sh.n_kv_heads);
      const int32_t kvh = static_cast<int32_t>(item % sh.n_kv_heads);
      const Row r = rows[t];
      const int64_t first_head = static_cast<int64_t>(t) * sh.n_heads + kvh * group;
      const float* qv = q + first_head * hd;
      float* o = out + first_head * hd;
      const float* sk = sinks != nullptr ? sinks + kvh * group : nullptr;  // the group's
      auto sink = [&](int32_t g) { return sk != nullptr ? sk + g : nullptr; };
      if (fast) {
        AttendAvx512<T>(qv, group, r.pos, Table(batch, r.seq), layer, kvh, sh, cache, sk, scores,
                        o);
      } else if (avx2 && hd % 16 == 0) {
        AttendGroupAvx2<T>(qv, group, r.pos, Table(batch, r.seq), layer, kvh, sh, cache, sk, scores,
                           o);
      } else if (avx2) {
        for (int32_t g = 0; g < group; ++g) {
          AttendGenericAvx2<T>(qv + g * hd, r.pos, Table(batch, r.seq), layer, kvh, sh, cache,
                               sink(g), scores, o + g * hd);
        }
      } else {
        for (int32_t g = 0; g < group; ++g) {
          AttendGeneric<T>(qv + g * hd, r.pos, Table(batch, r.seq), layer, kvh, sh, cache, sink(g),
                           scores, o + g * hd);
        }
      }
    }
  };
  const int64_t items = static_cast<int64_t>(rows.size()) * sh.n_kv_heads;
  if (pool == nullptr) {
    work(0, items, 0);
  } else {
    pool->ParallelFor(items, work);
  }
}

template <class T>
void PagedAttentionReferenceAs(const float* q, const PagedBatch& batch, const AttentionShape& sh,
                               int32_t layer, const KvView& cache, float* out, const float* sinks) {
  const int32_t group = sh.n_heads / sh.n_kv_heads, hd = sh.head_dim;
  const int32_t bs = cache.layout.block_size;
  for (int32_t s = 0; s < batch.num_seqs(); ++s) {
    const int32_t len = batch.kv_len[s];
    const auto table = Table(batch, s);
    const int32_t q0 = batch.q_indptr[s], n_new = batch.q_indptr[s + 1] - q0;
    for (int32_t h = 0; h < sh.n_heads; ++h) {
      // Gather this head's K and V contiguously.
      std::vector<double> K(static_cast<size_t>(len) * hd), V(static_cast<size_t>(len) * hd);
      for (int32_t j = 0; j < len; ++j) {
        const T* kc = KColumn<T>(cache, table, j, layer, h / group);
        const T* vr = VRow<T>(cache, table, j, layer, h / group);
        for (int32_t d = 0; d < hd; ++d) {
          K[j * hd + d] = ToFloat(kc[static_cast<int64_t>(d) * bs]);
          V[j * hd + d] = ToFloat(vr[d]);
        }
      }
      for (int32_t t = 0; t < n_new; ++t) {
        const int32_t pos = len - n_new + t;
        const float* qv = q + (static_cast<int64_t>(q0 + t) * sh.n_heads + h) * hd;
        std::vector<double> w(pos + 1);
        double mx = -INFINITY, sum = 0;
        for (int32_t j = 0; j <= pos; ++j) {
          double dot = 0;
          for (int32_t d = 0; d < hd; ++d) dot += qv[d] * K[j * hd + d];
          w[j] = dot * sh.scale;
          if (sh.softcap > 0) w[j] = sh.softcap * std::tanh(w[j] / sh.softcap);
          if (sh.window > 0 && pos - j >= sh.window) w[j] = -INFINITY;  // outside the window
          mx = std::max(mx, w[j]);
        }
        if (sinks != nullptr) mx = std::max(mx, static_cast<double>(sinks[h]));
        for (auto& x : w) sum += (x = std::exp(x - mx));
        if (sinks != nullptr) sum += std::exp(sinks[h] - mx);
        float* o = out + (static_cast<int64_t>(q0 + t) * sh.n_heads + h) * hd;
        for (int32_t d = 0; d < hd; ++d) {
          double a = 0;
          for (int32_t j = 0; j <= pos; ++j) a += w[j] * V[j * hd + d];
          o[d] = static_cast<float>(a / sum);
        }
      }
    }
  }
}

// Calls fn.template operator()<T>() with T the cache's element type.
template <class Fn>
void WithElement(kv::KvDtype dtype, Fn&& fn) {
  switch (dtype) {
    case kv::KvDtype::kF32:
      return fn.template operator()<float>();
    case kv::KvDtype::kBF16:
      return fn.template operator()<Bf16>();
    case kv::KvDtype::kF16:
      return fn.template operator()<Fp16>();
  }
}

}  // namespace

void WriteKv(const float* k, const float* v, std::span<const int32_t> slots, int32_t layer,
             const KvView& cache) {
  WithElement(cache.layout.dtype, [&]<class T>() { WriteKvAs<T>(k, v, slots, layer, cache); });
}

void PagedAttention(const float* q, const PagedBatch& batch, const AttentionShape& sh,
                    int32_t layer, const KvView& cache, float* out, ThreadPool* pool,
                    const float* sinks) {
  WithElement(cache.layout.dtype, [&]<class T>() {
    PagedAttentionAs<T>(q, batch, sh, layer, cache, out, pool, sinks);
  });
}

void PagedAttentionReference(const float* q, const PagedBatch& batch, const AttentionShape& sh,
                             int32_t layer, const KvView& cache, float* out, const float* sinks) {
  WithElement(cache.layout.dtype, [&]<class T>() {
    PagedAttentionReferenceAs<T>(q, batch, sh, layer, cache, out, sinks);
  });
}

}  // namespace tandem::kernels
