// Sampler: logits → the next token, as SamplingParams say.
//
// Steps, in order:
//   1. logit_bias added to the raw logits (vLLM's order), then penalties: repetition
//      (tokens seen in prompt or output:
//      positive logits ÷ r, negative × r), then frequency (− f × count in output) and
//      presence (− p if the token is in the output) — vLLM's definitions; then a
//      grammar's mask (tokens it forbids get −∞);
//   2. temperature 0 → the arg-max (lowest id on ties); stop here;
//   3. probabilities softmax(logits / temperature);
//   4. top-k keeps the k most probable; top-p keeps the smallest most-probable prefix
//      whose mass reaches p; min-p keeps tokens with prob ≥ min_p × the top prob;
//      ties are ordered by token id;
//   5. one uniform u = Philox(seed, position) picks from the renormalized rest.
// Logprobs are log-softmax of the logits after penalties, before temperature.
//
// Stateless and thread-safe. Distribution() exposes step 3–4 for tests. SampleRows
// takes a step's logits where the forward pass left them (backend memory): a greedy
// row (temperature 0, no penalties, no logprobs) is answered by the backend's ArgMax
// — only its token id leaves the device; every other row is copied to the host and
// sampled there (a device sampler drawing the same Philox numbers is future work).
#ifndef TANDEM_COMMON_ENGINE_SAMPLER_H_
#define TANDEM_COMMON_ENGINE_SAMPLER_H_

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "common/engine/sampling_params.h"
#include "kernels/backend.h"

namespace tandem::engine {

struct TokenLogprob {
  int32_t token;
  float logprob;
};

struct SampleResult {
  int32_t token = -1;
  float logprob = 0;              // of `token` (set when params.logprobs ≥ 0)
  std::vector<TokenLogprob> top;  // the params.logprobs most likely, best first
};

// One row of a step's logits to sample, and what Sample needs to know about it.
struct SampleRow {
  const SamplingParams* params;
  uint64_t seed;
  int64_t position;
  std::span<const int32_t> prompt;
  std::span<const int32_t> output;
  // A grammar's mask, one bit per token id (1 = allowed); empty: every token.
  std::span<const uint64_t> allowed = {};
};

class Sampler {
 public:
  // logits [rows.size()][vocab] in `backend`'s memory → one result per row; `ids`
  // ([1][≥ rows.size()] int32, backend memory) is scratch for the greedy rows' arg-max.
  // A failed copy comes back as the backend's status.
  static absl::StatusOr<std::vector<SampleResult>> SampleRows(kernels::Backend& backend,
                                                              const kernels::Tensor& logits,
                                                              const kernels::Tensor& ids,
                                                              std::span<const SampleRow> rows);
  // Whether SampleRows answers this row with the backend's arg-max alone.
  static bool IsPlainGreedy(const SamplingParams& p);

  // `logits` [vocab] of the position being sampled, which is `position` in the
  // sequence (its index counting prompt tokens from 0).
  // `allowed` (a grammar's mask, bit per token; empty: all) applies after the
  // penalties: a masked token's logit is −∞ for everything that follows, logprobs too.
  // When it allows no token the result is token −1.
  static SampleResult Sample(std::span<const float> logits, const SamplingParams& p, uint64_t seed,
                             int64_t position, std::span<const int32_t> prompt,
                             std::span<const int32_t> output,
                             std::span<const uint64_t> allowed = {});

  // Step 1 in place.
  static void ApplyPenalties(std::span<float> logits, const SamplingParams& p,
                             std::span<const int32_t> prompt, std::span<const int32_t> output);

  // Steps 3–4: the (token, probability) pairs left, most probable first, summing to 1.
  // Requires temperature > 0.
  static std::vector<std::pair<int32_t, double>> Distribution(std::span<const float> logits,
                                                              const SamplingParams& p);
};

}  // namespace tandem::engine

#endif  // TANDEM_COMMON_ENGINE_SAMPLER_H_
