#include "router/router.h"

#include "common/kv/block_hash.h"
#include "common/rpc/engine_convert.h"
#include "common/rpc/status_convert.h"
#include "common/util/status_macros.h"
#include "common/util/strings.h"
#include "router/metered_sink.h"
#include "router/text_stream.h"

namespace tandem::router {

namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kReserveTimeout = std::chrono::seconds(2);
constexpr auto kReleaseTimeout = std::chrono::seconds(2);
constexpr auto kDefaultPrefillTimeout = std::chrono::minutes(30);  // when the client sets none
constexpr auto kRetryWait = std::chrono::milliseconds(5);

double Ms(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

}  // namespace

// One request inside the router. The first terminal call (Complete / Fail) wins.
class RouterRequest {
 public:
  RequestSpec spec;
  std::string id;
  std::optional<std::chrono::system_clock::time_point> deadline;
  Clock::time_point arrival = Clock::now();
  std::shared_ptr<ResponseSink> sink;
  // The prompt's full-block hashes at `hashes_block_size`, kept across dispatch retries.
  std::vector<uint64_t> hashes;
  int32_t hashes_block_size = 0;

  // Registers the worker call in flight so Cancel can reach it; false if cancelled.
  bool SetActive(grpc::ClientContext* ctx) {
    std::lock_guard<std::mutex> lock(mu_);
    if (cancelled_) return false;
    active_ = ctx;
    return true;
  }
  void ClearActive() {
    std::lock_guard<std::mutex> lock(mu_);
    active_ = nullptr;
  }
  void Cancel() {
    std::lock_guard<std::mutex> lock(mu_);
    cancelled_ = true;
    if (active_ != nullptr) active_->TryCancel();
  }
  // Cancel, unless the request was already cancelled or has ended (its last answer
  // sent): false then, though its entry may not be erased yet.
  bool CancelIfLive() {
    std::lock_guard<std::mutex> lock(mu_);
    if (cancelled_ || ended_) return false;
    cancelled_ = true;
    if (active_ != nullptr) active_->TryCancel();
    return true;
  }
  bool cancelled() const {
    std::lock_guard<std::mutex> lock(mu_);
    return cancelled_;
  }
  bool expired() const {
    return deadline.has_value() && std::chrono::system_clock::now() >= *deadline;
  }
  void SetDeadline(grpc::ClientContext* ctx, std::chrono::seconds fallback) const {
    ctx->set_deadline(deadline.value_or(std::chrono::system_clock::now() + fallback));
  }

  void Chunk(OutputChunk chunk) {
    if (!ended_) sink->OnChunk(std::move(chunk));
  }
  void Complete(const Completion& c) {
    if (TakeEnd()) sink->OnComplete(c);
  }
  void Fail(const absl::Status& status) {
    if (TakeEnd()) sink->OnError(status);
  }

 private:
  bool TakeEnd() {
    std::lock_guard<std::mutex> lock(mu_);
    if (ended_) return false;
    ended_ = true;
    return true;
  }

  mutable std::mutex mu_;
  bool cancelled_ = false;
  bool ended_ = false;
  grpc::ClientContext* active_ = nullptr;
};

Router::Router(const tokenizer::Tokenizer& tokenizer, const model::ModelConfig& config,
               WorkerPool* pool, RouterOptions options)
    : tokenizer_(tokenizer),
      config_(config),
      pool_(pool),
      options_(options),
      queue_(options.queue),
      dispatcher_([this] { Dispatch(); }) {}

Router::~Router() {
  stop_ = true;
  queue_.Wake();
  dispatcher_.join();
  queue_.RemoveIf([](const RouterRequest&) { return true; },
                  [](std::shared_ptr<RouterRequest> r) {
                    r->Fail(absl::UnavailableError("router shutting down"));
                  });
  std::unique_lock<std::mutex> lock(mu_);
  for (auto& [id, weak] : by_id_) {
    if (auto r = weak.lock()) r->Cancel();
  }
  drivers_done_.wait(lock, [&] { return running_ == 0; });
}

absl::StatusOr<std::shared_ptr<RouterRequest>> Router::Submit(
    RequestSpec spec, std::optional<std::chrono::system_clock::time_point> deadline,
    std::shared_ptr<ResponseSink> sink) {
  auto r = std::make_shared<RouterRequest>();
  r->spec = std::move(spec);
  r->deadline = deadline;
  r->sink = options_.metrics != nullptr
                ? std::make_shared<MeteredSink>(std::move(sink), options_.metrics)
                : std::move(sink);
  {
    std::lock_guard<std::mutex> lock(mu_);
    r->id = r->spec.request_id.empty() ? StrCat("req-", next_id_++) : r->spec.request_id;
  }
  if (auto st = queue_.Push(r, static_cast<int64_t>(r->spec.prompt.size())); !st.ok()) {
    RecordRejected(st);
    return st;
  }
  std::lock_guard<std::mutex> lock(mu_);
  by_id_[r->id] = r;
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
  // even while its driver is still tidying up.
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
                      r->Fail(r->cancelled()
                                  ? absl::CancelledError("cancelled while queued")
                                  : absl::DeadlineExceededError("deadline passed while queued"));
                      std::lock_guard<std::mutex> lock(mu_);
                      by_id_.erase(r->id);
                    });
    std::shared_ptr<RouterRequest> r = queue_.Front(std::chrono::milliseconds(20));
    if (r == nullptr || stop_) continue;
    if (!TryStart(r)) {
      // No decode worker has room: wait for one to free memory (or a short while).
      std::unique_lock<std::mutex> lock(mu_);
      drivers_done_.wait_for(lock, kRetryWait);
    }
  }
}

