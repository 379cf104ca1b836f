// RouterRequest: one request's life in the router, as a state machine. Every
// transition is a method here; the Router (router.h) only queues, dispatches and
// keeps the books.
//
//   kQueued ──MarkReserving──▶ kReserving ──Start──▶ kPrefilling ──first token──▶ kDecoding
//    ▲ ▲                          │                     │                               │
//    │ └───────Requeue────────────┘                     │                               │
//    └──────Redispatch (the cluster failed: retry)──────┤                               │
//                                                       ▼                               ▼
//                           kFailed (error) · kCancelled (Cancel) · kFinished (EOS, length, stop
//                           string)
//
// kPrefilling covers the KV transfer: a prefill worker answers once the decode worker
// holds every block. A request placed on its decode worker alone (selective
// disaggregation: Start without a prefill worker) is kPrefilling from its Decode call
// until the stream's first token, which the decode worker computed itself. When
// either fails before the first token for a reason of the cluster's, not the
// request's (a worker gone, a transfer broken or stalled, a reservation vanished: what
// ClientStatus answers UNAVAILABLE), nothing has reached the client yet, so the
// request releases its reservation and goes back to the front of the queue, to start
// again after a random pause (RequestEnv::retry_pause, doubling per attempt) on a
// fresh reservation, preferring other workers than the failed attempt's: at most
// max_prefill_attempts attempts in all, then UNAVAILABLE. Queued, a request ends by
// FailQueued (cancelled, deadline passed, no worker). Started, it ends exactly once,
// in one of Finish / Fail, and then calls RequestEnv::ended; every reservation it made
// is consumed or released on the way.
//
// The request records its own metrics as it goes (RequestEnv::metrics).
//
// No thread of its own and no blocking call: Start and Cancel return at once, the
// rest runs in the worker clients' callbacks (serially: one call in flight at a time).
// Thread-safe.
#ifndef TANDEM_ROUTER_ROUTER_REQUEST_H_
#define TANDEM_ROUTER_ROUTER_REQUEST_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "common/metrics/metrics.h"
#include "common/tokenizer/tokenizer.h"
#include "router/request_spec.h"
#include "router/response.h"
#include "router/response_assembler.h"
#include "router/worker_client.h"
#include "router/worker_pool.h"

namespace tandem::router {

enum class RequestState {
  kQueued,
  kReserving,
  kPrefilling,
  kDecoding,
  kFinished,
  kFailed,
  kCancelled,
};

class RouterRequest;

// What the requests of one router share; outlives them.
struct RequestEnv {
  const tokenizer::Tokenizer* tokenizer = nullptr;
  int32_t eos_token_id = -1;
  WorkerPool* pool = nullptr;
  int max_prefill_attempts = 3;
  // The pause before a request starts again: uniform in [½, 1½) × this, doubled for
  // each attempt after the second (so retries from many requests do not arrive
  // together).
  std::chrono::milliseconds retry_pause{100};
  // Where each request's end is recorded (latencies, tokens, finish reason or error
  // code) and each decoded token's gap; null: not recorded.
  metrics::Metrics* metrics = nullptr;
  // A started request has ended (after its sink's last call); the router's books.
  std::function<void(RouterRequest*)> ended;
  // A started request is to start again, not before `not_before`: back to the front of
  // the queue (Redispatch).
  std::function<void(std::shared_ptr<RouterRequest>, std::chrono::steady_clock::time_point)>
      requeue;
};

class RouterRequest : public std::enable_shared_from_this<RouterRequest> {
 public:
  using Clock = std::chrono::steady_clock;

  RouterRequest(const RequestEnv* env, std::string id, RequestSpec spec,
                std::optional<Deadline> deadline, std::shared_ptr<ResponseSink> sink);

  const std::string& id() const { return id_; }
  const RequestSpec& spec() const { return spec_; }
  RequestState state() const;
  bool cancelled() const;
  bool expired() const;
  // The prompt's full-block hashes at `block_size` (kept while it does not change).
  std::span<const uint64_t> Hashes(int32_t block_size);

