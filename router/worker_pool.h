// WorkerPool: the router's view of its prefill and decode workers.
//
// Addresses come from flags: each is host:port, where a host that is not an IP
// address is a DNS name — e.g. a Kubernetes headless Service — that
// the pool re-resolves every `discovery_interval`, with one worker per address it
// returns (IPv4 ones when there are any). A worker whose address disappears is retired:
// it gets no new work (requests already there finish) and is revived if the address
// comes back. Worker objects are never freed while the pool lives, so a Worker* stays
// valid. A poll thread checks each worker's gRPC health (its
// worker service must be SERVING) and reads its GetWorkerStats every `poll_interval`;
// a worker that fails either is unhealthy and gets no new work until it answers
// again. A healthy worker whose KV layout (WorkerLoad::kv_layout) matches no healthy
// worker of the other role is unpaired: it gets no work either, the pool is not ready
// while no prefill/decode pair matches, and why is said (NotReadyReason, each
// snapshot's `unpaired`); a prefill worker is only ever paired with decode workers of
// its layout (Pairs). Callers report RPC failures (MarkUnhealthy) so a dead worker is dropped at
// once rather than at the next poll. Selection: decode workers by free KV blocks
// (fewest running sequences breaks ties; one that let a Reserve time out goes last), prefill
// workers by queued prompt tokens (the worker's last report plus what the router sent since).
//
// Thread-safe.
#ifndef TANDEM_ROUTER_WORKER_POOL_H_
#define TANDEM_ROUTER_WORKER_POOL_H_

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "router/worker_client.h"

namespace tandem::router {

// PrefixIndex: the router's approximate view of one worker's prefix cache — the
// chained block hashes (common/kv/block_hash.h) of prompts it has prefilled (a prefill
// worker) or decoded (a decode worker),
// bounded LRU like the worker's own cache, plus the hashes of prompts it is computing
// right now (in flight). Built from the router's own routing history; the worker may
// have evicted what the index still lists, which costs a miss, never a wrong answer.
//
// Not thread-safe: the WorkerPool guards it.
class PrefixIndex {
 public:
  void set_capacity(size_t blocks) { capacity_ = blocks; }

  // How many leading hashes are believed cached.
  int32_t CachedPrefix(std::span<const uint64_t> hashes) const;
  // How many leading hashes are cached or being computed now.
  int32_t FuturePrefix(std::span<const uint64_t> hashes) const;

  void AddInFlight(std::span<const uint64_t> hashes);
  // The computation ended; on success its blocks are now cached.
  void EndInFlight(std::span<const uint64_t> hashes, bool cached);

 private:
  void Insert(uint64_t hash);

  size_t capacity_ = 1 << 16;
  std::list<uint64_t> lru_;  // least recently used first
  absl::flat_hash_map<uint64_t, std::list<uint64_t>::iterator> pos_;
  absl::flat_hash_map<uint64_t, int32_t> in_flight_;  // hash → prompts computing it
};

enum class WorkerRole { kPrefill, kDecode };

// How the router picks a prefill worker.
enum class RoutingPolicy {
  kRoundRobin,   // in turn
  kLeastLoaded,  // fewest prompt tokens in flight
  kCacheAware,   // least estimated work: tokens in flight + the prompt's uncached part
};
absl::StatusOr<RoutingPolicy> ParseRoutingPolicy(std::string_view name);

// One worker. Its client is immutable and thread-safe; the rest is guarded by the pool.
// A Release the worker was not told of (unreachable, or too busy to answer in time).
struct UnsentRelease {
  ReleaseArgs args;
  std::chrono::steady_clock::time_point first_tried;
};

struct Worker {
  WorkerRole role;
  std::string address;
  // Guarded by WorkerPool::mu_; before the clients, whose last callbacks may add to it.
  std::vector<UnsentRelease> unsent_releases;
  std::unique_ptr<PrefillClient> prefill;  // kPrefill
  std::unique_ptr<DecodeClient> decode;    // kDecode
  // Guarded by WorkerPool::mu_.
  bool healthy = false;
  std::string unpaired;  // healthy, but no healthy worker of the other role matches its layout
  bool usable() const { return healthy && unpaired.empty(); }
  bool slow = false;     // decode: let a Reserve time out; tried last until it answers one
  int source = -1;       // the DNS entry that found it; -1: a fixed address
  bool retired = false;  // its DNS name no longer resolves to this address
  WorkerLoad stats;
  int32_t in_flight = 0;    // requests the router has there now
  int64_t sent_tokens = 0;  // prompt tokens in flight there (prefill)
  PrefixIndex prefixes;     // what its prefix cache probably holds
};

// A routing decision for one prompt.
struct PrefillChoice {
  Worker* worker = nullptr;  // null: no healthy prefill worker has room now
  bool wait = false;         // the best worker is computing this prefix now: wait for it
};

struct WorkerSnapshot {
  std::string address;
  bool healthy;
  int32_t in_flight;
  WorkerLoad load;            // as last polled
  std::string unpaired = {};  // Worker::unpaired
};

// The KV memory of a pool of decode workers, as a gateway schedules by it: over the
// healthy workers that reported a pool, the fraction of blocks held by sequences
// (cached free blocks count as free, as on each worker) and the total. A pool with no
// blocks (no healthy decode worker) is full: nothing can be admitted to it.
struct PoolKv {
  double usage = 1;  // 0..1
  int32_t block_size = 0;
  int64_t num_blocks = 0;
};
PoolKv SummarizePoolKv(const std::vector<WorkerSnapshot>& workers);

struct WorkerPoolOptions {
  std::chrono::milliseconds poll_interval{500};
  std::chrono::milliseconds discovery_interval{5000};
};

class WorkerPool {
 public:
  // `clients` makes each worker's client (GrpcWorkerClients, or fakes in tests).
  WorkerPool(const std::vector<std::string>& prefill, const std::vector<std::string>& decode,
             WorkerClientFactory clients, WorkerPoolOptions options);
  ~WorkerPool();

