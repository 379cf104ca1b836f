// Selection rules shared by the CPU and GPU samplers, written once for host and device
// (the GPU's reductions combine with exactly these functions; select_test.cc checks
// them against the CPU sampler's std::max_element).
//
//   Best / Better   the arg-max of a row: the larger logit wins, a tie goes to the
//                   lower token id (the CPU sampler's rule), NaN never wins. Better is
//                   commutative and associative, so any reduction tree — a warp's
//                   shuffles, a block's, the CPU's loop — returns the same token.
#ifndef TANDEM_KERNELS_SELECT_H_
#define TANDEM_KERNELS_SELECT_H_

#include <cstdint>

#include "kernels/cuda/attention_tile.h"  // TANDEM_HD

namespace tandem::kernels {

struct Best {
  float value;
  int32_t id;  // -1: nothing seen yet
};

TANDEM_HD Best NoBest() { return {0.f, -1}; }

TANDEM_HD Best Better(Best a, Best b) {
  if (a.id < 0 || a.value != a.value) return b.id < 0 || b.value != b.value ? NoBest() : b;
  if (b.id < 0 || b.value != b.value) return a;
  if (a.value != b.value) return a.value > b.value ? a : b;
  return a.id < b.id ? a : b;
}

}  // namespace tandem::kernels

#endif  // TANDEM_KERNELS_SELECT_H_
