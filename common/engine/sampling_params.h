// SamplingParams: how a request turns logits into tokens, and when it stops.
//
// Field names follow vLLM. Validate() checks every field (docs/api.md, "Statuses") and names the
// offending one in an InvalidArgument status.
#ifndef TANDEM_COMMON_ENGINE_SAMPLING_PARAMS_H_
#define TANDEM_COMMON_ENGINE_SAMPLING_PARAMS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace tandem::engine {

struct SamplingParams {
  int32_t max_tokens = 16;
  double temperature = 1.0;      // 0 = greedy
  int32_t top_k = 0;             // 0 or -1: off
  double top_p = 1.0;            // (0, 1]
  double min_p = 0.0;            // [0, 1]
  std::optional<uint64_t> seed;  // unset: the engine draws one
  std::vector<int32_t> stop_token_ids;
  double repetition_penalty = 1.0;  // > 0; 1 = off (applies to prompt and output tokens)
  double presence_penalty = 0.0;    // [-2, 2] (output tokens)
  double frequency_penalty = 0.0;   // [-2, 2] (output tokens)
  int32_t logprobs = -1;            // -1: none; n ≥ 0: sampled token plus the top n
  bool ignore_eos = false;
  // A grammar the output must follow (GBNF, root rule `root`; the router compiles JSON
  // Schema, regular expressions and choices to it). Empty: unconstrained.
  std::string grammar;
  // Added to a token's logit before the penalties (OpenAI's logit_bias), sorted by id,
  // ids unique; biases in [-100, 100].
  std::vector<std::pair<int32_t, float>> logit_bias;
  // This request decodes plainly even where the engine speculates (the tokens are the
  // same either way; it saves the draft's compute for requests that gain nothing).
  bool disable_speculation = false;
  // Scheduling, carried with the parameters every hop already passes: lower runs first
  // (vLLM's meaning) — the router's admission order (router.h AdmissionQueue) and, in
  // an engine, which running sequences grow first and which give way (are preempted)
  // when KV memory runs out. Any int32; 0 by default.
  int32_t priority = 0;

  static constexpr int32_t kMaxLogprobs = 20;
  static constexpr int32_t kMaxStopTokenIds = 64;
  static constexpr size_t kMaxGrammarBytes = 1 << 20;
  static constexpr size_t kMaxLogitBias = 1024;

  // `vocab_size` bounds top_k and stop ids; `max_context` bounds max_tokens.
  absl::Status Validate(int32_t vocab_size, int64_t max_context) const;
};

}  // namespace tandem::engine

#endif  // TANDEM_COMMON_ENGINE_SAMPLING_PARAMS_H_
