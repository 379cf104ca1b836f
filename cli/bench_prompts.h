// Deterministic pseudo-random prompts for benchmarks (no special tokens).
#ifndef TANDEM_CLI_BENCH_PROMPTS_H_
#define TANDEM_CLI_BENCH_PROMPTS_H_

#include <algorithm>
#include <cstdint>
#include <vector>

namespace tandem::cli {

inline std::vector<int32_t> BenchPrompt(int32_t n, int32_t vocab, uint32_t salt) {
  std::vector<int32_t> ids(n);
  uint32_t x = 2463534242u ^ salt;
  for (auto& id : ids) {
    x ^= x << 13, x ^= x >> 17, x ^= x << 5;
    id = 100 + static_cast<int32_t>(x % static_cast<uint32_t>(vocab - 100));
  }
  return ids;
}

// The q-quantile (0..1) of `v`, nearest rank.
inline double Quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())));
  return v[i];
}

}  // namespace tandem::cli

#endif  // TANDEM_CLI_BENCH_PROMPTS_H_
