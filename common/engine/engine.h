// Engine: the single-process generation loop — queue, continuous batching,
// preemption by recompute, cancellation — over one model and one KV cache.
//
// Each Step() = scheduler.Schedule() → executor.Forward() → sample → append → finish.
// Requests join and leave at every step. The engine is driven by one thread (the
// caller of Step); AddRequest/Cancel must come from that same thread. Tokens are
// returned as events from Step.
#ifndef TANDEM_COMMON_ENGINE_ENGINE_H_
#define TANDEM_COMMON_ENGINE_ENGINE_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "common/engine/model_executor.h"
#include "common/engine/model_weights.h"
#include "common/engine/sampler.h"
#include "common/engine/scheduler.h"
#include "common/engine/sequence.h"
#include "common/kv/block_manager.h"
#include "common/kv/kv_cache.h"
#include "kernels/cpu/cpu_backend.h"

namespace tandem::engine {

struct EngineOptions {
  int64_t kv_cache_bytes = int64_t{256} << 20;
  int32_t block_size = 16;
  int num_threads = 0;  // 0: every core
  SchedulerOptions scheduler;
};

// One generated token (or the end of a request).
struct TokenEvent {
  kv::SeqId id = 0;
  int32_t token = -1;  // -1 when the event only ends the request (cancel)
  float logprob = 0;
  std::vector<TokenLogprob> top_logprobs;
  bool finished = false;
  FinishReason reason = FinishReason::kNone;
};

struct EngineStats {
  int32_t running = 0;
  int32_t waiting = 0;
  int64_t preemptions = 0;
  kv::BlockManagerStats blocks;
  int64_t steps = 0;
  int64_t prompt_tokens_computed = 0;  // incl. recomputation after preemption
  int64_t generated_tokens = 0;
};

class Engine {
 public:
  static absl::StatusOr<std::unique_ptr<Engine>> Create(const ModelWeights& weights,
                                                        const EngineOptions& options);

  // Validates and queues a request. InvalidArgument names the bad field: empty
  // prompt, token ids out of range, prompt + max_tokens over the context or over the
  // whole KV cache, bad sampling parameters.
  absl::StatusOr<kv::SeqId> AddRequest(std::vector<int32_t> prompt, const SamplingParams& params);

  // Ends a request at the next step boundary (its blocks are freed now); the next
  // Step reports it finished with kCancelled. Unknown ids are ignored.
  void Cancel(kv::SeqId id);

  // Runs one forward pass over the scheduled batch; returns the tokens it produced.
  absl::StatusOr<std::vector<TokenEvent>> Step();

  bool HasWork() const { return !sequences_.empty(); }
  const Sequence* Find(kv::SeqId id) const;
  EngineStats Stats() const;
  const kv::KvCache& cache() const { return *cache_; }
  int num_threads() const { return backend_->num_threads(); }

 private:
  Engine() = default;
  void Finish(Sequence* seq, FinishReason reason, std::vector<TokenEvent>* events);

  const ModelWeights* weights_ = nullptr;
  std::unique_ptr<kernels::CpuBackend> backend_;
  std::unique_ptr<kv::KvCache> cache_;
  std::unique_ptr<kv::BlockManager> blocks_;
  std::unique_ptr<Scheduler> scheduler_;
  std::unique_ptr<ModelExecutor> executor_;
  absl::flat_hash_map<kv::SeqId, std::unique_ptr<Sequence>> sequences_;
  std::vector<kv::SeqId> cancelled_;
  kv::SeqId next_id_ = 1;
  uint64_t seed_counter_ = 0x5eed;
  EngineStats stats_;
  ForwardBatch batch_;
  std::vector<float> logits_;
};

}  // namespace tandem::engine

#endif  // TANDEM_COMMON_ENGINE_ENGINE_H_
