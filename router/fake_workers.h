// Fake worker clients: prefill and decode workers with no model and no network, for the
// router's unit tests and its in-process benchmark. Their callbacks run on one
// FakeScheduler thread, never inline, as gRPC's run on its own threads; each behaviour
// (an answer, an error, a stall, a late answer, a stream that breaks) is set per client.
//
// Thread-safe.
#ifndef TANDEM_ROUTER_FAKE_WORKERS_H_
#define TANDEM_ROUTER_FAKE_WORKERS_H_

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <queue>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "router/worker_client.h"

namespace tandem::router {

// Runs functions at given times, in time order, on one thread.
class FakeScheduler {
 public:
  using Clock = std::chrono::steady_clock;
  FakeScheduler();
  ~FakeScheduler();  // drops what has not run
  void At(Clock::time_point when, std::function<void()> fn);
  void After(std::chrono::microseconds delay, std::function<void()> fn) {
    At(Clock::now() + delay, std::move(fn));
  }

 private:
  struct Item {
    Clock::time_point when;
    uint64_t seq;
    std::function<void()> fn;
    bool operator>(const Item& o) const { return when != o.when ? when > o.when : seq > o.seq; }
  };
  void Run();
  std::mutex mu_;
  std::condition_variable cv_;
  std::priority_queue<Item, std::vector<Item>, std::greater<>> items_;
  uint64_t seq_ = 0;
  bool stop_ = false;
  std::thread thread_;
};

struct FakePrefillBehaviour {
  enum Kind { kAnswer, kUnavailable, kError, kStall } kind = kAnswer;
  std::chrono::microseconds delay{0};  // before the answer (or error)
  int32_t first_token = 0;
  engine::FinishReason finish = engine::FinishReason::kNone;  // the first token ends it
  int32_t cached_tokens = 0;
  bool ignore_cancel = false;  // answers (late) even when cancelled
  absl::Status error = absl::InternalError("fake prefill: it broke");  // kError's
  std::string kv_layout = {};  // what Poll reports (WorkerLoad::kv_layout)
};

class FakePrefillClient : public PrefillClient {
 public:
  explicit FakePrefillClient(FakeScheduler* scheduler) : scheduler_(scheduler) {}

  void Set(FakePrefillBehaviour b);
  void SetHealthy(bool healthy) { healthy_ = healthy; }
  // Whether a decode worker (by address) still holds a lease: a prefill into one that
  // does not fails NOT_FOUND. Set by FakeWorkers.
  void SetLeaseCheck(std::function<bool(const std::string&, uint64_t)> f) {
    lease_live_ = std::move(f);
  }
  int calls() const { return counts_->calls; }
  int cancels() const { return counts_->cancels; }

  absl::StatusOr<WorkerLoad> Poll(std::chrono::milliseconds timeout) override;
  std::shared_ptr<WorkerCall> Prefill(
      const PrefillArgs& args, std::function<void(absl::StatusOr<PrefillResult>)> done) override;

 private:
  FakeScheduler* scheduler_;
  std::function<bool(const std::string&, uint64_t)> lease_live_;
  std::mutex mu_;
  FakePrefillBehaviour behaviour_;
  std::atomic<bool> healthy_{true};
  struct Counts {
    std::atomic<int> calls{0}, cancels{0};
  };
  // Shared with the calls, which may end after the client.
  std::shared_ptr<Counts> counts_ = std::make_shared<Counts>();
};

struct FakeDecodeBehaviour {
  // kStall: no answer before the caller's deadline. kReserveLate: the same, but the
  // worker does reserve (as a busy worker answering too late does): only a Release by
  // the key frees it.
  enum Reserve { kReserve, kExhausted, kUnavailable, kStall, kReserveLate } reserve = kReserve;
  // A stream without a first token (the decode worker prefills) sends this first.
  int32_t first_token = 0;
  // Tokens after the first, one per chunk: tokens[i % size] (empty: 1000 + i).
  std::vector<int32_t> tokens{};
  std::chrono::microseconds interval{100};  // between chunks
  int break_after = -1;  // chunks, then the stream ends with break_status (-1: never)
  absl::Status break_status = absl::UnavailableError("fake decode: connection reset");
  bool stall = false;  // the stream sends nothing until cancelled or past its deadline
  // Reserves and answers, then loses the lease at once (the worker restarted): a
  // prefill into it fails NOT_FOUND.
  bool forget_leases = false;
  int32_t num_blocks = 1024, block_size = 16;
  std::string kv_layout = {};  // what Poll reports (WorkerLoad::kv_layout)
};

class FakeDecodeClient : public DecodeClient {
 public:
  explicit FakeDecodeClient(FakeScheduler* scheduler) : scheduler_(scheduler) {}

  void Set(FakeDecodeBehaviour b);
  void SetHealthy(bool healthy) { healthy_ = healthy; }
  int reserves() const { return counts_->reserves; }
  int streams() const { return counts_->streams; }
  int cancels() const { return counts_->cancels; }
  int live_streams() const { return counts_->live; }
  int local_prefills() const { return counts_->local; }  // streams without a first token
  int releases() const { return counts_->releases; }
  int abandons() const { return counts_->abandons; }
  // Leases reserved and not yet consumed by a Decode or released.
  int outstanding_leases();
  bool HoldsLease(uint64_t lease_id);

  absl::StatusOr<WorkerLoad> Poll(std::chrono::milliseconds timeout) override;
  void Reserve(const ReserveArgs& args,
               std::function<void(absl::StatusOr<Reservation>)> done) override;
  void Release(const ReleaseArgs& args, std::function<void(absl::Status)> done) override;
  // While set, Release answers UNAVAILABLE and frees nothing (a worker out of reach).
  void SetReleaseUnreachable(bool unreachable) { release_unreachable_ = unreachable; }
  std::shared_ptr<WorkerCall> Decode(const DecodeArgs& args, std::function<void(DecodeChunk)> chunk,
                                     std::function<void(absl::Status)> done) override;

 private:
  struct Counts {
    std::atomic<int> reserves{0}, streams{0}, cancels{0}, live{0}, releases{0}, abandons{0},
        local{0};
  };
  struct Stream;
  FakeScheduler* scheduler_;
  std::mutex mu_;
  FakeDecodeBehaviour behaviour_;
  absl::flat_hash_set<uint64_t> leases_;
  absl::flat_hash_map<uint64_t, uint64_t> lease_of_key_;  // Reserve's key → lease
  uint64_t next_lease_ = 1;
  std::atomic<bool> healthy_{true};
  std::atomic<bool> release_unreachable_{false};
  std::shared_ptr<Counts> counts_ = std::make_shared<Counts>();
};

// Fake clients for the workers at the given addresses (each made once, when the pool
// asks for it); the pointers stay valid while the pool lives.
class FakeWorkers {
 public:
  FakeScheduler scheduler;
  WorkerClientFactory Factory();
  FakePrefillClient* prefill(const std::string& address);  // null until made
  FakeDecodeClient* decode(const std::string& address);

 private:
  std::mutex mu_;
  absl::flat_hash_map<std::string, FakePrefillClient*> prefill_;
  absl::flat_hash_map<std::string, FakeDecodeClient*> decode_;
};

}  // namespace tandem::router

#endif  // TANDEM_ROUTER_FAKE_WORKERS_H_
