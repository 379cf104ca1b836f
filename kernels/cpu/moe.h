// Mixture-of-experts routing and grouping on the host: what Backend::MoeRoute and
// Backend::MoeFfn (kernels/backend.h) mean, in the plain code the CPU backend runs.
//
// RouteExperts picks each row's experts from its router logits: softmax gating picks
// on the logits themselves (softmax is monotone, so this is the pick of the
// probabilities without their rounding), sigmoid gating on sigmoid(logit) + bias,
// softmax-weight gating on the logits; the larger value first, the lower expert id
// first on equal values. Softmax is computed over every expert as max-subtracted
// exponentials summed in id order; a row depends on that row alone.
//
// GroupByExpert orders a batch's (token, slot) pairs by expert, then token, then slot,
// so that each expert's rows can be multiplied in one matrix product.
#ifndef TANDEM_KERNELS_CPU_MOE_H_
#define TANDEM_KERNELS_CPU_MOE_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "kernels/backend.h"

namespace tandem::kernels {

// ids [rows][r.used], weights [rows][r.used] from logits [rows][r.experts]; `bias`
// [r.experts] or null.
void RouteExperts(const float* logits, const float* bias, int64_t rows, const MoeRouting& r,
                  int32_t* ids, float* weights);

// A batch's (token, slot) pairs grouped by expert: expert e's pairs are
// pairs[begin[e] .. begin[e + 1]), each pair t · used + s, in increasing order.
struct ExpertGroups {
  std::vector<int32_t> begin;  // [experts + 1]
  std::vector<int32_t> pairs;  // [rows · used]
};

// InvalidArgument when an id lies outside [0, experts).
absl::Status GroupByExpert(const int32_t* ids, int64_t rows, int32_t used, int32_t experts,
                           ExpertGroups* out);

}  // namespace tandem::kernels

#endif  // TANDEM_KERNELS_CPU_MOE_H_
