// DecodeWorker: the decode half of a disaggregated pair, without RPC types.
//
// Owns one Engine and the one thread that drives it. Requests arrive prefilled: the
// router Reserves blocks under a lease, a prefill worker writes the prompt's K/V into
// them (BeginKv / WriteKv / EndKv), then StartDecode admits the sequence at the next
// step boundary and its tokens flow to a TokenSink. Or, under selective
// disaggregation, no prefill worker takes part: StartDecode without a first token has
// this worker's engine compute the prompt into the reservation, in its own steps. Leases
// that see no StartDecode in time are reclaimed at a step boundary (every KV write renews
// the lease, so a long prompt prefilled in chunks keeps it); KV for an unknown or
// expired lease is refused.
//
// Thread-safe: every public method may be called from any thread (RPC threads). Engine
// calls happen on the engine thread only; RPC threads queue commands for it. Only the
// engine thread writes KV: an RPC thread checks a received payload against the lease
// (under `mu_`) and hands it over; the engine thread checks the lease again (it may
// have expired meanwhile) and writes it through Engine::WriteReservedKv at the next
// step boundary; a sender waits while more than kMaxPendingKvBytes are queued. EndKv
// checks that every block of every layer was handed over;
// StartDecode runs on the engine thread after those writes (commands run in order)
// and refuses a lease whose write failed.
//
// On a peer transport (NCCL, CUDA IPC) a chunk names its payload instead of carrying
// it: AcceptPeerKv checks and counts it like WriteKv before any byte moves, the
// transport (peer_kv_receiver.h) receives it into a staging buffer and hands it over
// with PeerKvArrived (the engine thread scatters it into the blocks) or reports
// PeerKvFailed; EndKv waits until every accepted payload has done one or the other.
//
// Lease ids are random 64-bit values (not the engine's sequential ids), so a caller
// cannot guess another's lease; every reservation also carries the worker's epoch
// (random per process), so KV naming another epoch is refused before any write.
// A reservation that is gone (unknown, expired, another epoch's) is NOT_FOUND: the
// request's resource vanished, not the request's fault (the router answers such
// failures UNAVAILABLE so that clients retry).
//
// A forward pass that fails ends the requests of that step (their sinks get the
// error); the worker keeps serving.
#ifndef TANDEM_DECODE_WORKER_DECODE_WORKER_H_
#define TANDEM_DECODE_WORKER_DECODE_WORKER_H_

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "common/engine/engine.h"
#include "common/engine/engine_thread.h"
#include "common/transport/staging_pool.h"

namespace tandem::decode {

struct DecodeWorkerOptions {
  engine::EngineOptions engine;
  std::chrono::milliseconds max_lease{600000};
};

struct Reservation {
  uint64_t lease_id = 0;
  uint64_t epoch = 0;  // DecodeWorker::epoch()
  std::vector<int32_t> block_ids;
  int32_t cached_blocks = 0;  // leading blocks already holding the prompt's K/V
};

// Receives one sequence's tokens on the engine thread. Must not block.
class TokenSink {
 public:
  virtual ~TokenSink() = default;
  // A generated token, or (token < 0) only the end. `finished` marks the last call.
  virtual void OnToken(const engine::TokenEvent& event) = 0;
  // The engine failed; no further calls.
  virtual void OnError(const absl::Status& status) = 0;
};

struct DecodeWorkerStats {
  engine::EngineStats engine;
  int32_t leases = 0;
  int64_t expired_leases = 0;
  int64_t kv_bytes_received = 0;
  int64_t kv_failures = 0;
};

class DecodeWorker {
 public:
  // `weights` must outlive the worker.
  static absl::StatusOr<std::unique_ptr<DecodeWorker>> Create(const engine::ModelWeights& weights,
                                                              const DecodeWorkerOptions& options);
  ~DecodeWorker();  // stops the engine thread; open sinks get OnError(Unavailable)

