// Scheduler: decides, before every engine step, which sequences run and what each
// computes, in two stages (after TensorRT-LLM's batch manager):
//
//   1. capacity — every running sequence must fit one more token in KV memory; when
//      blocks run out, the youngest running sequence is preempted (its blocks freed,
//      it goes back to the front of the queue to be recomputed) until the rest fit;
//   2. batch — waiting sequences are admitted in arrival order while the running
//      count stays under max_running, their tokens fit the step's token budget and
//      their blocks can be allocated (check, then commit). A waiting sequence that
//      already holds blocks (its prompt's KV arrived from a prefill worker) only needs
//      room for its next token.
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
  int32_t max_batched_tokens = 2048;  // tokens per forward pass (a longer prompt runs alone)
};

struct ScheduledStep {
  std::vector<Sequence*> sequences;  // each computes tokens [num_cached, size())
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

  SchedulerOptions options_;
  kv::BlockManager* blocks_;
  std::deque<Sequence*> waiting_;
  std::vector<Sequence*> running_;  // oldest first
  int64_t preemptions_ = 0;
};

}  // namespace tandem::engine

#endif  // TANDEM_COMMON_ENGINE_SCHEDULER_H_
