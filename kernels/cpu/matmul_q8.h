// MatMulQ8: out = x · Wᵀ with the activations quantized to 8 bits and integer dot
// products — the CPU's fast math (`--cpu-math fast`), what llama.cpp does for its
// quantized types, with tandem's invariance kept.
//
//   x     [m][k] float32, quantized row by row (QuantizeRowsQ8): each block of 32 gets
//         d = max|x| / 127 and q = x · (127 / max|x|) rounded to nearest, ties to even,
//         so q ∈ [−127, 127]; a block with max|x| below 1e-30 is all zeros. A row's
//         blocks depend on that row alone.
//   W     [n][k] Q8_0, Q4_0, Q5_0, IQ4_NL (w = d_w · q_w) or Q4_1, Q5_1 (w = d_w · q_w +
//         m_w), q_w an integer (Q8Supports says which types; others take MatMul's
//         float path).
//   a block b of one output contributes p_l = Σ_{e=4l}^{4l+3} q_w,e · q_e, l = 0…7 —
//         exact integers — to lanes 8·(b mod 2) + l of 16 float lanes:
//         acc ← fma(float(p_l), d_w · d_x, acc), then for the types with a min
//         acc ← fma(float(s_l), m_w · d_x, acc) with s_l = Σ q_e over the same four;
//         blocks in order, d_w · d_x and m_w · d_x rounded once;
//   out   the 16 lanes summed as MatMul sums its lanes: (l + l⊕8), (+ l⊕4), (+ l⊕2), (+ l⊕1).
//
// So out[i][j] depends on x[i] and W[j] alone — never on m, the other rows or the
// threads: batch-invariant and deterministic — and every ISA path gives the bits of
// MatMulQ8Reference, which states this arithmetic in scalar code (matmul_q8_test holds
// the paths to it). Against float32 activations the error is the quantization's, about
// 0.4 % of a block's largest term (kernels/cpu/matmul_q8_test.cc bounds it).
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
  int64_t cols = 0;         // k, a multiple of 32
  std::vector<int8_t> q;    // [rows][cols]
  std::vector<float> d;     // [rows][cols / 32]
  std::vector<float> sums;  // [rows][cols / 32][8]: each four quants' sum (exact)
};

// Whether MatMulQ8 has an integer path for weights of `type` (and k a multiple of 32).
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
