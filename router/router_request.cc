#include "router/router_request.h"

#include <algorithm>

#include "common/kv/block_hash.h"
#include "common/rpc/status_convert.h"
#include "common/util/random_id.h"
#include "common/util/strings.h"

namespace tandem::router {

namespace {

using Clock = RouterRequest::Clock;
constexpr auto kDefaultPrefillTimeout = std::chrono::minutes(30);  // when the client sets none

double Ms(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

}  // namespace

absl::Status RouterRequest::ClientStatus(const absl::Status& s) const {
  switch (s.code()) {
    case absl::StatusCode::kDeadlineExceeded:
      if (expired()) return s;  // the client's own deadline
      [[fallthrough]];
    case absl::StatusCode::kNotFound:
    case absl::StatusCode::kAborted:
    case absl::StatusCode::kDataLoss:
      return absl::UnavailableError(
          StrCat(s.message(), " (", absl::StatusCodeToString(s.code()), "; retry)"));
    default:
      return s;
  }
}

RouterRequest::RouterRequest(const RequestEnv* env, std::string id, RequestSpec spec,
                             std::optional<Deadline> deadline, std::shared_ptr<ResponseSink> sink)
    : env_(env),
      id_(std::move(id)),
      spec_(std::move(spec)),
      deadline_(deadline),
      sink_(std::move(sink)),
      assembler_(*env->tokenizer, env->eos_token_id, spec_, sink_.get()) {
  done_.request_id = id_;
  done_.prompt_tokens = static_cast<int32_t>(spec_.prompt.size());
}

RequestState RouterRequest::state() const {
  std::lock_guard<std::mutex> lock(mu_);
  return state_;
}

bool RouterRequest::cancelled() const {
  std::lock_guard<std::mutex> lock(mu_);
  return cancelled_;
}

bool RouterRequest::expired() const {
  return deadline_.has_value() && std::chrono::system_clock::now() >= *deadline_;
}

std::span<const uint64_t> RouterRequest::Hashes(int32_t block_size) {
  if (block_size != hashes_block_size_) {
    hashes_ = kv::PrefixBlockHashes(spec_.prompt, block_size, spec_.cache_salt);
    hashes_block_size_ = block_size;
  }
  return hashes_;
}

void RouterRequest::SetState(RequestState s) {
  std::lock_guard<std::mutex> lock(mu_);
  state_ = s;
}

bool RouterRequest::TakeEnd() {
  std::lock_guard<std::mutex> lock(mu_);
  if (ended_) return false;
  ended_ = true;
  return true;
}

void RouterRequest::EndWith(const absl::Status& status) {
  if (!TakeEnd()) return;
  if (env_->metrics != nullptr) {
    env_->metrics->RequestFailed(rpc::CodeName(rpc::ToGrpc(status).error_code()));
  }
  EndSink()->OnError(status);
}

void RouterRequest::EndWith(const Completion& c) {
  if (!TakeEnd()) return;
  if (env_->metrics != nullptr) {
    metrics::RequestRecord r;
    r.finished_reason = c.reason == engine::FinishReason::kLength ? "length" : "stop";
    r.prompt_tokens = c.prompt_tokens;
    r.generation_tokens = c.completion_tokens;
    r.ttft = c.timings.ttft_ms / 1e3;
    r.e2e = c.timings.e2e_ms / 1e3;
    r.queue = c.timings.queue_ms / 1e3;
    r.prefill = c.timings.prefill_ms / 1e3;
    r.decode = c.timings.decode_ms / 1e3;
    env_->metrics->RequestFinished(r);
  }
  EndSink()->OnComplete(c);
}

std::shared_ptr<ResponseSink> RouterRequest::EndSink() {
  // Dropped with its last call: a sink may hold what holds this request (an HTTP call
  // holds its router requests), and nothing is sent after the end.
  return std::move(sink_);
}

// --- Queued ---

void RouterRequest::FailQueued(const absl::Status& status) {
  SetState(status.code() == absl::StatusCode::kCancelled ? RequestState::kCancelled
                                                         : RequestState::kFailed);
  EndWith(status);
}

void RouterRequest::MarkReserving() { SetState(RequestState::kReserving); }
void RouterRequest::Requeue() { SetState(RequestState::kQueued); }

// --- Cancellation ---

void RouterRequest::Cancel() {
  std::shared_ptr<WorkerCall> active;
  {
    std::lock_guard<std::mutex> lock(mu_);
    cancelled_ = true;
    active = active_;
  }
  if (active != nullptr) active->Cancel();
}

bool RouterRequest::CancelIfLive() {
  std::shared_ptr<WorkerCall> active;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (cancelled_ || ended_) return false;
    cancelled_ = true;
    active = active_;
  }
  if (active != nullptr) active->Cancel();
  return true;
}

uint64_t RouterRequest::BeginCall() {
  std::lock_guard<std::mutex> lock(mu_);
  return ++call_;
}

void RouterRequest::SetActive(uint64_t call, std::shared_ptr<WorkerCall> active) {
  bool cancel = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (call != call_ || call_over_ == call) return;  // it has ended already
    active_ = active;
    cancel = cancelled_ || stopped_;
  }
  if (cancel) active->Cancel();  // cancelled (or stopped) while it was starting
}

