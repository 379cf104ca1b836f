// Sequence: one request's tokens and progress through the engine.
//
// Its life is a small state machine: kWaiting (queued, or preempted back to the
// queue) → kRunning (holds KV blocks) → kFinished. A preempted sequence drops its KV
// and is recomputed from prompt + output when readmitted. Two states serve
// disaggregation: kReserved (a decode worker holds blocks for KV that a prefill worker
// will push; → kWaiting once prefilled) and kHeld (a prefill worker computed the prompt
// and keeps its blocks until they are sent). Owned and mutated only by the engine
// thread.
#ifndef TANDEM_COMMON_ENGINE_SEQUENCE_H_
#define TANDEM_COMMON_ENGINE_SEQUENCE_H_

#include <cstdint>
#include <vector>

#include "common/engine/finish_reason.h"
#include "common/engine/sampling_params.h"
#include "common/grammar/constraint.h"
#include "common/kv/block_manager.h"

namespace tandem::engine {

enum class SequenceState { kReserved, kWaiting, kRunning, kHeld, kFinished };

struct Sequence {
  kv::SeqId id = 0;
  std::vector<int32_t> prompt;
  std::vector<int32_t> output;
  SamplingParams params;
  uint64_t seed = 0;
  SequenceState state = SequenceState::kWaiting;
  FinishReason finish = FinishReason::kNone;
  int64_t num_cached = 0;  // leading tokens whose K/V are in the cache
  int32_t preemptions = 0;
  bool prefill_only = false;      // stop after the first token and hold the blocks
  uint64_t cache_salt = 0;        // prefix-cache namespace
  int64_t prefix_hit_tokens = 0;  // prompt tokens found in the prefix cache at admission
  int32_t shared_blocks = 0;      // kReserved: leading blocks shared from the prefix cache
  // Where the output stands in params.grammar (null: unconstrained); it has accepted
  // every output token.
  std::shared_ptr<grammar::Constraint> constraint;
  // Speculative decoding: tokens proposed to follow the output, checked by this step's
  // pass (their K/V computed after the last output token's); empty: a plain step.
  std::vector<int32_t> draft;
  // How often its drafts' tokens have held lately (a moving average, from 1), and the
  // passes since it last drafted: adaptive k (Engine::ProposeDrafts).
  double draft_acceptance = 1.0;
  int32_t steps_without_draft = 0;

  int64_t size() const { return static_cast<int64_t>(prompt.size() + output.size()); }
  int32_t TokenAt(int64_t i) const {
    if (i < static_cast<int64_t>(prompt.size())) return prompt[i];
    if (i < size()) return output[i - prompt.size()];
    return draft[i - size()];  // past the output: the draft being checked
  }
  // Tokens whose K/V the next forward pass must compute: [num_cached, size()).
  int64_t num_uncomputed() const { return size() - num_cached; }
};

}  // namespace tandem::engine

#endif  // TANDEM_COMMON_ENGINE_SEQUENCE_H_
