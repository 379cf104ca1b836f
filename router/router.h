// Router: runs validated requests through the cluster (docs/architecture.md, "One request").
//
//   Submit → admission queue → dispatcher: once a prefill worker has room, Reserve
//   decode memory (best decode worker first; none has room, or none answers within 2 s →
//   the request stays queued; one that did not answer is tried last from then on)
//   → the request's state machine (router_request.h) takes it from there: Prefill on a
//   prefill worker (retried on another one if the first dies before answering), the
//   Decode stream from the decode worker, ResponseAssembler (detokenize, stop strings)
//   → the ResponseSink.
//
// Every request ends in exactly one of OnComplete / OnError, and every reservation it
// made is released or consumed. Cancel (client gone, Abort) cancels whichever worker
// call is in flight; the decode worker then frees the sequence within one step.
//
// Thread-safe. Threads: one dispatcher, whatever the worker clients use for their
// callbacks (gRPC's pool) and the pool's poll thread; none per request. The dispatcher
// is the one thread that waits on a worker (its Reserve answer, up to 2 s), to keep the
// queue's order.
#ifndef TANDEM_ROUTER_ROUTER_H_
#define TANDEM_ROUTER_ROUTER_H_

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "common/metrics/metrics.h"
#include "common/model/model_config.h"
#include "common/tokenizer/tokenizer.h"
#include "common/util/strings.h"
#include "router/request_spec.h"
#include "router/response.h"
#include "router/router_request.h"
#include "router/worker_pool.h"

namespace tandem::router {

// AdmissionQueue: the router's bounded queue of requests waiting for decode memory,
// in priority order.
//
// Bounded twice — requests and prompt tokens; Push past either limit fails at once
// with ResourceExhausted (the client should back off), never blocks. Order (Front):
// the lowest `priority` first (vLLM's meaning), arrival order among equals — except
// that an entry that has waited `max_priority_wait` goes before every entry that has
// not (the oldest such first), so no priority holds another back longer than that.
// Entries leave through Front/PopFront or, when cancelled or past their deadline, from
// anywhere (RemoveIf). An entry put back (PushFront: a request started once and failed
// by the cluster) goes first; with a not-before time (its retry pause) it is skipped
// until then and the entries behind it go ahead.
//
// Thread-safe.
struct QueueLimits {
  int32_t max_requests = 256;
  int64_t max_tokens = 1 << 20;
  std::chrono::milliseconds max_priority_wait{10000};
};

template <class T>
class AdmissionQueue {
 public:
  using Clock = std::chrono::steady_clock;

  explicit AdmissionQueue(QueueLimits limits) : limits_(limits) {}

  absl::Status Push(std::shared_ptr<T> item, int64_t tokens, int32_t priority = 0) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (static_cast<int32_t>(items_.size()) >= limits_.max_requests) {
        return absl::ResourceExhaustedError(StrCat("admission queue full: ", items_.size(),
                                                   " requests waiting (limit ",
                                                   limits_.max_requests, "); retry later"));
      }
      if (tokens_ + tokens > limits_.max_tokens) {
        return absl::ResourceExhaustedError(StrCat("admission queue full: ", tokens_,
                                                   " prompt tokens waiting (limit ",
                                                   limits_.max_tokens, "); retry later"));
      }
      items_.push_back({std::move(item), tokens, Clock::time_point{}, priority, Clock::now()});
      tokens_ += tokens;
    }
    cv_.notify_all();
    return absl::OkStatus();
  }

  // Puts back at the front an entry that was admitted once (a request started again
  // after a failure of the cluster), not to leave before `not_before`: the limits,
  // which bound admission, do not apply.
  void PushFront(std::shared_ptr<T> item, int64_t tokens, Clock::time_point not_before = {}) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      // Due at once: it was admitted before.
      items_.push_front({std::move(item), tokens, not_before, 0, Clock::time_point::min()});
      tokens_ += tokens;
    }
    cv_.notify_all();
  }

  // The first entry in the queue's order that may leave now, waiting up to `wait` for
  // one (or a Wake); null if none.
  std::shared_ptr<T> Front(std::chrono::milliseconds wait) {
    std::unique_lock<std::mutex> lock(mu_);
    const Clock::time_point until = Clock::now() + wait;
    for (;;) {
      const Clock::time_point now = Clock::now();
      Clock::time_point next = until;  // the earliest not-before still ahead
      const Entry* best = nullptr;
      bool best_due = false;
      for (const Entry& e : items_) {
        if (e.not_before > now) {
          next = std::min(next, e.not_before);
          continue;
        }
        const bool due = e.queued_at <= now - limits_.max_priority_wait;
        if (best == nullptr || (due && !best_due) ||
            (due == best_due && !due && e.priority < best->priority)) {
          best = &e;
          best_due = due;
        }
      }
      if (best != nullptr) {
        woken_ = false;
        return best->item;
      }
      if (woken_ || now >= until) break;
      cv_.wait_until(lock, next);
    }
    woken_ = false;
    return nullptr;
  }

  // Removes `item` (the entry Front gave) if it is still queued.
  void PopFront(const std::shared_ptr<T>& item) {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = items_.begin(); it != items_.end(); ++it) {
      if (it->item == item) {
        tokens_ -= it->tokens;
        items_.erase(it);
        return;
      }
    }
  }

  // Removes every entry for which `pred` is true and hands each to `removed`
  // (outside the lock).
  void RemoveIf(const std::function<bool(const T&)>& pred,
                const std::function<void(std::shared_ptr<T>)>& removed) {
    std::deque<std::shared_ptr<T>> out;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (auto it = items_.begin(); it != items_.end();) {
        if (pred(*it->item)) {
          tokens_ -= it->tokens;
          out.push_back(std::move(it->item));
          it = items_.erase(it);
        } else {
          ++it;
        }
      }
    }
    for (auto& item : out) removed(std::move(item));
  }

  // Wakes a Front() that is waiting (e.g. decode memory was freed).
  void Wake() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      woken_ = true;
    }
    cv_.notify_all();
  }

  int32_t size() const {
    std::lock_guard<std::mutex> lock(mu_);
    return static_cast<int32_t>(items_.size());
  }
  int64_t tokens() const {
    std::lock_guard<std::mutex> lock(mu_);
    return tokens_;
  }

 private:
  struct Entry {
    std::shared_ptr<T> item;
    int64_t tokens;
    Clock::time_point not_before;
    int32_t priority;
    Clock::time_point queued_at;  // min(): put back, due at once
  };
  const QueueLimits limits_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Entry> items_ ABSL_GUARDED_BY(mu_);
  int64_t tokens_ ABSL_GUARDED_BY(mu_) = 0;
  bool woken_ ABSL_GUARDED_BY(mu_) = false;
};

