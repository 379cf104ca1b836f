#include "router/router.h"

#include <algorithm>
#include <future>

#include "common/rpc/status_convert.h"
#include "common/util/random_id.h"
#include "common/util/strings.h"

namespace tandem::router {

namespace {
constexpr auto kReserveTimeout = std::chrono::seconds(2);
constexpr auto kRetryWait = std::chrono::milliseconds(5);
}  // namespace

Router::Router(const tokenizer::Tokenizer& tokenizer, const model::ModelConfig& config,
               WorkerPool* pool, RouterOptions options)
    : pool_(pool),
      options_(options),
      env_{&tokenizer,
           config.eos_token_id,
           pool,
           options.max_prefill_attempts,
           options.retry_pause,
           options.metrics,
           [this](RouterRequest* r) { Ended(r); },
           [this](std::shared_ptr<RouterRequest> r, RouterRequest::Clock::time_point not_before) {
             Requeued(std::move(r), not_before);
           }},
      queue_(options.queue),
      dispatcher_([this] { Dispatch(); }) {}

Router::~Router() {
  stop_ = true;
  queue_.Wake();
  dispatcher_.join();
  queue_.RemoveIf([](const RouterRequest&) { return true; },
                  [](std::shared_ptr<RouterRequest> r) {
                    r->FailQueued(absl::UnavailableError("router shutting down"));
                  });
  std::vector<std::shared_ptr<RouterRequest>> live;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [id, weak] : by_id_) {
      if (auto r = weak.lock()) live.push_back(std::move(r));
    }
  }
  for (auto& r : live) r->Cancel();
  live.clear();
  {
    std::unique_lock<std::mutex> lock(mu_);
    ended_.wait(lock, [&] { return running_ == 0; });
  }
  // A request put back (Requeued) after the drain above, before it saw stop_.
  queue_.RemoveIf([](const RouterRequest&) { return true; },
                  [](std::shared_ptr<RouterRequest> r) {
                    r->FailQueued(absl::UnavailableError("router shutting down"));
                  });
}

absl::StatusOr<std::shared_ptr<RouterRequest>> Router::Submit(
    RequestSpec spec, std::optional<std::chrono::system_clock::time_point> deadline,
    std::shared_ptr<ResponseSink> sink) {
  std::string id;
  {
    std::lock_guard<std::mutex> lock(mu_);
    id = spec.request_id.empty() ? StrCat("req-", next_id_++) : spec.request_id;
  }
  auto r = std::make_shared<RouterRequest>(&env_, std::move(id), std::move(spec), deadline,
                                           std::move(sink));
  // Registered before the dispatcher can see it, so that its end finds the entry to erase.
  {
    std::lock_guard<std::mutex> lock(mu_);
    by_id_[r->id()] = r;
  }
  if (auto st =
          queue_.Push(r, static_cast<int64_t>(r->spec().prompt.size()), r->spec().params.priority);
      !st.ok()) {
    RecordRejected(st);
    std::lock_guard<std::mutex> lock(mu_);
    Forget(r.get());
    return st;
  }
  return r;
}

void Router::RecordRejected(const absl::Status& status) {
  if (options_.metrics != nullptr) {
    options_.metrics->RequestFailed(rpc::CodeName(rpc::ToGrpc(status).error_code()));
  }
}

void Router::Cancel(const std::shared_ptr<RouterRequest>& request) {
  request->Cancel();
  queue_.Wake();
}

bool Router::Abort(const std::string& request_id) {
  std::shared_ptr<RouterRequest> r;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = by_id_.find(request_id);
    if (it == by_id_.end()) return false;
    r = it->second.lock();
  }
  // A request whose cancellation or last answer has gone out is over for the caller,
  // even while it is still tidying up.
  if (r == nullptr || !r->CancelIfLive()) return false;
  queue_.Wake();
  return true;
}

RouterStats Router::Stats() {
  RouterStats s;
  s.queued_requests = queue_.size();
  s.queued_tokens = queue_.tokens();
  std::lock_guard<std::mutex> lock(mu_);
  s.running_requests = running_;
  return s;
}

void Router::Dispatch() {
  while (!stop_) {
    queue_.RemoveIf([](const RouterRequest& r) { return r.cancelled() || r.expired(); },
                    [this](std::shared_ptr<RouterRequest> r) {
                      r->FailQueued(r->cancelled() ? absl::CancelledError("cancelled while queued")
                                                   : absl::DeadlineExceededError(
                                                         "deadline passed while queued"));
                      std::lock_guard<std::mutex> lock(mu_);
                      Forget(r.get());
                    });
    std::shared_ptr<RouterRequest> r = queue_.Front(std::chrono::milliseconds(20));
    if (r == nullptr || stop_) continue;
    if (!TryStart(r)) {
      // No decode worker has room: wait for a request to end (or a short while).
      std::unique_lock<std::mutex> lock(mu_);
      ended_.wait_for(lock, kRetryWait);
    }
  }
}

