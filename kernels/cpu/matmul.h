// MatMul: out = x · Wᵀ for float32 activations and (possibly quantized) weights.
//
//   x    [m][k]   float32, row-major
//   W    [n][k]   one row per output feature, in its GGUF type: F32, F16, BF16 or any
//                 type model::Dequantize decodes block by block (Q8_0, Q4_0, Q4_1,
//                 Q5_0, Q5_1, IQ4_NL, MXFP4, Q2_K … Q6_K, IQ4_XS)
//   out  [m][n]   float32
//
// Weights stay quantized in memory and are decoded on the fly (small m) or into a
// per-thread float panel reused by every row (large m). Every type has a vectorized
// decoder (the K, IQ4 and 5-bit ones in 8-lane AVX2 code the AVX-512 path shares). Both paths
// decode with the same arithmetic and accumulate each output in the same order: 16 lanes over k in
// steps of 16, then one fixed horizontal sum. So out[i][j] depends only on x[i] and
// W[j] — never on m, on the other rows, or on how work is split across threads. That
// is what makes the engine batch-invariant.
//
// The AVX-512 and AVX2 + FMA kernels share one arithmetic, so they give the same bits:
// weights decoded exactly as model::Dequantize decodes them; lane l (0…15) of an output
// accumulates x[16t + l]·w[16t + l] for t = 0, 1, … by fused multiply-add; the lanes are
// then summed as (l + l⊕8), (+ l⊕4), (+ l⊕2), (+ l⊕1). matmul.cc is compiled with
// -ffp-contract=off so that no other multiply-add is fused. The portable kernel (no
// AVX2) keeps the 16 lanes but rounds products and sums separately.
//
// MatMulReference is the plain definition (double accumulation) the tests compare
// against. Both are thread-safe for distinct outputs.
#ifndef TANDEM_KERNELS_CPU_MATMUL_H_
#define TANDEM_KERNELS_CPU_MATMUL_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <initializer_list>

#include "common/model/ggml_type.h"
#include "kernels/cpu/thread_pool.h"

namespace tandem::kernels {

struct WeightMatrix {
  model::GgmlType type = model::GgmlType::kF32;
  int64_t rows = 0;               // n: output features
  int64_t cols = 0;               // k: input features (a multiple of the type's block size)
  const uint8_t* data = nullptr;  // rows × RowBytes()
  size_t RowBytes() const;
};

// Whether MatMul handles this type directly (others must be converted to F32 first).
bool MatMulSupports(model::GgmlType type);

void MatMul(const float* x, int64_t m, const WeightMatrix& w, float* out, ThreadPool* pool);

// Several matrices with the same input (e.g. Q, K, V) in one parallel loop:
// *outs[i] [m][ws[i]->rows] = x · ws[i]ᵀ. Same results as separate MatMul calls.
void MatMulGroup(const float* x, int64_t m, std::initializer_list<const WeightMatrix*> ws,
                 std::initializer_list<float* const*> outs, ThreadPool* pool);

void MatMulReference(const float* x, int64_t m, const WeightMatrix& w, float* out);

// Output columns [n0, n1) of out [m][w.rows] = x · wᵀ: what one chunk of MatMul's
// parallel loop computes, the same bits (MatMulJobs splits many products so).
void MatMulRows(const float* x, int64_t m, const WeightMatrix& w, float* out, int64_t n0,
                int64_t n1);
// The grain MatMul splits w's rows by for m rows of x.
int64_t MatMulGrain(int64_t m);

// Up to four matrices of one input width as one range of output rows [0, rows()), which
// one parallel loop splits (MatMulGroup, MatMulQ8Group): a chunk may cover a ragged
// piece of two matrices, and where a chunk ends never changes any output's arithmetic.
struct MatrixGroup {
  MatrixGroup(std::initializer_list<const WeightMatrix*> ws,
              std::initializer_list<float* const*> outs);
  int64_t rows() const { return start[n]; }
  // range(w, out, lo, hi) for the part of the group's rows [b, e) in each matrix, in
  // that matrix's own row numbers.
  template <typename Range>
  void Split(int64_t b, int64_t e, Range&& range) const {
    for (int i = 0; i < n; ++i) {
      const int64_t lo = std::max(b, start[i]), hi = std::min(e, start[i + 1]);
      if (lo < hi) range(*w[i], out[i], lo - start[i], hi - start[i]);
    }
  }

  const WeightMatrix* w[4] = {};
  float* out[4] = {};
  int64_t start[5] = {0};
  int n = 0;
};

// The instruction set MatMul uses on this machine ("avx512", "avx2" or "generic").
const char* MatMulIsa();

}  // namespace tandem::kernels

#endif  // TANDEM_KERNELS_CPU_MATMUL_H_