bool Router::TryStart(const std::shared_ptr<RouterRequest>& r) {
  auto fail = [&](const absl::Status& st) {
    queue_.PopFront(r);
    r->Fail(st);
    std::lock_guard<std::mutex> lock(mu_);
    by_id_.erase(r->id);
    return true;
  };
  if (!pool_->AnyHealthy(WorkerRole::kPrefill)) {
    return fail(absl::UnavailableError("no healthy prefill worker"));
  }
  std::vector<Worker*> candidates = pool_->DecodeCandidates();
  if (candidates.empty()) return fail(absl::UnavailableError("no healthy decode worker"));
  if (const int32_t block_size = pool_->PrefillBlockSize(); block_size != r->hashes_block_size) {
    r->hashes = kv::PrefixBlockHashes(r->spec.prompt, block_size, r->spec.cache_salt);
    r->hashes_block_size = block_size;
  }
  const int64_t n_prompt = static_cast<int64_t>(r->spec.prompt.size());
  const PrefillChoice choice = pool_->ChoosePrefill(
      r->hashes, n_prompt, options_.max_prefill_tokens_in_flight, options_.routing);
  // Prefill is busy enough, or the best worker is computing this very prefix: wait
  // here (in order, deadlines kept) rather than there.
  if (choice.worker == nullptr || choice.wait) return false;
  Worker* prefill = choice.worker;
  v1::ReserveRequest req;
  req.set_request_id(r->id);
  req.set_num_tokens(static_cast<int32_t>(n_prompt) + 1);
  req.set_lease_ms(static_cast<int32_t>(options_.lease.count()));
  req.mutable_prompt_token_ids()->Assign(r->spec.prompt.begin(), r->spec.prompt.end());
  req.set_cache_salt(r->spec.cache_salt);
  for (Worker* d : candidates) {
    v1::ReserveResponse resp;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + kReserveTimeout);
    const grpc::Status s = d->decode->Reserve(&ctx, req, &resp);
    if (s.ok()) {
      queue_.PopFront(r);
      {
        std::lock_guard<std::mutex> lock(mu_);
        ++running_;
      }
      pool_->Begin(d, 0);
      pool_->Begin(prefill, n_prompt, r->hashes);
      std::thread([this, r, d, prefill, resp = std::move(resp)]() mutable {
        Drive(r, d, std::move(resp), prefill);
        pool_->End(d, 0);
        {
          std::lock_guard<std::mutex> lock(mu_);
          --running_;
          auto it = by_id_.find(r->id);
          if (it != by_id_.end() && it->second.lock() == r) by_id_.erase(it);
        }
        drivers_done_.notify_all();
      }).detach();
      return true;
    }
    if (s.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) continue;
    if (s.error_code() == grpc::StatusCode::UNAVAILABLE ||
        s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
      pool_->MarkUnhealthy(d);
      continue;
    }
    return fail(rpc::FromGrpc(s));
  }
  return false;
}

