#include "kernels/cpu/moe.h"

#include <algorithm>
#include <cmath>

#include "common/util/strings.h"

namespace tandem::kernels {

namespace {

// exps[i] = exp(v[i] − max v), returns their sum (in index order).
float Exponentials(const float* v, int64_t n, float* exps) {
  float top = v[0];
  for (int64_t i = 1; i < n; ++i) top = std::max(top, v[i]);
  float sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    exps[i] = std::exp(v[i] - top);
    sum += exps[i];
  }
  return sum;
}

}  // namespace

void RouteExperts(const float* logits, const float* bias, int64_t rows, const MoeRouting& r,
                  int32_t* ids, float* weights) {
  const int64_t n = r.experts, k = r.used;
  std::vector<float> key(static_cast<size_t>(n)), value(static_cast<size_t>(n));
  std::vector<int32_t> order(static_cast<size_t>(n));
  std::vector<float> picked(static_cast<size_t>(k));
  for (int64_t t = 0; t < rows; ++t) {
    const float* l = logits + t * n;
    int32_t* id = ids + t * k;
    float* w = weights + t * k;
    // key: what the pick compares; value: the gating value a pick's weight starts from.
    switch (r.gating) {
      case MoeGating::kSoftmax: {
        const float sum = Exponentials(l, n, value.data());
        for (int64_t e = 0; e < n; ++e) {
          key[e] = l[e];
          value[e] /= sum;
        }
        break;
      }
      case MoeGating::kSigmoid:
        for (int64_t e = 0; e < n; ++e) {
          value[e] = 1.0f / (1.0f + std::exp(-l[e]));
          key[e] = bias != nullptr ? value[e] + bias[e] : value[e];
        }
        break;
      case MoeGating::kSoftmaxWeight:
        for (int64_t e = 0; e < n; ++e) key[e] = value[e] = l[e];
        break;
    }
    for (int64_t e = 0; e < n; ++e) order[e] = static_cast<int32_t>(e);
    std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int32_t a, int32_t b) {
      return key[a] > key[b] || (key[a] == key[b] && a < b);
    });
    for (int64_t s = 0; s < k; ++s) {
      id[s] = order[s];
      picked[s] = value[order[s]];
    }
    if (r.gating == MoeGating::kSoftmaxWeight) {
      const float sum = Exponentials(picked.data(), k, w);
      for (int64_t s = 0; s < k; ++s) w[s] /= sum;
    } else {
      std::copy(picked.begin(), picked.end(), w);
    }
    if (r.normalize) {
      float sum = 0;
      for (int64_t s = 0; s < k; ++s) sum += w[s];
      for (int64_t s = 0; s < k; ++s) w[s] /= sum;
    }
    if (r.scale != 1.0f) {
      for (int64_t s = 0; s < k; ++s) w[s] *= r.scale;
    }
  }
}

absl::Status GroupByExpert(const int32_t* ids, int64_t rows, int32_t used, int32_t experts,
                           ExpertGroups* out) {
  const int64_t n = rows * used;
  out->begin.assign(static_cast<size_t>(experts) + 1, 0);
  for (int64_t i = 0; i < n; ++i) {
    if (ids[i] < 0 || ids[i] >= experts) {
      return absl::InvalidArgumentError(
          StrCat("moe: expert id ", ids[i], " outside [0, ", experts, ")"));
    }
    ++out->begin[ids[i] + 1];
  }
  for (int32_t e = 0; e < experts; ++e) out->begin[e + 1] += out->begin[e];
  out->pairs.resize(static_cast<size_t>(n));
  std::vector<int32_t> at(out->begin.begin(), out->begin.end() - 1);
  for (int64_t i = 0; i < n; ++i) out->pairs[at[ids[i]]++] = static_cast<int32_t>(i);
  return absl::OkStatus();
}

}  // namespace tandem::kernels