// tandem-router's and tandem serve's --disagg-min-tokens (RouterOptions::disagg_min_tokens):
// docs/performance.md, "Selective disaggregation", has the measurement behind it.
inline constexpr int64_t kDefaultDisaggMinTokens = 0;

struct RouterOptions {
  QueueLimits queue;
  // How long a reservation waits for KV (renewed by every KV write). Generous: a
  // request may queue inside a prefill worker behind a long prompt before its first
  // chunk starts.
  std::chrono::milliseconds lease{120000};
  // Attempts per request when the cluster fails it before its first token (a worker
  // gone, a KV transfer broken): RouterRequest's Redispatch.
  int max_prefill_attempts = 3;
  // The pause before each of those (RequestEnv::retry_pause).
  std::chrono::milliseconds retry_pause{100};
  // Prompt tokens the router keeps in flight per prefill worker; the rest wait in the
  // admission queue (where deadlines and order are kept) rather than holding decode
  // reservations while they queue inside a prefill worker.
  int64_t max_prefill_tokens_in_flight = 8192;
  RoutingPolicy routing = RoutingPolicy::kCacheAware;
  // Selective disaggregation: a prompt whose part the chosen decode worker does not
  // cache (its PrefixIndex) is shorter than this many tokens is prefilled by that decode
  // worker itself — no prefill worker, no KV transfer, its chunks in the decode
  // worker's steps; longer ones go to a prefill worker. 0: every prompt goes to a
  // prefill worker.
  int64_t disagg_min_tokens = 0;
  // Request metrics (may be null); must outlive the router.
  metrics::Metrics* metrics = nullptr;
};

struct RouterStats {
  int32_t queued_requests = 0;
  int64_t queued_tokens = 0;
  int32_t running_requests = 0;
};

class Router {
 public:
  Router(const tokenizer::Tokenizer& tokenizer, const model::ModelConfig& config, WorkerPool* pool,
         RouterOptions options);
  ~Router();  // cancels what is running and waits for it to end

  // Queues a request; ResourceExhausted (at once) when the queue is full. `deadline`:
  // the client's, honoured while queued and passed on to workers.
  absl::StatusOr<std::shared_ptr<RouterRequest>> Submit(
      RequestSpec spec, std::optional<std::chrono::system_clock::time_point> deadline,
      std::shared_ptr<ResponseSink> sink);
  // The client went away: end the request (its sink gets CANCELLED if still open).
  void Cancel(const std::shared_ptr<RouterRequest>& request);
  // Cancels the running request with this id; false if there is none.
  bool Abort(const std::string& request_id);

  RouterStats Stats();
  // Counts a request refused before Submit (validation) in the error metrics.
  void RecordRejected(const absl::Status& status);

 private:
  void Dispatch();
  // Tries to reserve decode memory for `r`; true when it left the queue.
  bool TryStart(const std::shared_ptr<RouterRequest>& r);
  // A started request has ended (RequestEnv::ended).
  void Ended(RouterRequest* r);
  // A started request goes back to the front of the queue (RouterRequest's Redispatch).
  void Requeued(std::shared_ptr<RouterRequest> r, RouterRequest::Clock::time_point not_before);
  // Erases r's entry in by_id_ (if it is still r's).
  void Forget(RouterRequest* r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  WorkerPool* pool_;
  const RouterOptions options_;
  const RequestEnv env_;
  AdmissionQueue<RouterRequest> queue_;

  std::mutex mu_;
  std::condition_variable ended_;  // a started request ended
  absl::flat_hash_map<std::string, std::weak_ptr<RouterRequest>> by_id_ ABSL_GUARDED_BY(mu_);
  int32_t running_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  std::atomic<bool> stop_{false};
  std::thread dispatcher_;
};

}  // namespace tandem::router

#endif  // TANDEM_ROUTER_ROUTER_H_
