// MatMulQ8: out = x · Wᵀ with the activations quantized to 8 bits and integer dot
// products — the CPU's fast math (`--cpu-math fast`), what llama.cpp does for its
// quantized types (its Q8_0 and Q8_K activation blocks), with tandem's invariance kept.
//
//   x     [m][k] float32, quantized row by row (QuantizeRowsQ8) in blocks of B values,
//         B = Q8ActivationBlock(the weight type): 32 for the types with blocks of 32,
//         256 for the super-block types. A block gets d_x = max|x| / 127 and
//         q = x · (127 / max|x|) rounded to nearest, ties to even, so q ∈ [−127, 127]; a
//         block with max|x| below 1e-30 is all zeros. A row's blocks depend on that row
//         alone.
//   W     [n][k] of a Q8Supports type, read as chunks of 32 weights (one block of 32;
//         one eighth of a super-block), as model::Dequantize decodes them:
//         D · c_h · w_e + M · n_h (the second term only for the types with a min), w_e
//         an integer quant, c_h and n_h integer scales of its halves h = e / 16, D and M
//         floats. Blocks of 32: c = n = 1, D = d (MXFP4: its E8M0 byte e as 2^(e − 128),
//         w_e its doubled E2M1 level), M = Q4_1/Q5_1's m. Super-blocks: D = d,
//         M = −dmin; c_h the 6-bit scale (Q4_K, Q5_K), ls − 32 (IQ4_XS) or the 16-weight
//         scale (Q6_K, Q3_K, Q2_K); n_h the 6-bit min (Q4_K, Q5_K, one per chunk) or
//         Q2_K's 4-bit one.
//   block b of the row (of 32 weights, or a super-block of 256) first sums in
//         integers: P = Σ_h c_h · Σ_{e∈h} w_e · q_e over its halves h of 16 weights
//         (blocks of 32: c = 1; both halves of a chunk share c for Q4_K, Q5_K, IQ4_XS)
//         and, for the types with a min, N = Σ_h n_h · Σ_{e∈h} q_e. Then it adds to float
//         accumulator b mod 8: acc ← fma(float(P), D · d_x, acc), then for the types with
//         a min acc ← fma(float(N), M · d_x, acc). float(P) is rounded to nearest (|P| <
//         2³¹ may pass 2²⁴ for the super-blocks); |N| < 2²⁴ is exact. Blocks in order,
//         accumulators from 0, D · d_x and M · d_x rounded once.
//   out   the eight accumulators summed: (l + l⊕4), (+ l⊕2), (+ l⊕1).
//
// So out[i][j] depends on x[i] and W[j] alone — never on m, the other rows or the
// threads: batch-invariant and deterministic — and every ISA path gives the bits of
// MatMulQ8Reference, which states this arithmetic in scalar code (matmul_q8_test holds
// the paths to it). Against float32 activations the error is the quantization's, at
// most half a step of the activation block per product (kernels/cpu/matmul_q8_test.cc
// bounds it).
//
// Decode (and batches below kQ8LaneRows rows), AVX2: one weight row per thread,
// decoded on the fly against each row of x (a super-block's factors unpacked once, its
// chunks summed in integer lanes; the nibble types two blocks at a time, their quants
// unsigned with the offset taken off in exact float, the activations laid out to match
// once per call), eight blocks' lanes summed into one vector so that one fma takes their
// float steps.
//
// Batches of kQ8LaneRows rows or more: x's rows in tiles of 16, held side by side in the
// lanes (QuantizedRows::lanes: each four quants of the 16 rows in one 64-byte line), so
// that four weights broadcast from a weight row meet four quants of every row in one
// step and each output's block sums gather in one int32 lane; the float step of a block
// then takes 16 outputs at once. Quants are made unsigned where the product allows
// (Q6_K + 32, Q3_K + 4, Q4_0 + 8, Q5_0 + 16, and on VNNI Q8_0, IQ4_NL, MXFP4 and
// IQ4_XS + 128), the offset taken off through the rows' quant sums as the start value;
// a half's (or block's) sum times its scale by vpmulld, the mins by madd on the rows'
// sums in int16 pairs. AVX-512 VNNI: vpdpbusd, tiles of 16 rows × 8 weight rows. AVX2:
// maddubs into int16 pairs (summed over the steps that cannot overflow them: 8 for 4-bit
// quants, 4 for 5-bit, 2 for Q6_K) then madd; Q8_0, IQ4_NL, MXFP4 and IQ4_XS on |w| with
// the signs moved to the activations; tiles of 16 × 4.
//
// AMX (Sapphire Rapids on; where the OS grants the tile state, HaveAmxInt8): the same
// lane layout of x is the tile product's second operand; 16 weight rows, decoded with
// their quants as they are, the first (tdpbssd, or tdpbusd for the min types' unsigned
// quants); one tile product gives a block's (or a scale group's) sums for 16 × 16
// outputs, read back a weight row at a time for the scale and the float step. Q4_K and
// Q5_K split each chunk scale as c = c_hi · 2^s + c_lo and multiply it into two planes
// of bytes, so that a super-block takes two running tile sums (P = 2^s · hi + lo).
// Used where it beats the VNNI tiles (kernels/cpu/matmul_q8.cc, UseAmx): the blocks of
// 32 and IQ4_XS from kQ8LaneRows rows, Q4_K and Q5_K from 32; not Q6_K, Q3_K, Q2_K.
//
// Thread-safe for distinct outputs; MatMulQ8Group quantizes x into per-thread buffers
// that grow once and are reused.
#ifndef TANDEM_KERNELS_CPU_MATMUL_Q8_H_
#define TANDEM_KERNELS_CPU_MATMUL_Q8_H_