bool Router::TryStart(const std::shared_ptr<RouterRequest>& r) {
  auto fail = [&](const absl::Status& st) {
    queue_.PopFront(r);
    r->FailQueued(st);
    std::lock_guard<std::mutex> lock(mu_);
    Forget(r.get());
    return true;
  };
  // Unpaired workers count as absent: the pool says why (a KV layout mismatch).
  auto none = [&](const char* fallback) {
    const std::string why = pool_->NotReadyReason();
    return fail(absl::UnavailableError(why.empty() ? fallback : why));
  };
  if (!pool_->AnyHealthy(WorkerRole::kPrefill)) return none("no healthy prefill worker");
  std::vector<Worker*> candidates = pool_->DecodeCandidates();
  if (candidates.empty()) return none("no healthy decode worker");
  // Started again after a failure: the workers of the failed attempt come last.
  const std::vector<Worker*>& avoid = r->avoid();
  auto avoided = [&](Worker* w) { return std::find(avoid.begin(), avoid.end(), w) != avoid.end(); };
  std::stable_partition(candidates.begin(), candidates.end(),
                        [&](Worker* w) { return !avoided(w); });
  const int32_t block_size = pool_->PrefillBlockSize();
  const std::span<const uint64_t> hashes = r->Hashes(block_size);
  const RequestSpec& spec = r->spec();
  const int64_t n_prompt = static_cast<int64_t>(spec.prompt.size());
  // Selective disaggregation: a prompt that is short where it would be decoded (what
  // that worker does not cache of it) is prefilled there; decided on the best decode
  // worker, and only workers where it holds take it.
  auto prefill_here = [&](Worker* d) {
    return options_.disagg_min_tokens > 0 &&
           n_prompt - int64_t{block_size} * pool_->CachedBlocks(d, hashes) <
               options_.disagg_min_tokens;
  };
  const bool local = prefill_here(candidates.front());
  PrefillChoice choice;
  if (!local) {
    choice = pool_->ChoosePrefill(hashes, n_prompt, options_.max_prefill_tokens_in_flight,
                                  options_.routing);
    if (choice.worker != nullptr && avoided(choice.worker)) {
      if (Worker* other = pool_->PickPrefill(avoid); other != nullptr) choice = {other, false};
    }
    // Prefill is busy enough, or the best worker is computing this very prefix: wait
    // here (in order, deadlines kept) rather than there.
    if (choice.worker == nullptr || choice.wait) return false;
    // Only decode workers whose KV layout the chosen prefill worker shares.
    std::erase_if(candidates, [&](Worker* d) { return !pool_->Pairs(choice.worker, d); });
    if (candidates.empty()) return none("no decode worker pairs with the prefill worker");
  } else {
    std::erase_if(candidates, [&](Worker* d) { return !prefill_here(d); });
  }
  ReserveArgs args;
  args.request_id = r->id();
  args.prompt = &spec.prompt;
  args.num_tokens = static_cast<int32_t>(n_prompt) + 1;
  args.lease = options_.lease;
  args.cache_salt = spec.cache_salt;
  r->MarkReserving();
  for (Worker* d : candidates) {
    args.deadline = std::chrono::system_clock::now() + kReserveTimeout;
    args.key = RandomNonZero64();
    std::promise<absl::StatusOr<Reservation>> answer;
    d->decode->Reserve(
        args, [&answer](absl::StatusOr<Reservation> res) { answer.set_value(std::move(res)); });
    absl::StatusOr<Reservation> res = answer.get_future().get();
    const absl::StatusCode code = res.status().code();
    // No answer: the worker may have reserved anyway (busy past the deadline, or the
    // answer lost with the connection); it frees what it made under the key at once.
    if (code == absl::StatusCode::kDeadlineExceeded || code == absl::StatusCode::kUnavailable ||
        code == absl::StatusCode::kCancelled) {
      pool_->Release(d, {.key = args.key});
    }
    // Past the deadline the worker is busy, not gone (the health poll finds dead ones):
    // try the others first from now on, and keep this request queued if none has room.
    pool_->MarkSlow(d, code == absl::StatusCode::kDeadlineExceeded);
    if (res.ok()) {
      queue_.PopFront(r);
      {
        std::lock_guard<std::mutex> lock(mu_);
        ++running_;
      }
      pool_->Begin(d, 0, hashes);
      if (!local) pool_->Begin(choice.worker, n_prompt, hashes);
      if (options_.metrics != nullptr) options_.metrics->PrefillPlaced(local);
      r->Start(d, *std::move(res), choice.worker);
      return true;
    }
    if (code == absl::StatusCode::kResourceExhausted ||
        code == absl::StatusCode::kDeadlineExceeded) {
      continue;
    }
    if (code == absl::StatusCode::kUnavailable) {
      pool_->MarkUnhealthy(d);
      continue;
    }
    return fail(res.status());
  }
  r->Requeue();
  return false;
}

void Router::Forget(RouterRequest* r) {
  auto it = by_id_.find(r->id());
  if (it == by_id_.end()) return;
  // Another request may have taken the id since (ids come from clients).
  auto live = it->second.lock();
  if (live == nullptr || live.get() == r) by_id_.erase(it);
}

void Router::Requeued(std::shared_ptr<RouterRequest> r,
                      RouterRequest::Clock::time_point not_before) {
  if (stop_) {
    // The queue is drained already: it ends here, as the queued requests did.
    r->FailQueued(absl::UnavailableError("router shutting down"));
    std::lock_guard<std::mutex> lock(mu_);
    Forget(r.get());
  } else {
    const int64_t tokens = static_cast<int64_t>(r->spec().prompt.size());
    queue_.PushFront(std::move(r), tokens, not_before);
  }
  std::lock_guard<std::mutex> lock(mu_);
  --running_;
  ended_.notify_all();
}

void Router::Ended(RouterRequest* r) {
  std::lock_guard<std::mutex> lock(mu_);
  --running_;
  Forget(r);
  ended_.notify_all();
}

}  // namespace tandem::router
