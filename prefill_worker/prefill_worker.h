// PrefillWorker: the prefill half of a disaggregated pair, without RPC types.
//
// Prefill(prompt, params, destination) queues the prompt; the engine thread batches
// queued prompts into one forward pass under the token budget (a longer prompt runs
// alone), samples each first token, and streams each prompt's K/V layer by layer to
// its decode worker while later layers still compute. The prompt's blocks are freed
// once the decode worker has acknowledged them. Prefill returns the first token, or
// the error that stopped the request: a failed transfer fails the request, and so does
// a failed forward pass (the engine ends that step's requests; the worker goes on
// serving the others and the next ones). A prompt computed in chunks whose transfer
// has failed (the decode worker died or its reservation is gone) stops at the next
// chunk instead of running to its end, and so does one whose caller has gone
// (`abandoned`: the router cancelled the call, or its deadline passed): dropped from the
// queue if it has not started, else at the next chunk boundary, its blocks freed once
// the transport has let go of them, its answer CANCELLED. A prompt nobody waits for
// costs at most the chunk in progress.
//
// Thread-safe: Prefill blocks its caller (an RPC thread) until the request is done.
#ifndef TANDEM_PREFILL_WORKER_PREFILL_WORKER_H_
#define TANDEM_PREFILL_WORKER_PREFILL_WORKER_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "common/engine/engine.h"
#include "common/engine/engine_thread.h"
#include "common/transport/kv_sender.h"

namespace tandem::prefill {

struct PrefillResult {
  engine::TokenEvent first;  // first.token, its logprobs, and first.reason when it ends the request
  double queue_ms = 0;
  double compute_ms = 0;
  double transfer_ms = 0;
  int64_t kv_bytes = 0;
  int64_t cached_tokens = 0;  // prompt tokens whose K/V came from the prefix cache
};

struct PrefillWorkerStats {
  engine::EngineStats engine;
  int64_t queued_prompt_tokens = 0;  // accepted and not yet computed
  int64_t kv_bytes_sent = 0;
  int64_t kv_failures = 0;
  int64_t kv_comm_rebuilds = 0;
};

class PrefillWorker {
 public:
  // `make_sender` builds the transport over the engine's KV storage (which outlives it).
  using SenderFactory = std::function<absl::StatusOr<std::unique_ptr<transport::KvSender>>(
      const kernels::KvStorage& kv)>;
  // Called on the engine thread when a KV transfer ends (for metrics); must be quick.
  using TransferObserver =
      std::function<void(const transport::KvTransferStats& stats, const absl::Status& status)>;
  static absl::StatusOr<std::unique_ptr<PrefillWorker>> Create(
      const engine::ModelWeights& weights, const engine::EngineOptions& options,
      const SenderFactory& make_sender, TransferObserver on_transfer = nullptr);
  ~PrefillWorker();

  absl::StatusOr<PrefillResult> Prefill(std::vector<int32_t> prompt,
                                        const engine::SamplingParams& params,
                                        const transport::KvDestination& destination,
                                        uint64_t cache_salt = 0,
                                        std::function<bool()> abandoned = nullptr);

  PrefillWorkerStats Stats() const;
  const kv::KvLayout& layout() const { return engine_->kv_layout(); }

 private:
  using Clock = std::chrono::steady_clock;
  // One request between Prefill's call and its answer. Engine thread only.
  struct Pending {
    transport::KvDestination destination;
    std::promise<absl::StatusOr<PrefillResult>> promise;
    Clock::time_point queued_at;
    Clock::time_point started_at;
    int64_t prompt_tokens = 0;
    std::unique_ptr<transport::KvTransfer> transfer;
    std::function<bool()> abandoned;  // the caller has gone (asked on the engine thread)
    absl::Status error;    // the transfer could not start, the pass failed, or the caller left
    bool stopped = false;  // cancelled in the engine: its transfer failed before its last chunk
    PrefillResult result;
  };
  class Observer;

  PrefillWorker() = default;
  bool Iterate();
  // The transfer of `id` ended: free its blocks and answer the caller.
  void Done(kv::SeqId id, absl::Status status, transport::KvTransferStats stats);

  std::unique_ptr<engine::Engine> engine_;
  std::unique_ptr<transport::KvSender> sender_;
  std::unique_ptr<Observer> observer_;
  TransferObserver on_transfer_;
  absl::flat_hash_map<kv::SeqId, std::unique_ptr<Pending>> pending_;  // engine thread

  mutable std::mutex mu_;
  PrefillWorkerStats stats_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<engine::EngineThread> thread_;  // last: stopped first
};

}  // namespace tandem::prefill

#endif  // TANDEM_PREFILL_WORKER_PREFILL_WORKER_H_
