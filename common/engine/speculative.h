// Speculative decoding's model-free halves (issue #21): proposing tokens by prompt
// lookup, and verifying proposals against the target model so that what comes out is
// distributed exactly as plain sampling would have it.
//
// Verification follows Leviathan et al. (2023) and Chen et al. (2023): a token x drawn
// from a draft distribution q is kept with probability min(1, p(x) / q(x)), p the
// target's distribution after the request's processing (temperature, top-k, top-p,
// min-p: Sampler::Distribution); at the first rejection the token comes from
// norm(max(p − q, 0)) and the rest of the draft is dropped; when all k are kept, one more
// comes from the target's next row. Every emitted token is then distributed as plain
// sampling's (RejectionSample).
//
// A deterministic proposal (prompt lookup, a greedy draft model) has q one-hot at x:
// keeping x with probability p(x) and otherwise drawing from p without x is the same as
// drawing from p and comparing with x. VerifyDraft does exactly that, with the draw
// plain decoding would make at that position (Sampler::Sample, Philox(seed, position)),
// so a seeded request gives the same tokens with or without speculation whenever the
// target's logits for a position are the same in a multi-token pass as in a one-token
// one. Pure functions; thread-safe.
#ifndef TANDEM_COMMON_ENGINE_SPECULATIVE_H_
#define TANDEM_COMMON_ENGINE_SPECULATIVE_H_

#include <cstdint>
#include <span>
#include <vector>

#include "common/engine/sampler.h"
#include "common/engine/sampling_params.h"

namespace tandem::engine {

// Up to `k` tokens proposed by prompt lookup (vLLM's "ngram" method): the sequence's
// last n tokens are searched for earlier in `tokens` (prompt then output), for n from
// `max_n` down to `min_n`; at the first n that occurs, the tokens that followed its most
// recent earlier occurrence are proposed. Empty when nothing matches.
std::vector<int32_t> ProposeByPromptLookup(std::span<const int32_t> tokens, int32_t k,
                                           int32_t min_n = 1, int32_t max_n = 3);

// Deterministic drafts: `logits` holds draft.size() + 1 rows of `vocab` (the target's
// logits at positions first_position … first_position + k, the first one predicting
// draft[0]). Returns the tokens to append: the accepted prefix of `draft`, then the
// token sampled where the draft was first wrong (or after it, when all of it held).
// Each is Sampler::Sample of its row with the context so far (prompt, output, the
// accepted draft tokens before it), so the result equals plain decoding given the
// same logits.
std::vector<SampleResult> VerifyDraft(std::span<const float> logits, int32_t vocab,
                                      std::span<const int32_t> draft, const SamplingParams& p,
                                      uint64_t seed, int64_t first_position,
                                      std::span<const int32_t> prompt,
                                      std::span<const int32_t> output);

// How many of `samples` to emit: samples[i] is what position i drew (its context the
// draft tokens before it); the draft's tokens hold while they equal the draws, and the
// first draw that differs (or the one after the whole draft) is emitted too.
size_t TokensToEmit(std::span<const int32_t> draft, std::span<const SampleResult> samples);

// The target's distribution of a logits row under `p`, dense over the vocabulary (one-hot
// at the arg-max when temperature is 0).
std::vector<double> TargetProbabilities(std::span<const float> logits, const SamplingParams& p);

// One position of rejection sampling for x drawn from `q`: kept when u_accept <
// p(x) / q(x); otherwise the token is drawn from norm(max(p − q, 0)) with u_residual.
// p and q are dense distributions over the same vocabulary.
struct RejectionResult {
  bool accepted = false;
  int32_t token = -1;
};
RejectionResult RejectionSample(std::span<const double> p, std::span<const double> q, int32_t x,
                                double u_accept, double u_residual);

}  // namespace tandem::engine

#endif  // TANDEM_COMMON_ENGINE_SPECULATIVE_H_
