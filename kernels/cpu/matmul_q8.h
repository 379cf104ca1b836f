// MatMulQ8: out = x · Wᵀ with the activations quantized to 8 bits and integer dot
// products — the CPU's fast math (`--cpu-math fast`), what llama.cpp does for its
// quantized types, with tandem's invariance kept.
//
//   x     [m][k] float32, quantized row by row (QuantizeRowsQ8): each block of 32 gets
//         d_x = max|x| / 127 and q = x · (127 / max|x|) rounded to nearest, ties to even,
//         so q ∈ [−127, 127]; a block with max|x| below 1e-30 is all zeros. A row's
//         blocks depend on that row alone.
//   W     [n][k] of a Q8Supports type, read as chunks of 32 weights (one block of the
//         32-types; one eighth of a 256-super-block of Q2_K … Q6_K and IQ4_XS), chunk b of
//         a row standing against block b of x. A chunk is, as model::Dequantize decodes it,
//         D · c_h · w_e + M · n_h (the second term only for the types with a min):
//         w_e an integer quant, c_h and n_h integer scales of its halves h = e / 16
//         (Q6_K, Q3_K, Q2_K; 1 elsewhere), D and M floats (Q4_K: D = d · sc, M = −dmin · m;
//         IQ4_XS: D = d · (ls − 32); Q2_K: M = −dmin; the 32-types: d and Q4_1/Q5_1's m).
//   lanes a chunk b adds P_l = c_h · Σ_{e=4l}^{4l+3} w_e · q_e, l = 0…7 — exact integers —
//         to lanes 8·(b mod 2) + l of 16 float lanes: acc ← fma(float(P_l), D · d_x, acc),
//         then for Q4_1, Q5_1 and Q2_K acc ← fma(float(n_h · s_l), M · d_x, acc) with s_l
//         = Σ q_e over the same four; chunks in order, D · d_x and M · d_x rounded once.
//         Q4_K and Q5_K, whose min is one per chunk, add it to eight lanes of their own:
//         mins[b mod 8] ← fma(S_b, M · d_x, mins[b mod 8]), S_b the chunk's Σ q_e.
//   out   the 16 lanes summed as MatMul sums its lanes: (l + l⊕8), (+ l⊕4), (+ l⊕2),
//         (+ l⊕1); for Q4_K and Q5_K plus the mins' lanes summed the same way (lanes 8–15
//         zero).
//
// So out[i][j] depends on x[i] and W[j] alone — never on m, the other rows or the
// threads: batch-invariant and deterministic — and every ISA path gives the bits of
// MatMulQ8Reference, which states this arithmetic in scalar code (matmul_q8_test holds
// the paths to it). Against float32 activations the error is the quantization's, about
// 0.4 % of a block's largest term (kernels/cpu/matmul_q8_test.cc bounds it).
//
// AVX2: decode (m = 1) streams one weight row per thread, decoding each chunk on the
// fly with a super-block's factors unpacked once; a batch (m > 1) decodes two weight
// rows once into a buffer and runs 2 × 2 tiles of rows down it.
//
// Thread-safe for distinct outputs; MatMulQ8Group quantizes x into a per-thread buffer
// that grows once and is reused.
#ifndef TANDEM_KERNELS_CPU_MATMUL_Q8_H_
#define TANDEM_KERNELS_CPU_MATMUL_Q8_H_

#include <cstdint>
#include <initializer_list>
#include <vector>

#include "kernels/cpu/matmul.h"
#include "kernels/cpu/thread_pool.h"

namespace tandem::kernels {

constexpr int64_t kQ8Block = 32;

// Rows of x quantized as the header says.
struct QuantizedRows {
  int64_t rows = 0;
  int64_t cols = 0;               // k, a multiple of 32
  std::vector<int8_t> q;          // [rows][cols]
  std::vector<float> d;           // [rows][cols / 32]
  std::vector<float> sums;        // [rows][cols / 32][8]: each four quants' sum (exact)
  std::vector<float> block_sums;  // [rows][cols / 32]: each block's sum (exact)
};

// Whether MatMulQ8 has an integer path for weights of `type`: Q8_0, Q4_0, Q4_1, Q5_0,
// Q5_1, IQ4_NL, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS (k a multiple of the type's block).
bool Q8Supports(model::GgmlType type);

// out->rows = m rows of x [m][k] quantized (out's buffers grow, never shrink); rows are
// split across `pool` (may be null).
void QuantizeRowsQ8(const float* x, int64_t m, int64_t k, QuantizedRows* out, ThreadPool* pool);

// *outs[i] [m][ws[i]->rows] = x · ws[i]ᵀ (every ws[i] of a Q8Supports type, k its cols),
// x quantized once for all of them.
void MatMulQ8Group(const float* x, int64_t m, std::initializer_list<const WeightMatrix*> ws,
                   std::initializer_list<float* const*> outs, ThreadPool* pool);

// The arithmetic above in scalar code: out [x.rows][w.rows].
void MatMulQ8Reference(const QuantizedRows& x, const WeightMatrix& w, float* out);
// The quantization above in scalar code.
void QuantizeRowsQ8Reference(const float* x, int64_t m, int64_t k, QuantizedRows* out);

// out [x.rows][w.rows] from rows already quantized, on this machine's fastest path.
void MatMulQ8(const QuantizedRows& x, const WeightMatrix& w, float* out, ThreadPool* pool);

// The instruction set MatMulQ8 uses here ("avx2" or "generic").
const char* MatMulQ8Isa();

}  // namespace tandem::kernels

#endif  // TANDEM_KERNELS_CPU_MATMUL_Q8_H_