  // Blocks for `num_tokens` tokens, held for `lease`; the leading blocks of `prompt`
  // that this worker's prefix cache holds are shared rather than allocated (they are
  // then neither sent nor written). ResourceExhausted when they do not fit now.
  // `key` (nonzero; 0: none) is the caller's name for the reservation (see Abandon);
  // Cancelled when the key was abandoned already.
  absl::StatusOr<Reservation> Reserve(int64_t num_tokens, std::chrono::milliseconds lease,
                                      std::span<const int32_t> prompt = {}, uint64_t cache_salt = 0,
                                      uint64_t key = 0);
  // Frees an unused reservation; false when the lease is unknown.
  bool Release(uint64_t lease_id);
  // The caller never got Reserve's answer: frees the unused reservation made under
  // `key`, or, when none was made yet, makes a later Reserve under it fail (the last
  // kAbandonedKeys keys are remembered). True when a lease was freed.
  bool Abandon(uint64_t key);

  // One KV push: BeginKv with the destination block ids (the reservation's, in order,
  // possibly fewer), WriteKv per (layer, run of blocks), EndKv to check completeness.
  absl::Status BeginKv(uint64_t lease_id, uint64_t epoch, std::span<const int32_t> block_ids);
  // `payload`: num_blocks × (K then V of `layer` for one block), in the layout's dtype.
  absl::Status WriteKv(uint64_t lease_id, int32_t layer, int32_t first_block, int32_t num_blocks,
                       std::string payload);
  // After the last chunk: waits for the lease's peer payloads to arrive or fail, then
  // checks that every block of every layer came. DataLoss when some did not.
  absl::Status EndKv(uint64_t lease_id);
  // Waits for the lease's accepted peer payloads to arrive or fail (EndKv's first half,
  // for a push that stops early).
  void AwaitPeerKv(uint64_t lease_id);

  // Peer transports. AcceptPeerKv: WriteKv's checks and counting for a payload of
  // num_blocks × LayerBytes() that will arrive on the transport; once OK, exactly one of
  // PeerKvArrived (the bytes are in `staging`, returned to its pool after the write)
  // or PeerKvFailed must follow.
  absl::Status AcceptPeerKv(uint64_t lease_id, int32_t layer, int32_t first_block,
                            int32_t num_blocks);
  void PeerKvArrived(uint64_t lease_id, int32_t layer, int32_t first_block, int32_t num_blocks,
                     std::shared_ptr<const kernels::Buffer> staging);
  void PeerKvFailed(uint64_t lease_id, const absl::Status& status);
  // Staging buffers of this worker's backend for a peer transport's receiver, made on
  // the engine thread once and owned by the worker (they outlive the payloads the
  // engine thread still holds). FailedPrecondition when made already.
  absl::StatusOr<transport::StagingPool*> MakeStaging(int32_t count, int64_t bytes);
  uint64_t epoch() const { return epoch_; }

  // Admits a reservation whose KV has fully arrived; returns once the engine thread
  // has taken it (next step boundary). The sink then gets every token after `first_token`.
  // Without a first token the prompt is prefilled here instead (selective
  // disaggregation: no KV push may have begun into the lease): the engine computes it
  // past the blocks the reservation shares from the prefix cache, in chunks between
  // decode steps, and the sink gets every token, the first included.
  absl::Status StartDecode(uint64_t lease_id, std::vector<int32_t> prompt,
                           std::optional<int32_t> first_token, const engine::SamplingParams& params,
                           std::shared_ptr<TokenSink> sink);
  // The same without waiting (for gRPC callback threads, which must not block): a
  // refusal reaches the sink's OnError.
  void BeginDecode(uint64_t lease_id, std::vector<int32_t> prompt,
                   std::optional<int32_t> first_token, const engine::SamplingParams& params,
                   std::shared_ptr<TokenSink> sink);
  // Ends a decoding sequence at the next step boundary (its sink gets kCancelled).
  void CancelDecode(uint64_t lease_id);

  // As of the last step or the last Reserve, Release, Abandon or StartDecode that
  // returned (RunOnEngine).
  DecodeWorkerStats Stats() const;
  const kv::KvLayout& layout() const { return layout_; }