void RouterRequest::CallOver(uint64_t call) {
  std::lock_guard<std::mutex> lock(mu_);
  call_over_ = call;
  if (call == call_) active_.reset();
}

// --- Started ---

void RouterRequest::Start(Worker* decode, Reservation reservation, Worker* prefill) {
  SetState(RequestState::kPrefilling);
  decode_ = decode;
  reservation_ = std::move(reservation);
  reserved_at_ = Clock::now();
  done_.timings.queue_ms = Ms(arrival_, reserved_at_);
  ++attempts_;
  prefill_here_ = prefill == nullptr;
  decoding_ = false;
  if (prefill_here_) {
    if (cancelled()) {
      Release();
      Fail(absl::CancelledError("cancelled"));
      return;
    }
    StartDecode();
    return;
  }
  StartPrefill(prefill);
}

void RouterRequest::StartPrefill(Worker* prefill) {
  if (cancelled()) {
    env_->pool->End(prefill, static_cast<int64_t>(spec_.prompt.size()), hashes_);
    Release();
    Fail(absl::CancelledError("cancelled"));
    return;
  }
  PrefillArgs args;
  args.request_id = id_;
  args.prompt = &spec_.prompt;
  args.params = &spec_.params;
  args.cache_salt = spec_.cache_salt;
  args.decode_address = decode_->address;
  args.reservation = &reservation_;
  args.deadline = deadline_.value_or(std::chrono::system_clock::now() + kDefaultPrefillTimeout);
  const uint64_t call = BeginCall();
  auto self = shared_from_this();
  SetActive(call, prefill->prefill->Prefill(
                      args, [self, prefill, call](absl::StatusOr<PrefillResult> result) {
                        self->OnPrefilled(prefill, call, std::move(result));
                      }));
}

void RouterRequest::OnPrefilled(Worker* prefill, uint64_t call,
                                absl::StatusOr<PrefillResult> result) {
  CallOver(call);
  const int64_t n_prompt = static_cast<int64_t>(spec_.prompt.size());
  env_->pool->End(prefill, n_prompt, hashes_, result.ok());
  if (!result.ok()) {
    if (cancelled()) {
      Release();
      Fail(absl::CancelledError("cancelled"));
      return;
    }
    const absl::Status status = ClientStatus(result.status());
    if (status.code() == absl::StatusCode::kUnavailable && attempts_ < env_->max_prefill_attempts) {
      Redispatch(prefill);
      return;
    }
    Release();
    Fail(status);
    return;
  }
  prefilled_at_ = Clock::now();
  done_.timings.prefill_ms = Ms(reserved_at_, prefilled_at_);
  done_.timings.kv_transfer_ms = result->transfer_ms;
  done_.timings.prefill_compute_ms = result->compute_ms;
  done_.timings.prefill_queue_ms = result->queue_ms;
  done_.cached_tokens = result->cached_tokens;
  if (cancelled()) {
    Release();
    Fail(absl::CancelledError("cancelled"));
    return;
  }
  first_token_ = result->first_token;
  std::vector<TokenLogprobs> logprobs;
  if (result->logprobs.has_value()) logprobs.push_back(*result->logprobs);
  first_seen_ = true;
  const bool go_on = assembler_.Add({&first_token_, 1}, logprobs, result->finish);
  last_token_at_ = Clock::now();
  done_.timings.ttft_ms = Ms(arrival_, last_token_at_);
  if (!go_on || result->finish != engine::FinishReason::kNone) {
    Release();  // the reservation was never decoded
    Finish(result->finish);
    return;
  }
  StartDecode();
}

void RouterRequest::Redispatch(Worker* prefill) {
  Release();
  EndDecodeCount(false);
  avoid_ = {decode_};
  if (prefill != nullptr) avoid_.push_back(prefill);
  decode_ = nullptr;
  reservation_ = {};
  const auto base = env_->retry_pause * (1 << std::max(0, attempts_ - 1));
  const auto us = std::chrono::duration_cast<std::chrono::microseconds>(base).count();
  const Clock::time_point not_before =
      Clock::now() + std::chrono::microseconds(us / 2 + RandomNonZero64() % us);
  SetState(RequestState::kQueued);
  env_->requeue(shared_from_this(), not_before);
}