#include <cstdint>
#include <initializer_list>
#include <span>
#include <vector>

#include "kernels/cpu/matmul.h"
#include "kernels/cpu/thread_pool.h"

namespace tandem::kernels {

// The version of the arithmetic above, bumped whenever its bits change: workers name it
// in their KV fingerprint, so that prefill and decode workers of builds that would give
// different bits do not pair (2: one integer per block, eight accumulators; 3: MXFP4
// joins the integer path).
constexpr const char* kQ8ArithmeticVersion = "3";

constexpr int64_t kQ8Block = 32;        // the activation block of the types with blocks of 32
constexpr int64_t kQ8SuperBlock = 256;  // that of the super-block types

// Rows of x quantized as the header says.
struct QuantizedRows {
  int64_t rows = 0;
  int64_t cols = 0;               // k, a multiple of `block`
  int64_t block = kQ8Block;       // values per scale: kQ8Block or kQ8SuperBlock
  std::vector<int8_t> q;          // [rows][cols]
  std::vector<float> d;           // [rows][cols / block]
  std::vector<float> block_sums;  // [rows][cols / 32]: each 32 quants' sum (exact)
  std::vector<int16_t> sums16;    // [rows][cols / 16]: each 16 quants' sum
  // The batch layout (rows ≥ kQ8LaneRows): tiles of 16 rows, the last padded with zero
  // rows, each row in a lane. Built by QuantizeRowsQ8 where the CPU has AVX2, always by
  // the reference; lane_tiles 0 where not built.
  int64_t lane_tiles = 0;
  std::vector<int8_t> lanes;       // [tiles][cols / 4][16 rows][4]: each four quants
  std::vector<int32_t> lane_sums;  // [tiles][cols / 16][16 rows]: each 16 quants' sum
  std::vector<float> lane_d;       // [tiles][cols / block][16 rows]: d
};
// Rows from which batches take the lane layout.
constexpr int64_t kQ8LaneRows = 8;

// Whether MatMulQ8 has an integer path for weights of `type`: Q8_0, Q4_0, Q4_1, Q5_0,
// Q5_1, IQ4_NL, MXFP4, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS (k a multiple of the type's
// block).
bool Q8Supports(model::GgmlType type);

// The activation block weights of `type` take: kQ8SuperBlock for the super-block types,
// else kQ8Block.
int64_t Q8ActivationBlock(model::GgmlType type);

// out->rows = m rows of x [m][k] quantized in blocks of `block` (out's buffers grow,
// never shrink); rows are split across `pool` (may be null).
void QuantizeRowsQ8(const float* x, int64_t m, int64_t k, QuantizedRows* out, ThreadPool* pool,
                    int64_t block = kQ8Block);

// *outs[i] [m][ws[i]->rows] = x · ws[i]ᵀ (every ws[i] of a Q8Supports type, k its cols),
// x quantized once in each activation block the matrices take.
void MatMulQ8Group(const float* x, int64_t m, std::initializer_list<const WeightMatrix*> ws,
                   std::initializer_list<float* const*> outs, ThreadPool* pool);

// The arithmetic above in scalar code: out [x.rows][w.rows] (x.block must be
// Q8ActivationBlock(w.type)).
void MatMulQ8Reference(const QuantizedRows& x, const WeightMatrix& w, float* out);
// The quantization above in scalar code.
void QuantizeRowsQ8Reference(const float* x, int64_t m, int64_t k, QuantizedRows* out,
                             int64_t block = kQ8Block);

// out [x.rows][w.rows] from rows already quantized (x.block as for the reference), on
// this machine's fastest path.
void MatMulQ8(const QuantizedRows& x, const WeightMatrix& w, float* out, ThreadPool* pool);

// One of a batch of independent products: out [m][w->rows] = x [m][w->cols] · wᵀ.
struct MatMulJob {
  const float* x = nullptr;
  int64_t m = 0;
  const WeightMatrix* w = nullptr;
  float* out = nullptr;
};

// Every job in one parallel loop over all their weight rows (a mixture of experts'
// active experts, each with rows of x of its own): each out the bits MatMul gives it
// alone — or, when `q8` and its type has an integer path (and w->cols % 32 == 0),
// MatMulQ8Group's. Jobs with the same x (pointer and m) and activation block quantize
// it once.
void MatMulJobs(std::span<const MatMulJob> jobs, bool q8, ThreadPool* pool);

// The instruction set MatMulQ8 uses here: "amx" (the batches of the types above, the
// others on VNNI; decode is AVX2's), "avx512vnni" (its batches), "avx2" or "generic".
const char* MatMulQ8Isa();

}  // namespace tandem::kernels

#endif  // TANDEM_KERNELS_CPU_MATMUL_Q8_H_
