// Random inputs and error measures the kernel tests share: normal noise from a seeded
// generator, and the largest relative error of one vector against another with any
// NaN counted as infinite (so an output a kernel never wrote, poisoned with NaN, fails).
#ifndef TANDEM_KERNELS_TESTING_NUMERIC_H_
#define TANDEM_KERNELS_TESTING_NUMERIC_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

namespace tandem::kernels::testing {

// n draws of N(0, scale²).
inline std::vector<float> Noise(int64_t n, std::mt19937& rng, float scale = 1.0f) {
  std::normal_distribution<float> g(0.0f, scale);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = g(rng);
  return v;
}

// max |a − b| / (1 + |b|) over the common length; infinite if any term is NaN, and
// if the lengths differ.
inline double MaxRelError(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return INFINITY;
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double e = std::abs(double{a[i]} - b[i]) / (1.0 + std::abs(double{b[i]}));
    if (std::isnan(e)) return INFINITY;
    worst = std::max(worst, e);
  }
  return worst;
}

}  // namespace tandem::kernels::testing

#endif  // TANDEM_KERNELS_TESTING_NUMERIC_H_
