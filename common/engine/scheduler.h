// Scheduler: decides, before every engine step, which sequences run and what each
// computes, in two stages (after TensorRT-LLM's batch manager):
//
//   1. capacity — every running sequence must fit one more token in KV memory, the
//      lowest `priority` value first (SamplingParams::priority), then the oldest; when
//      blocks run out, the youngest running sequence of the highest value is preempted
//      (its blocks freed, it goes back to the front of the queue — behind waiting
//      sequences of a lower value — to be recomputed) until the rest fit;
//   2. batch — every decoding sequence gets its next token; prompts being prefilled
//      get their next chunk; then waiting sequences are admitted in arrival order
//      while the running count stays under max_running, the step's token budget
//      lasts and their blocks can be allocated (check, then commit). A waiting
//      sequence that already holds blocks (its prompt's KV arrived from a prefill
//      worker) only needs room for its next token.
//
// Chunked prefill: a prompt is computed in chunks of at most max_prefill_chunk tokens
// (a multiple of the block size), one chunk per step, so a short prompt that arrives
// behind a long one joins the next step instead of waiting for the whole long prompt.
// Blocks for the whole prompt are allocated at admission.
//
// Memory is blocks only: the scheduler calls the BlockManager, never the cache bytes.
// Not thread-safe: owned by the engine thread.
#ifndef TANDEM_COMMON_ENGINE_SCHEDULER_H_
#define TANDEM_COMMON_ENGINE_SCHEDULER_H_

#include <cstdint>
#include <deque>
#include <vector>

#include "common/engine/sequence.h"
#include "common/kv/block_manager.h"

namespace tandem::engine {

struct SchedulerOptions {
  int32_t max_running = 64;           // sequences in one batch
  int32_t max_batched_tokens = 2048;  // tokens per forward pass
  int32_t max_prefill_chunk = 512;    // prompt tokens of one sequence per step (0: no limit)
};

struct ScheduledStep {
  std::vector<Sequence*> sequences;  // sequence i computes tokens
  std::vector<int64_t> num_tokens;   // [num_cached, num_cached + num_tokens[i])
  std::vector<Sequence*> preempted;  // sent back to the queue in this step
  bool empty() const { return sequences.empty(); }
};

class Scheduler {
 public:
  Scheduler(const SchedulerOptions& options, kv::BlockManager* blocks)
      : options_(options), blocks_(blocks) {}

  void Enqueue(Sequence* seq);
  // Removes a sequence from the queues and frees its blocks.
  void Remove(Sequence* seq);
  // Removes a sequence from the queues and leaves its blocks allocated.
  void Detach(Sequence* seq);

  ScheduledStep Schedule();

  size_t num_waiting() const { return waiting_.size(); }
  size_t num_running() const { return running_.size(); }
  int64_t num_preemptions() const { return preemptions_; }

 private:
  void Preempt(Sequence* seq);
  // Tokens `seq` computes this step given `budget` left: all it lacks if that fits,
  // else a chunk ending on a block boundary; 0 if not even one block fits (unless
  // `alone`, when one block's worth is taken anyway so the step makes progress).
  int64_t ChunkOf(const Sequence& seq, int64_t budget, bool alone) const;

  SchedulerOptions options_;
  kv::BlockManager* blocks_;
  std::deque<Sequence*> waiting_;
  std::vector<Sequence*> running_;  // by priority (lowest value first), then oldest first
  int64_t preemptions_ = 0;
};

}  // namespace tandem::engine

#endif  // TANDEM_COMMON_ENGINE_SCHEDULER_H_
