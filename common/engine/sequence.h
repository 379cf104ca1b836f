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

  int64_t size() const { return static_cast<int64_t>(prompt.size() + output.size()); }
  int32_t TokenAt(int64_t i) const {
    return i < static_cast<int64_t>(prompt.size()) ? prompt[i] : output[i - prompt.size()];
  }
  // Tokens whose K/V the next forward pass must compute: [num_cached, size()).
  int64_t num_uncomputed() const { return size() - num_cached; }
};

}  // namespace tandem::engine

#endif  // TANDEM_COMMON_ENGINE_SEQUENCE_H_