void Router::Release(Worker* decode, uint64_t lease_id) {
  v1::ReleaseRequest req;
  req.set_lease_id(lease_id);
  v1::ReleaseResponse resp;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + kReleaseTimeout);
  decode->decode->Release(&ctx, req, &resp);  // best effort: an unknown lease is fine
}

void Router::Drive(std::shared_ptr<RouterRequest> r, Worker* decode,
                   v1::ReserveResponse reservation, Worker* prefill) {
  const auto t_reserved = Clock::now();
  const RequestSpec& spec = r->spec;
  const int64_t n_prompt = static_cast<int64_t>(spec.prompt.size());
  Completion done;
  done.request_id = r->id;
  done.prompt_tokens = static_cast<int32_t>(n_prompt);
  done.timings.queue_ms = Ms(r->arrival, t_reserved);
  v1::EngineSamplingParams params;
  rpc::ToProto(spec.params, &params);

  // Prefill, retried on another prefill worker when one vanishes before answering.
  v1::PrefillRequest preq;
  preq.set_request_id(r->id);
  preq.mutable_prompt_token_ids()->Assign(spec.prompt.begin(), spec.prompt.end());
  *preq.mutable_params() = params;
  preq.set_cache_salt(spec.cache_salt);
  v1::KvDestination* dst = preq.mutable_destination();
  dst->set_address(decode->address);
  dst->set_lease_id(reservation.lease_id());
  *dst->mutable_block_ids() = reservation.block_ids();
  *dst->mutable_fingerprint() = reservation.fingerprint();
  dst->set_cached_blocks(reservation.cached_blocks());
  dst->set_epoch(reservation.epoch());
  v1::PrefillResponse presp;
  absl::Status st = absl::UnavailableError("prefill: no healthy prefill worker");
  std::vector<Worker*> tried;
  for (int attempt = 0; attempt < options_.max_prefill_attempts; ++attempt) {
    Worker* p = attempt == 0 ? prefill : pool_->PickPrefill(tried);
    if (p == nullptr) break;
    tried.push_back(p);
    if (attempt > 0) pool_->Begin(p, n_prompt, r->hashes);
    grpc::ClientContext ctx;
    r->SetDeadline(&ctx, kDefaultPrefillTimeout);
    if (!r->SetActive(&ctx)) {
      pool_->End(p, n_prompt, r->hashes);
      st = absl::CancelledError("cancelled");
      break;
    }
    const grpc::Status s = p->prefill->Prefill(&ctx, preq, &presp);
    pool_->End(p, n_prompt, r->hashes, s.ok());
    r->ClearActive();
    if (s.ok()) {
      st = absl::OkStatus();
      break;
    }
    st = rpc::FromGrpc(s, StrCat("prefill on ", p->address));
    if (r->cancelled()) {
      st = absl::CancelledError("cancelled");
      break;
    }
    if (s.error_code() != grpc::StatusCode::UNAVAILABLE) break;
  }
  const auto t_prefilled = Clock::now();
  done.timings.prefill_ms = Ms(t_reserved, t_prefilled);
  done.timings.kv_transfer_ms = presp.transfer_ms();
  done.timings.prefill_compute_ms = presp.compute_ms();
  done.timings.prefill_queue_ms = presp.queue_ms();
  done.cached_tokens = presp.cached_tokens();
  if (!st.ok()) {
    Release(decode, reservation.lease_id());
    r->Fail(st);
    return;
  }

  TextStream text(tokenizer_, spec.stop);
  OutputChunk all;  // everything, for a non-streaming request
  bool first = true;
  // Sends tokens on; returns false once a stop string has matched.
  auto emit = [&](std::span<const int32_t> tokens,
                  const google::protobuf::RepeatedPtrField<v1::WorkerLogprob>& logprobs,
                  v1::WorkerFinishReason reason) {
    OutputChunk chunk;
    for (size_t i = 0; i < tokens.size(); ++i) {
      const int32_t t = tokens[i];
      const bool last = i + 1 == tokens.size();
      const bool is_eos = last && reason == v1::WORKER_FINISH_REASON_STOP &&
                          !spec.params.ignore_eos && t == config_.eos_token_id;
      ++done.completion_tokens;
      chunk.token_ids.push_back(t);
      chunk.text += text.Push(t, is_eos);
      if (static_cast<int>(i) < logprobs.size()) {
        const v1::WorkerLogprob& lp = logprobs[static_cast<int>(i)];
        TokenLogprobs out{t, lp.logprob(), {}};
        for (int k = 0; k < lp.top_token_ids_size() && k < lp.top_logprobs_size(); ++k) {
          out.top.emplace_back(lp.top_token_ids(k), lp.top_logprobs(k));
        }
        chunk.logprobs.push_back(std::move(out));
      }
      if (text.stopped()) break;
    }
    if (first) {
      done.timings.ttft_ms = Ms(r->arrival, Clock::now());
      first = false;
    }
    if (spec.stream) {
      r->Chunk(std::move(chunk));
    } else {
      all.token_ids.insert(all.token_ids.end(), chunk.token_ids.begin(), chunk.token_ids.end());
      all.text += chunk.text;
      for (auto& lp : chunk.logprobs) all.logprobs.push_back(std::move(lp));
    }
    return !text.stopped();
  };
  auto finish = [&](engine::FinishReason reason) {
    std::string tail = text.Finish();
    if (spec.stream) {
      if (!tail.empty()) r->Chunk({{}, std::move(tail), {}});
    } else {
      all.text += tail;
      r->Chunk(std::move(all));
    }
    done.reason = reason;
    done.stop_reason = text.stopped() ? text.stop_string() : "";
    const auto now = Clock::now();
    done.timings.e2e_ms = Ms(r->arrival, now);
    done.timings.decode_ms = Ms(t_prefilled, now);
    r->Complete(done);
  };
  auto reason_of = [](v1::WorkerFinishReason w) {
    return w == v1::WORKER_FINISH_REASON_LENGTH ? engine::FinishReason::kLength
                                                : engine::FinishReason::kStop;
  };

  const int32_t first_token = presp.first_token_id();
  google::protobuf::RepeatedPtrField<v1::WorkerLogprob> first_logprob;
  if (presp.has_logprob()) *first_logprob.Add() = presp.logprob();
  const bool go_on = emit({&first_token, 1}, first_logprob, presp.finish_reason());
  if (!go_on || presp.finish_reason() != v1::WORKER_FINISH_REASON_UNSPECIFIED) {
    Release(decode, reservation.lease_id());
    finish(go_on ? reason_of(presp.finish_reason()) : engine::FinishReason::kStop);
    return;
  }

  // Decode: relay the worker's stream until it finishes, a stop string matches or
  // the client goes away.
  v1::DecodeRequest dreq;
  dreq.set_request_id(r->id);
  dreq.set_lease_id(reservation.lease_id());
  dreq.mutable_prompt_token_ids()->Assign(spec.prompt.begin(), spec.prompt.end());
  dreq.set_first_token_id(first_token);
  *dreq.mutable_params() = params;
  grpc::ClientContext dctx;
  if (r->deadline.has_value()) dctx.set_deadline(*r->deadline);
  if (!r->SetActive(&dctx)) {
    Release(decode, reservation.lease_id());
    r->Fail(absl::CancelledError("cancelled"));
    return;
  }
  auto reader = decode->decode->Decode(&dctx, dreq);
  v1::DecodeResponse msg;
  v1::WorkerFinishReason reason = v1::WORKER_FINISH_REASON_UNSPECIFIED;
  bool stopped = false;
  while (reader->Read(&msg)) {
    reason = msg.finish_reason();
    if (!emit({msg.token_ids().data(), static_cast<size_t>(msg.token_ids_size())}, msg.logprobs(),
              reason)) {
      stopped = true;
      dctx.TryCancel();  // the decode worker frees the sequence within one step
      break;
    }
  }
  const grpc::Status s = reader->Finish();
  r->ClearActive();
  if (stopped) {
    finish(engine::FinishReason::kStop);
  } else if (s.ok() && reason != v1::WORKER_FINISH_REASON_UNSPECIFIED) {
    finish(reason_of(reason));
  } else if (r->cancelled()) {
    r->Fail(absl::CancelledError("cancelled"));
  } else {
    if (s.error_code() == grpc::StatusCode::UNAVAILABLE) pool_->MarkUnhealthy(decode);
    Release(decode, reservation.lease_id());
    r->Fail(s.ok() ? absl::InternalError(StrCat("decode on ", decode->address,
                                                ": stream ended without a finish reason"))
                   : rpc::FromGrpc(s, StrCat("decode on ", decode->address)));
  }
}

}  // namespace tandem::router
