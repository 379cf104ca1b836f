// Worker clients: the router's calls to prefill and decode workers, in plain structs.
//
// The generated protobuf stays behind this seam (grpc_worker_client.cc is the only
// router file below the services that includes it); the router, the worker pool and
// the request state machine speak these structs, and tests substitute fakes.
//
// Every call but Poll is asynchronous: it returns at once and its callback runs
// exactly once, later, on some other thread (a gRPC callback thread for the real
// clients). Callbacks must not block. A call that returns a WorkerCall can be
// cancelled through it; its callback then still runs (with CANCELLED, or with what
// arrived first). Statuses keep gRPC's codes: UNAVAILABLE means the worker could not
// be reached, DEADLINE_EXCEEDED that it did not answer in time.
//
// Thread-safe.
#ifndef TANDEM_ROUTER_WORKER_CLIENT_H_
#define TANDEM_ROUTER_WORKER_CLIENT_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "common/engine/finish_reason.h"
#include "common/engine/sampling_params.h"
#include "router/response.h"

namespace tandem::router {

using Deadline = std::chrono::system_clock::time_point;

// What a worker last reported of its memory and work (GetWorkerStats).
struct WorkerLoad {
  int32_t num_blocks = 0;     // blocks in its KV pool
  int32_t block_size = 0;     // tokens per block
  int32_t free_blocks = 0;    // held by nothing
  int32_t cached_blocks = 0;  // held by the prefix cache, free to evict
  int32_t running = 0;        // sequences computing
  int32_t waiting = 0;        // sequences queued in the worker
  // Totals since the worker started.
  int64_t prefix_query_tokens = 0;
  int64_t prefix_hit_tokens = 0;
  int64_t kv_transfer_bytes = 0;  // pushed (prefill) or received (decode)
  int64_t generated_tokens = 0;
  std::vector<std::string> kv_transports = {};  // offered (prefill) / accepted (decode)
  std::string kv_layout = {};  // its KV layout, opaque (as Reservation::layout); empty: none
};

// Whether a prefill worker reporting `prefill` (WorkerLoad::kv_layout) can fill the
// blocks of a decode worker reporting `decode`: OK, or FailedPrecondition naming the
// first field that differs ("KV layout mismatch: block_size is 16 on the prefill worker
// and 32 on the decode worker"). A worker that reported no layout pairs with any.
absl::Status LayoutsPair(std::string_view prefill, std::string_view decode);

// Decode memory reserved for one prompt.
struct Reservation {
  uint64_t lease_id = 0;
  std::vector<int32_t> block_ids;  // in sequence order
  std::string layout;              // the decode worker's KV layout, opaque to the router
  int32_t cached_blocks = 0;       // leading blocks the decode worker already holds
  uint64_t epoch = 0;              // the decode worker's incarnation
};

struct ReserveArgs {
  std::string request_id;
  const std::vector<int32_t>* prompt = nullptr;  // outlives the call
  int32_t num_tokens = 0;                        // tokens the blocks must hold
  std::chrono::milliseconds lease{0};
  uint64_t cache_salt = 0;
  uint64_t key = 0;  // nonzero, unique per attempt: what ReleaseArgs.key names
  Deadline deadline;
};

// What DecodeClient::Release frees: a reservation (lease_id), or the one a Reserve under
// `key` made though its answer never came (lease_id 0).
struct ReleaseArgs {
  uint64_t lease_id = 0;
  uint64_t key = 0;
};

struct PrefillArgs {
  std::string request_id;
  const std::vector<int32_t>* prompt = nullptr;  // outlives the call
  const engine::SamplingParams* params = nullptr;
  uint64_t cache_salt = 0;
  std::string decode_address;  // where the KV goes
  const Reservation* reservation = nullptr;
  Deadline deadline;
};

struct PrefillResult {
  int32_t first_token = 0;
  std::optional<TokenLogprobs> logprobs;                      // when requested
  engine::FinishReason finish = engine::FinishReason::kNone;  // set: the first token ends it
  double queue_ms = 0, compute_ms = 0, transfer_ms = 0;
  int32_t cached_tokens = 0;  // prompt tokens that came from the prefix cache
};

struct DecodeArgs {
  std::string request_id;
  uint64_t lease_id = 0;
  const std::vector<int32_t>* prompt = nullptr;  // outlives the call
  // The token the prefill worker sampled; none: no prefill worker filled the
  // reservation, the decode worker computes the prompt and its stream carries every
  // token, the first included (DecodeWorker::StartDecode's shape).
  std::optional<int32_t> first_token;
  const engine::SamplingParams* params = nullptr;
  std::optional<Deadline> deadline;
};

// Tokens a decode worker generated since its last chunk.
struct DecodeChunk {
  std::vector<int32_t> tokens;
  std::vector<TokenLogprobs> logprobs;                        // one per token, when requested
  engine::FinishReason finish = engine::FinishReason::kNone;  // set in the last chunk
};

// A call in flight.
class WorkerCall {
 public:
  virtual ~WorkerCall() = default;
  // Asks the worker to stop; harmless once the call has ended.
  virtual void Cancel() = 0;
};

class WorkerClient {
 public:
  virtual ~WorkerClient() = default;
  // Health and memory, answered within `timeout`; blocking (the pool's poll thread).
  virtual absl::StatusOr<WorkerLoad> Poll(std::chrono::milliseconds timeout) = 0;
};

class PrefillClient : public WorkerClient {
 public:
  // Computes the prompt's KV, pushes it into `reservation` and samples the first token;
  // answers once the decode worker holds every block.
  virtual std::shared_ptr<WorkerCall> Prefill(
      const PrefillArgs& args, std::function<void(absl::StatusOr<PrefillResult>)> done) = 0;
};

class DecodeClient : public WorkerClient {
 public:
  // RESOURCE_EXHAUSTED when the prompt does not fit now.
  virtual void Reserve(const ReserveArgs& args,
                       std::function<void(absl::StatusOr<Reservation>)> done) = 0;
  // Frees a reservation that will not be decoded, or (args.key) the one a Reserve
  // under that key made though its answer never came (deadline, lost connection), or
  // stops one not made yet. `done` gets the call's outcome: OK also when there was
  // nothing to free; UNAVAILABLE / DEADLINE_EXCEEDED when the worker was not told
  // (WorkerPool::Release sends it again).
  virtual void Release(const ReleaseArgs& args, std::function<void(absl::Status)> done) = 0;
  // Streams the reservation's tokens (every one after args.first_token, or without one
  // every one): `chunk` for each message, then `done` once (OK after
  // the chunk that carried a finish reason). Cancelling frees the sequence on the
  // worker within one step.
  virtual std::shared_ptr<WorkerCall> Decode(const DecodeArgs& args,
                                             std::function<void(DecodeChunk)> chunk,
                                             std::function<void(absl::Status)> done) = 0;
};

// Makes the clients of a worker at an address (host:port).
struct WorkerClientFactory {
  std::function<std::unique_ptr<PrefillClient>(const std::string& address)> prefill;
  std::function<std::unique_ptr<DecodeClient>(const std::string& address)> decode;
};

}  // namespace tandem::router

#endif  // TANDEM_ROUTER_WORKER_CLIENT_H_
