#include "common/engine/speculative.h"

#include <algorithm>

namespace tandem::engine {

std::vector<int32_t> ProposeByPromptLookup(std::span<const int32_t> tokens, int32_t k,
                                           int32_t min_n, int32_t max_n) {
  const int64_t size = static_cast<int64_t>(tokens.size());
  if (k <= 0 || min_n < 1) return {};
  for (int64_t n = std::min<int64_t>(max_n, size - 1); n >= min_n; --n) {
    const std::span<const int32_t> tail = tokens.subspan(size - n);
    // The most recent earlier occurrence: start positions from the right, excluding the
    // tail itself.
    for (int64_t start = size - n - 1; start >= 0; --start) {
      if (!std::equal(tail.begin(), tail.end(), tokens.begin() + start)) continue;
      const int64_t from = start + n;
      const int64_t count = std::min<int64_t>(k, size - from);
      return {tokens.begin() + from, tokens.begin() + from + count};
    }
  }
  return {};
}

std::vector<SampleResult> VerifyDraft(std::span<const float> logits, int32_t vocab,
                                      std::span<const int32_t> draft, const SamplingParams& p,
                                      uint64_t seed, int64_t first_position,
                                      std::span<const int32_t> prompt,
                                      std::span<const int32_t> output) {
  // Every position drawn with the draft before it as context (what the engine does in
  // one batch), then cut where the draft first went wrong.
  std::vector<SampleResult> out;
  std::vector<int32_t> context(output.begin(), output.end());
  for (size_t i = 0; i <= draft.size(); ++i) {
    out.push_back(Sampler::Sample(logits.subspan(i * vocab, vocab), p, seed,
                                  first_position + static_cast<int64_t>(i), prompt, context));
    if (i < draft.size()) context.push_back(draft[i]);
  }
  out.resize(TokensToEmit(draft, out));
  return out;
}

size_t TokensToEmit(std::span<const int32_t> draft, std::span<const SampleResult> samples) {
  size_t n = 0;
  while (n < draft.size() && n < samples.size() && samples[n].token == draft[n]) ++n;
  return std::min(n + 1, samples.size());
}

std::vector<double> TargetProbabilities(std::span<const float> logits, const SamplingParams& p) {
  std::vector<double> dense(logits.size(), 0.0);
  if (p.temperature == 0.0) {
    dense[std::max_element(logits.begin(), logits.end()) - logits.begin()] = 1.0;
    return dense;
  }
  for (const auto& [token, prob] : Sampler::Distribution(logits, p)) dense[token] = prob;
  return dense;
}

RejectionResult RejectionSample(std::span<const double> p, std::span<const double> q, int32_t x,
                                double u_accept, double u_residual) {
  if (q[x] > 0 && u_accept * q[x] < p[x]) return {true, x};
  // The residual norm(max(p − q, 0)).
  double total = 0;
  for (size_t t = 0; t < p.size(); ++t) total += std::max(p[t] - q[t], 0.0);
  const bool use_p = total <= 0;  // p == q up to rounding: the residual is p itself
  if (use_p) total = 1.0;
  double cum = 0;
  int32_t last = -1;
  for (size_t t = 0; t < p.size(); ++t) {
    const double w = use_p ? p[t] : std::max(p[t] - q[t], 0.0);
    if (w <= 0) continue;
    last = static_cast<int32_t>(t);
    cum += w / total;
    if (u_residual < cum) return {false, last};
  }
  return {false, last};  // rounding left the sum short of u: the last possible token
}

}  // namespace tandem::engine