  // --- Transitions ---
  // kQueued → kFailed, or kCancelled for a CANCELLED status.
  void FailQueued(const absl::Status& status);
  // kQueued → kReserving: the dispatcher is reserving decode memory; back with Requeue.
  void MarkReserving();
  void Requeue();
  // kReserving → kPrefilling: `decode` holds `reservation`; prefill on `prefill`, or
  // (null) on `decode` itself. The caller has counted the request on both
  // (WorkerPool::Begin, the decode worker with the prompt's hashes); it ends the counts.
  void Start(Worker* decode, Reservation reservation, Worker* prefill);
  // Queued again after a failure (Redispatch): preferably not on the workers in avoid().
  const std::vector<Worker*>& avoid() const { return avoid_; }

  // The client went away: the call in flight is cancelled (a queued request is removed
  // by the dispatcher). Idempotent.
  void Cancel();
  // Cancel, unless already cancelled or its last answer has been sent: false then.
  bool CancelIfLive();

 private:
  void StartPrefill(Worker* prefill);
  // kPrefilling → kQueued: the attempt (on `prefill`, or null: on the decode worker
  // alone) failed for the cluster's reason.
  void Redispatch(Worker* prefill);
  // The first token of a stream that prefilled on its decode worker has arrived.
  void OnPrefilledHere(Clock::time_point now);
  // Ends the decode worker's count of this request (its prefix cache now holds the
  // prompt when `ok` and a Decode call ran there).
  void EndDecodeCount(bool ok);
  void OnPrefilled(Worker* prefill, uint64_t call, absl::StatusOr<PrefillResult> result);
  void StartDecode();
  void OnDecodeChunk(DecodeChunk chunk);
  void OnDecodeDone(uint64_t call, const absl::Status& status);
  void Finish(engine::FinishReason reason);
  void Fail(const absl::Status& status);
  // What the client sees of a worker call that failed. Codes about the request itself
  // (a bad field, too large, the client's own deadline or cancel) and a failed forward
  // pass (INTERNAL) pass through. A decode reservation that vanished (NOT_FOUND: the
  // decode worker restarted, or the lease lapsed), a KV transfer that broke, stalled or
  // lost data (ABORTED, DATA_LOSS, DEADLINE_EXCEEDED before the client's deadline) and
  // a worker that went away are the cluster's failures, not the request's: UNAVAILABLE
  // (HTTP 503), which clients retry.
  absl::Status ClientStatus(const absl::Status& s) const;
  void Release();

  // The call in flight: BeginCall before starting one, SetActive with what it returned,
  // CallOver first thing in its callback (which may run before SetActive).
  uint64_t BeginCall();
  void SetActive(uint64_t call, std::shared_ptr<WorkerCall> active);
  void CallOver(uint64_t call);
  void SetState(RequestState s);
  // The one terminal answer: the first caller records it and sends it to the sink.
  void EndWith(const absl::Status& status);
  void EndWith(const Completion& done);
  bool TakeEnd();
  std::shared_ptr<ResponseSink> EndSink();

  const RequestEnv* const env_;
  const std::string id_;
  const RequestSpec spec_;
  const std::optional<Deadline> deadline_;
  const Clock::time_point arrival_ = Clock::now();
  std::shared_ptr<ResponseSink> sink_;  // null once the last answer is sent
  ResponseAssembler assembler_;         // sends to sink_ until then
  std::vector<uint64_t> hashes_;        // set by the dispatcher, read-only once started
  int32_t hashes_block_size_ = 0;

  // Written by the transition that runs (one at a time).
  Worker* decode_ = nullptr;
  Reservation reservation_;
  int attempts_ = 0;            // prefill attempts made
  std::vector<Worker*> avoid_;  // the failed attempt's workers
  int32_t first_token_ = 0;
  bool prefill_here_ = false;  // placed on the decode worker alone
  bool first_seen_ = false;    // a token has reached the client
  bool decoding_ = false;      // a Decode call started: the decode worker holds the prompt
  engine::FinishReason last_finish_ = engine::FinishReason::kNone;
  bool stopped_ = false;  // a stop string matched; the stream is being cancelled
  Clock::time_point reserved_at_{}, prefilled_at_{}, last_token_at_{};
  Completion done_;

  mutable std::mutex mu_;
  RequestState state_ = RequestState::kQueued;
  bool cancelled_ = false;
  bool ended_ = false;
  uint64_t call_ = 0;       // the latest call started
  uint64_t call_over_ = 0;  // the latest call whose callback has run
  std::shared_ptr<WorkerCall> active_;
};

}  // namespace tandem::router

#endif  // TANDEM_ROUTER_ROUTER_REQUEST_H_
