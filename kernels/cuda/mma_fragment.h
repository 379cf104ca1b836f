// Register fragments of the tensor-core instruction the prefill attention kernel uses,
// mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 (PTX ISA, "Matrix fragments for
// mma.m16n8k16"), written once for host and device so the kernel's index math runs on
// the CPU too (attention_mma_test.cc emulates the whole warp with these functions).
//
// A warp computes D [16][8] = A [16][16] · B [16][8] + C. Lane `lane` holds, with
// g = lane / 4 and c = lane % 4:
//   A: a0..a7 (four 32-bit registers of two bf16, low half first)
//        row g + 8·((i / 2) % 2), column 2c + i % 2 + 8·(i / 4)
//   B: b0..b3 (two registers)   row (k) 2c + i % 2 + 8·(i / 2), column (n) g
//   C, D: c0..c3 (float)        row g + 8·(i / 2), column 2c + i % 2
// So the C fragments of two adjacent 8-column tiles, 16j..16j+7 and 16j+8..16j+15,
// are exactly the A fragment of columns 16j..16j+15: FlashAttention-2's P = softmax(S)
// goes from the S accumulators into the P·V product without leaving registers
// (PFromS below).
#ifndef TANDEM_KERNELS_CUDA_MMA_FRAGMENT_H_
#define TANDEM_KERNELS_CUDA_MMA_FRAGMENT_H_

#include <cstdint>

#include "kernels/cuda/attention_tile.h"  // TANDEM_HD

namespace tandem::kernels::mma {

struct Index {
  int32_t row, col;
};

TANDEM_HD Index ElemA(int32_t lane, int32_t i) {
  return {lane / 4 + 8 * ((i / 2) % 2), 2 * (lane % 4) + i % 2 + 8 * (i / 4)};
}
// (k, n) of b_i.
TANDEM_HD Index ElemB(int32_t lane, int32_t i) {
  return {2 * (lane % 4) + i % 2 + 8 * (i / 2), lane / 4};
}
TANDEM_HD Index ElemC(int32_t lane, int32_t i) {
  return {lane / 4 + 8 * (i / 2), 2 * (lane % 4) + i % 2};
}

// Element i (0..7) of the A fragment over columns 16j..16j+15 from the C fragments
// s_lo (columns 16j..16j+7) and s_hi (16j+8..16j+15) of the same lane.
TANDEM_HD float PFromS(const float* s_lo, const float* s_hi, int32_t i) {
  return (i < 4 ? s_lo : s_hi)[i % 4];
}

// The lanes of one quad (same g) hold the 8 columns of a fragment row: a row's max or
// sum is a reduction over lanes lane ^ 1 and lane ^ 2.

// Causal (and, with window > 0, sliding-window) mask of a key at `key_pos` for the
// query at `q_pos` of the same sequence.
TANDEM_HD bool Visible(int32_t key_pos, int32_t q_pos, int32_t window = 0) {
  return key_pos <= q_pos && (window <= 0 || q_pos - key_pos < window);
}

// Tiles of the prefill kernel: kQRows query rows per thread block (16 per warp),
// kKeys keys per step. A sequence of n new rows takes ceil(n / kQRows) blocks; the grid
// covers at most ceil(T / kQRows) + S of them.
constexpr int32_t kWarps = 4;
constexpr int32_t kQRows = 16 * kWarps;
constexpr int32_t kKeys = 64;

// The (sequence, first row) the prefill grid's block `tile` computes, or false past the
// last tile: tiles are numbered sequence by sequence.
TANDEM_HD bool TileOf(const int32_t* q_indptr, int32_t seqs, int32_t tile, int32_t* seq,
                      int32_t* row0) {
  int32_t before = 0;
  for (int32_t s = 0; s < seqs; ++s) {
    const int32_t n = q_indptr[s + 1] - q_indptr[s];
    const int32_t tiles = (n + kQRows - 1) / kQRows;
    if (tile < before + tiles) {
      *seq = s;
      *row0 = q_indptr[s] + (tile - before) * kQRows;
      return true;
    }
    before += tiles;
  }
  return false;
}

}  // namespace tandem::kernels::mma

#endif  // TANDEM_KERNELS_CUDA_MMA_FRAGMENT_H_