 private:
  // StartDecode's work, on the engine thread.
  absl::Status Admit(uint64_t lease_id, std::vector<int32_t> prompt,
                     std::optional<int32_t> first_token, const engine::SamplingParams& params,
                     std::shared_ptr<TokenSink> sink);
  struct Lease {
    std::vector<int32_t> blocks;  // the engine's table, copied: RPC threads may not read the engine
    std::chrono::steady_clock::time_point expires;
    std::chrono::milliseconds duration{0};  // every KV write renews the lease for this long
    int32_t cached_blocks = 0;              // shared from the prefix cache: never written
    int32_t expected_blocks = -1;           // set by BeginKv
    std::vector<int32_t> layer_received;    // [n_layers] blocks received per layer
    absl::Status write_error;               // a handed-over write the engine refused
    int32_t peer_in_flight = 0;             // accepted peer payloads not yet arrived or failed
    bool complete = false;
    uint64_t key = 0;   // Reserve's key
    kv::SeqId seq = 0;  // the engine's id of the reserved sequence
  };
  struct Decoding {
    std::shared_ptr<TokenSink> sink;
    uint64_t lease_id = 0;
  };
  DecodeWorker() = default;
  // One turn of the engine thread: expire leases, step, hand tokens to sinks.
  bool Iterate();
  // Runs `fn` on the engine thread and then refreshes the stats snapshot, so that what
  // a call that returned did to the engine is in Stats().
  void RunOnEngine(const std::function<void()>& fn);
  void ExpireLeases() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The lease KV may be written to; FailedPrecondition (counted) otherwise.
  absl::StatusOr<Lease*> WritableLease(uint64_t lease_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Checks one chunk's (layer, run of blocks, payload bytes) against the lease, then
  // counts its blocks for EndKv (and its bytes as received when they are: `received`);
  // InvalidArgument (counted) otherwise.
  absl::Status CountKv(uint64_t lease_id, int32_t layer, int32_t first_block, int32_t num_blocks,
                       int64_t bytes, bool received) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Waits (releasing `lock` meanwhile) until the lease has no peer payload in flight.
  void WaitPeerKv(uint64_t lease_id, std::unique_lock<std::mutex>& lock)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A handed-over write failed: the lease remembers why (StartDecode refuses it).
  void RecordWriteError(uint64_t lease_id, const absl::Status& st)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  std::unique_ptr<engine::Engine> engine_;
  std::unique_ptr<transport::StagingPool> staging_;  // MakeStaging's; engine thread
  kv::KvLayout layout_;
  DecodeWorkerOptions options_;
  uint64_t epoch_ = 0;

  // Received KV handed to the engine thread and not yet written, at most about this much.
  static constexpr int64_t kMaxPendingKvBytes = int64_t{64} << 20;

  static constexpr size_t kAbandonedKeys = 4096;

  mutable std::mutex mu_;
  absl::flat_hash_map<uint64_t, Lease> leases_ ABSL_GUARDED_BY(mu_);
  // Keys abandoned before their Reserve ran, oldest first (at most kAbandonedKeys).
  absl::flat_hash_set<uint64_t> abandoned_ ABSL_GUARDED_BY(mu_);
  std::deque<uint64_t> abandoned_order_ ABSL_GUARDED_BY(mu_);
  int64_t pending_kv_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  std::condition_variable kv_drained_;  // pending_kv_bytes_ or a peer_in_flight went down
  DecodeWorkerStats stats_ ABSL_GUARDED_BY(mu_);
  // Engine thread only.
  absl::flat_hash_map<kv::SeqId, Decoding> sinks_;
  absl::flat_hash_map<uint64_t, kv::SeqId> decoding_;  // lease id → sequence, once admitted
  std::unique_ptr<engine::EngineThread> thread_;       // last: stopped first
};

}  // namespace tandem::decode

#endif  // TANDEM_DECODE_WORKER_DECODE_WORKER_H_