void RouterRequest::StartDecode() {
  if (!prefill_here_) SetState(RequestState::kDecoding);
  decoding_ = true;
  DecodeArgs args;
  args.request_id = id_;
  args.lease_id = reservation_.lease_id;
  args.prompt = &spec_.prompt;
  if (!prefill_here_) args.first_token = first_token_;
  args.params = &spec_.params;
  args.deadline = deadline_;
  const uint64_t call = BeginCall();
  auto self = shared_from_this();
  SetActive(call, decode_->decode->Decode(
                      args, [self](DecodeChunk chunk) { self->OnDecodeChunk(std::move(chunk)); },
                      [self, call](absl::Status status) { self->OnDecodeDone(call, status); }));
}

void RouterRequest::OnDecodeChunk(DecodeChunk chunk) {
  if (stopped_) return;  // the stream is being cancelled; later tokens are dropped
  last_finish_ = chunk.finish;
  if (!first_seen_ && !chunk.tokens.empty()) {
    // Prefilled on the decode worker: its first token is this request's TTFT, not a gap
    // between tokens (tokens that came with it are not timed either).
    OnPrefilledHere(Clock::now());
  } else if (env_->metrics != nullptr && !chunk.tokens.empty()) {
    // The gap since the previous token, spread over the tokens that arrived together.
    const auto now = Clock::now();
    env_->metrics->TokensArrived(std::chrono::duration<double>(now - last_token_at_).count(),
                                 static_cast<int32_t>(chunk.tokens.size()));
    last_token_at_ = now;
  }
  if (assembler_.Add(chunk.tokens, chunk.logprobs, chunk.finish)) return;
  // A stop string matched: the decode worker frees the sequence within one step.
  std::shared_ptr<WorkerCall> active;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopped_ = true;
    active = active_;
  }
  if (active != nullptr) active->Cancel();
}

void RouterRequest::OnPrefilledHere(Clock::time_point now) {
  first_seen_ = true;
  SetState(RequestState::kDecoding);
  prefilled_at_ = now;
  last_token_at_ = now;
  done_.timings.prefill_ms = Ms(reserved_at_, now);
  done_.timings.ttft_ms = Ms(arrival_, now);
  done_.cached_tokens = std::min(reservation_.cached_blocks * hashes_block_size_,
                                 std::max(0, static_cast<int32_t>(spec_.prompt.size()) - 1));
}

void RouterRequest::OnDecodeDone(uint64_t call, const absl::Status& status) {
  CallOver(call);
  if (!first_seen_ && !stopped_ && !cancelled() && !status.ok()) {
    // Prefilled on the decode worker and failed before any token reached the client:
    // the cluster's failure, retried as a prefill's is.
    if (ClientStatus(status).code() == absl::StatusCode::kUnavailable &&
        attempts_ < env_->max_prefill_attempts) {
      if (status.code() == absl::StatusCode::kUnavailable) env_->pool->MarkUnhealthy(decode_);
      Redispatch(nullptr);
      return;
    }
  }
  if (stopped_) {
    Finish(engine::FinishReason::kStop);
  } else if (status.ok() && last_finish_ != engine::FinishReason::kNone) {
    Finish(last_finish_);
  } else if (cancelled()) {
    Release();  // in case the stream was cancelled before the worker took the lease
    Fail(absl::CancelledError("cancelled"));
  } else {
    if (status.code() == absl::StatusCode::kUnavailable) env_->pool->MarkUnhealthy(decode_);
    Release();
    Fail(status.ok() ? absl::InternalError(StrCat("decode on ", decode_->address,
                                                  ": stream ended without a finish reason"))
                     : ClientStatus(status));
  }
}

void RouterRequest::Release() { env_->pool->Release(decode_, {.lease_id = reservation_.lease_id}); }

void RouterRequest::Finish(engine::FinishReason reason) {
  assembler_.Finish(reason, &done_);
  const auto now = Clock::now();
  done_.timings.e2e_ms = Ms(arrival_, now);
  done_.timings.decode_ms = Ms(prefilled_at_, now);
  SetState(RequestState::kFinished);
  EndWith(done_);
  EndDecodeCount(true);
  env_->ended(this);
}

void RouterRequest::EndDecodeCount(bool ok) {
  env_->pool->End(decode_, 0, hashes_, ok && decoding_);
}

void RouterRequest::Fail(const absl::Status& status) {
  SetState(status.code() == absl::StatusCode::kCancelled ? RequestState::kCancelled
                                                         : RequestState::kFailed);
  EndWith(status);
  EndDecodeCount(false);
  env_->ended(this);
}

}  // namespace tandem::router
