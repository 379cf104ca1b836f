// What random benchmark prompts are made of: deterministic pseudo-random token ids, and
// the vocabulary's ordinary (non-special) tokens; Quantile for the older benchmarks.
#ifndef TANDEM_CLI_BENCH_PROMPTS_H_
#define TANDEM_CLI_BENCH_PROMPTS_H_

#include <algorithm>
#include <cstdint>
#include <vector>

#include "cli/bench_stats.h"
#include "common/tokenizer/vocab.h"

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

// The ids of every token that is not special: what random benchmark prompts draw from.
inline std::vector<int32_t> OrdinaryTokens(const tokenizer::Vocab& vocab) {
  std::vector<int32_t> ids;
  for (int32_t id = 0; id < vocab.size(); ++id) {
    if (!vocab.IsSpecial(id)) ids.push_back(id);
  }
  return ids;
}

// The q-quantile (0..1) of `v` (bench_stats.h's Percentile: linear interpolation).
inline double Quantile(std::vector<double> v, double q) {
  return Percentile(std::move(v), q * 100);
}

}  // namespace tandem::cli

#endif  // TANDEM_CLI_BENCH_PROMPTS_H_