  // Polls once synchronously, then keeps polling in the background. `on_ready(ready,
  // why)` runs whenever readiness ("a healthy prefill and a healthy decode worker whose
  // KV layouts match") or the reason it is not ready (NotReadyReason) changes.
  void Start(std::function<void(bool, const std::string&)> on_ready);

  // Usable (healthy, paired) decode workers, best first.
  std::vector<Worker*> DecodeCandidates();
  // Whether `prefill` can fill `decode`'s blocks: their layouts as last polled match.
  bool Pairs(const Worker* prefill, const Worker* decode);
  // The healthy prefill worker with the least queued work, not in `exclude`; null if none.
  Worker* PickPrefill(const std::vector<Worker*>& exclude);

  // The prefill worker for a prompt of `tokens` tokens whose full blocks hash to
  // `hashes` (PrefixBlockHashes with PrefillBlockSize), among healthy workers with
  // fewer than `max_tokens` prompt tokens in flight from this router (or none).
  PrefillChoice ChoosePrefill(std::span<const uint64_t> hashes, int64_t tokens, int64_t max_tokens,
                              RoutingPolicy policy);
  // Block size the prefill workers report (0 before any did).
  int32_t PrefillBlockSize();
  // How many leading `hashes` worker `w`'s prefix cache probably holds (its PrefixIndex:
  // what the router routed there and saw end well).
  int32_t CachedBlocks(Worker* w, std::span<const uint64_t> hashes);

  // Book-keeping of the router's own traffic: a request with `tokens` prompt tokens
  // whose full blocks hash to `hashes` is in flight on `w` / has ended there (`ok`: its
  // blocks are now cached there).
  void Begin(Worker* w, int64_t tokens, std::span<const uint64_t> hashes = {});
  void End(Worker* w, int64_t tokens, std::span<const uint64_t> hashes = {}, bool ok = false);
  void MarkUnhealthy(Worker* w);
  // Frees a reservation on decode worker `w` (DecodeClient::Release). One the worker was
  // not told of is sent again after each poll it answers, for up to kReleaseRetry: a
  // worker paused or cut off for a while gets its blocks back the moment it is back,
  // not when the lease runs out (the lease is the last resort).
  void Release(Worker* w, ReleaseArgs args);
  static constexpr std::chrono::minutes kReleaseRetry{10};
  // A decode worker that did not answer a Reserve in time is alive but busy (a long step,
  // a recompute): it stays healthy and is tried after the others until it answers one
  // in time (`slow` false).
  void MarkSlow(Worker* w, bool slow);

  bool Ready();
  // Empty when ready; otherwise why not, naming no address ("no decode worker is
  // healthy", "no prefill worker pairs with a decode worker: KV layout mismatch: …").
  std::string NotReadyReason();
  // A usable (healthy, paired) worker of `role`.
  bool AnyHealthy(WorkerRole role);
  // The largest KV capacity (tokens) among decode workers that reported one; 0 if none.
  int64_t MaxDecodeCapacity();
  std::vector<WorkerSnapshot> Snapshot(WorkerRole role);

 private:
  void PollOnce();
  void Run();
  void SendRelease(Worker* w, UnsentRelease r);
  // Re-resolves the DNS names; adds, retires and revives workers. Poll thread only.
  void Discover();
  // Poll thread (or constructor) only; takes mu_.
  void AddWorker(WorkerRole role, const std::string& address, int source);

  struct Entry {
    WorkerRole role;
    std::string host, port;
    bool dns;  // re-resolved; otherwise one fixed worker
  };
  std::vector<Entry> entries_;
  // Appended to only by the poll thread (under mu_), which may read it without mu_.
  std::vector<std::unique_ptr<Worker>> workers_;
  const WorkerClientFactory clients_;
  const WorkerPoolOptions options_;
  std::chrono::steady_clock::time_point next_discovery_{};
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  bool ready_ ABSL_GUARDED_BY(mu_) = false;
  std::string not_ready_reason_ ABSL_GUARDED_BY(mu_) = "no worker has answered yet";
  uint64_t round_robin_ ABSL_GUARDED_BY(mu_) = 0;
  std::function<void(bool, const std::string&)> on_ready_;
  std::thread thread_;
};

}  // namespace tandem::router

#endif  // TANDEM_ROUTER_WORKER_POOL_H_
