#include "router/grpc_worker_client.h"

#include <grpcpp/grpcpp.h>

#include <condition_variable>
#include <cstdio>
#include <mutex>

#include "absl/strings/ascii.h"
#include "common/rpc/kv_fingerprint.h"
#include "common/rpc/rpc_server.h"
#include "common/rpc/status_convert.h"
#include "common/util/field_error.h"
#include "common/util/strings.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "tandem/v1/worker.grpc.pb.h"

namespace tandem::router {

namespace {

// The most of a worker's message the router keeps (the rest is cut).
constexpr size_t kMaxWorkerMessage = 4096;

bool HostChar(char c) { return absl::ascii_isalnum(c) || c == '.' || c == '-' || c == '_'; }

// `text` with every host:port ("10.0.3.7:50052", "decode-0.svc:50052", "[fd00::1]:50052",
// "localhost:1234") read as "(a worker)". One pass, no regex: linear in the text.
std::string ScrubAddresses(std::string_view text) {
  std::string out;
  size_t copied = 0;  // text[0, copied) is in out
  for (size_t c = 0; c < text.size(); ++c) {
    if (text[c] != ':') continue;
    size_t port_end = c + 1;
    while (port_end < text.size() && port_end - c <= 6 && absl::ascii_isdigit(text[port_end])) {
      ++port_end;
    }
    const size_t digits = port_end - c - 1;
    if (digits == 0 || digits > 5 ||
        (port_end < text.size() && (HostChar(text[port_end]) || text[port_end] == ':'))) {
      continue;
    }
    size_t host = c;
    if (host > copied && text[host - 1] == ']') {  // [v6]:port
      size_t b = host - 1;
      while (b > copied && host - b < 48 &&
             (absl::ascii_isxdigit(text[b - 1]) || text[b - 1] == ':' || text[b - 1] == '.')) {
        --b;
      }
      if (b == copied || text[b - 1] != '[') continue;
      host = b - 1;
    } else {  // a name or v4: host characters with a letter or a dot ("12:30" is a time)
      bool named = false;
      while (host > copied && HostChar(text[host - 1])) {
        --host;
        named = named || !absl::ascii_isdigit(text[host]);
      }
      if (host == c || !named) continue;
    }
    out.append(text.substr(copied, host - copied));
    out += "(a worker)";
    copied = port_end;
    c = port_end - 1;
  }
  out.append(text.substr(copied));
  return out;
}

// The worker protocol's fields that are the router's, not the client's: a refusal
// naming one is the router's fault (INTERNAL), not the request's.
bool InternalField(std::string_view f) {
  for (std::string_view p : {"destination", "first_token_id", "num_tokens", "prompt_token_ids",
                             "reservation", "payload", "lease_id", "epoch", "block_ids"}) {
    if (f.starts_with(p)) return true;
  }
  return false;
}

// "field" of a message "field: why", or "" (a field: a letter or _, then letters,
// digits, _ . [ ]).
std::string_view LeadingField(std::string_view message) {
  const size_t colon = message.find(": ");
  if (colon == std::string_view::npos || colon == 0 || colon > 128) return {};
  const std::string_view f = message.substr(0, colon);
  if (!absl::ascii_isalpha(f[0]) && f[0] != '_') return {};
  for (char ch : f) {
    if (!absl::ascii_isalnum(ch) && ch != '_' && ch != '.' && ch != '[' && ch != ']') return {};
  }
  return f;
}

}  // namespace

absl::Status FromWorker(const grpc::Status& s, std::string_view call, std::string_view address) {
  if (s.ok()) return absl::OkStatus();
  const std::string full = s.error_message();  // by value: kept for the views below
  std::string_view raw = full;
  if (raw.size() > kMaxWorkerMessage) raw = raw.substr(0, kMaxWorkerMessage);
  const std::string message = ScrubAddresses(raw);
  const auto code = static_cast<absl::StatusCode>(s.error_code());
  if (code == absl::StatusCode::kInvalidArgument || code == absl::StatusCode::kOutOfRange) {
    const std::string_view named = LeadingField(message);
    if (!named.empty() && InternalField(named)) {
      std::fprintf(stderr, "tandem-router: %.*s on %.*s refused the router's call: %s\n",
                   static_cast<int>(call.size()), call.data(), static_cast<int>(address.size()),
                   address.data(), s.error_message().c_str());
      return absl::InternalError(StrCat(call, ": ", message));
    }
    if (!named.empty()) {
      std::string field(named);
      if (field.starts_with("params.")) field = field.substr(7);
      if (field.starts_with("logit_bias")) field = "logit_bias";  // two lists on the wire
      return FieldError(field, std::string_view(message).substr(named.size() + 2), code);
    }
    return absl::Status(code, message);
  }
  // Routine ends (a cancel, a deadline, a reservation that does not fit now) are not
  // logged; the cluster's failures are, with the worker's address.
  if (code != absl::StatusCode::kCancelled && code != absl::StatusCode::kDeadlineExceeded &&
      code != absl::StatusCode::kResourceExhausted) {
    std::fprintf(stderr, "tandem-router: %.*s on %.*s: %s: %s\n", static_cast<int>(call.size()),
                 call.data(), static_cast<int>(address.size()), address.data(),
                 absl::StatusCodeToString(code).c_str(), std::string(raw).c_str());
  }
  return absl::Status(code, StrCat(call, ": ", message));
}

namespace {

constexpr auto kReleaseTimeout = std::chrono::seconds(2);

// Calls in flight on one client; the destructor waits for them.
class InFlight {
 public:
  void Add() {
    std::lock_guard<std::mutex> lock(mu_);
    ++n_;
  }
  void Done() {
    std::lock_guard<std::mutex> lock(mu_);
    if (--n_ == 0) cv_.notify_all();
  }
  void Wait() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return n_ == 0; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int n_ = 0;
};

// A call's ClientContext as far as Cancel may reach it: until the call has ended.
class GrpcCall : public WorkerCall {
 public:
  explicit GrpcCall(grpc::ClientContext* ctx) : ctx_(ctx) {}
  void Cancel() override {
    std::lock_guard<std::mutex> lock(mu_);
    if (ctx_ != nullptr) ctx_->TryCancel();  // before the call starts: it starts cancelled
  }
  void Ended() {
    std::lock_guard<std::mutex> lock(mu_);
    ctx_ = nullptr;
  }

 private:
  std::mutex mu_;
  grpc::ClientContext* ctx_;
};

void ToProto(const engine::SamplingParams& p, v1::EngineSamplingParams* out) {
  out->set_max_tokens(p.max_tokens);
  out->set_temperature(p.temperature);
  out->set_top_k(p.top_k);
  out->set_top_p(p.top_p);
  out->set_min_p(p.min_p);
  out->set_seed(p.seed.value_or(0));
  out->mutable_stop_token_ids()->Assign(p.stop_token_ids.begin(), p.stop_token_ids.end());
  out->set_repetition_penalty(p.repetition_penalty);
  out->set_presence_penalty(p.presence_penalty);
  out->set_frequency_penalty(p.frequency_penalty);
  out->set_logprobs(p.logprobs);
  out->set_ignore_eos(p.ignore_eos);
  out->set_disable_speculation(p.disable_speculation);
  out->set_priority(p.priority);
  out->set_grammar(p.grammar);
  for (const auto& [id, bias] : p.logit_bias) {
    out->add_logit_bias_ids(id);
    out->add_logit_bias_values(bias);
  }
}

// An unknown reason reads as kNone (the stream must then end some other way).
engine::FinishReason FromProto(v1::WorkerFinishReason r) {
  switch (r) {
    case v1::WORKER_FINISH_REASON_STOP:
      return engine::FinishReason::kStop;
    case v1::WORKER_FINISH_REASON_LENGTH:
      return engine::FinishReason::kLength;
    default:
      return engine::FinishReason::kNone;
  }
}

TokenLogprobs FromProto(int32_t token, const v1::WorkerLogprob& lp) {
  TokenLogprobs out{token, lp.logprob(), {}};
  for (int k = 0; k < lp.top_token_ids_size() && k < lp.top_logprobs_size(); ++k) {
    out.top.emplace_back(lp.top_token_ids(k), lp.top_logprobs(k));
  }
  return out;
}

WorkerLoad FromProto(const v1::WorkerStats& s) {
  return {.num_blocks = s.num_blocks(),
          .block_size = s.block_size(),
          .free_blocks = s.free_blocks(),
          .cached_blocks = s.cached_blocks(),
          .running = s.running(),
          .waiting = s.waiting(),
          .prefix_query_tokens = s.prefix_query_tokens_total(),
          .prefix_hit_tokens = s.prefix_hit_tokens_total(),
          .kv_transfer_bytes = s.kv_transfer_bytes_total(),
          .generated_tokens = s.generated_tokens_total(),
          .kv_transports = {s.kv_transports().begin(), s.kv_transports().end()},
          .kv_layout = s.has_kv_layout() ? s.kv_layout().SerializeAsString() : std::string()};
}

// SERVING on `service` and an answer to GetWorkerStats, both within `timeout`.
template <class Stub>
absl::StatusOr<WorkerLoad> PollWorker(grpc::health::v1::Health::Stub* health, Stub* stub,
                                      const char* service, std::chrono::milliseconds timeout) {
  grpc::health::v1::HealthCheckRequest hreq;
  hreq.set_service(service);
  grpc::health::v1::HealthCheckResponse hresp;
  grpc::ClientContext hctx;
  hctx.set_deadline(std::chrono::system_clock::now() + timeout);
  if (grpc::Status s = health->Check(&hctx, hreq, &hresp); !s.ok()) return rpc::FromGrpc(s);
  if (hresp.status() != grpc::health::v1::HealthCheckResponse::SERVING) {
    return absl::UnavailableError(StrCat(service, " is not serving"));
  }
  grpc::ClientContext sctx;
  sctx.set_deadline(std::chrono::system_clock::now() + timeout);
  v1::GetWorkerStatsRequest sreq;
  v1::WorkerStats stats;
  if (grpc::Status s = stub->GetWorkerStats(&sctx, sreq, &stats); !s.ok()) {
    return rpc::FromGrpc(s);
  }
  return FromProto(stats);
}

// What both clients hold: one channel to the worker, its service and health stubs, and
// the calls in flight (the destructor waits for them).
template <class Service>
class Channel {
 protected:
  Channel(const std::string& address, const std::string& api_key, const char* service)
      : address_(address),
        service_(service),
        channel_(rpc::MakeChannel(address, api_key)),
        stub_(Service::NewStub(channel_)),
        health_(grpc::health::v1::Health::NewStub(channel_)) {}
  ~Channel() { in_flight_.Wait(); }

  absl::StatusOr<WorkerLoad> PollChannel(std::chrono::milliseconds timeout) {
    return PollWorker(health_.get(), stub_.get(), service_, timeout);
  }

  const std::string address_;
  const char* const service_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<typename Service::Stub> stub_;
  std::unique_ptr<grpc::health::v1::Health::Stub> health_;
  InFlight in_flight_;
};

class GrpcPrefillClient : public PrefillClient, private Channel<v1::PrefillWorker> {
 public:
  GrpcPrefillClient(const std::string& address, const std::string& api_key)
      : Channel(address, api_key, "tandem.v1.PrefillWorker") {}

  absl::StatusOr<WorkerLoad> Poll(std::chrono::milliseconds timeout) override {
    return PollChannel(timeout);
  }

  std::shared_ptr<WorkerCall> Prefill(
      const PrefillArgs& args, std::function<void(absl::StatusOr<PrefillResult>)> done) override {
    struct Op {
      grpc::ClientContext ctx;
      v1::PrefillRequest req;
      v1::PrefillResponse resp;
      std::shared_ptr<GrpcCall> call;
    };
    auto* op = new Op;
    op->call = std::make_shared<GrpcCall>(&op->ctx);
    op->ctx.set_deadline(args.deadline);
    v1::PrefillRequest& req = op->req;
    req.set_request_id(args.request_id);
    req.mutable_prompt_token_ids()->Assign(args.prompt->begin(), args.prompt->end());
    ToProto(*args.params, req.mutable_params());
    req.set_cache_salt(args.cache_salt);
    const Reservation& r = *args.reservation;
    v1::KvDestination* dst = req.mutable_destination();
    dst->set_address(args.decode_address);
    dst->set_lease_id(r.lease_id);
    dst->mutable_block_ids()->Assign(r.block_ids.begin(), r.block_ids.end());
    dst->mutable_fingerprint()->ParseFromString(r.layout);
    dst->set_cached_blocks(r.cached_blocks);
    dst->set_epoch(r.epoch);
    std::shared_ptr<WorkerCall> call = op->call;
    in_flight_.Add();
    stub_->async()->Prefill(&op->ctx, &op->req, &op->resp,
                            [this, op, done = std::move(done)](grpc::Status s) {
                              op->call->Ended();
                              if (!s.ok()) {
                                done(FromWorker(s, "prefill", address_));
                              } else {
                                const v1::PrefillResponse& p = op->resp;
                                PrefillResult out;
                                out.first_token = p.first_token_id();
                                if (p.has_logprob())
                                  out.logprobs = FromProto(p.first_token_id(), p.logprob());
                                out.finish = FromProto(p.finish_reason());
                                out.queue_ms = p.queue_ms();
                                out.compute_ms = p.compute_ms();
                                out.transfer_ms = p.transfer_ms();
                                out.cached_tokens = p.cached_tokens();
                                done(std::move(out));
                              }
                              delete op;
                              in_flight_.Done();
                            });
    return call;
  }
};

class GrpcDecodeClient : public DecodeClient, private Channel<v1::DecodeWorker> {
 public:
  GrpcDecodeClient(const std::string& address, const std::string& api_key)
      : Channel(address, api_key, "tandem.v1.DecodeWorker") {}

  absl::StatusOr<WorkerLoad> Poll(std::chrono::milliseconds timeout) override {
    return PollChannel(timeout);
  }

  void Reserve(const ReserveArgs& args,
               std::function<void(absl::StatusOr<Reservation>)> done) override {
    struct Op {
      grpc::ClientContext ctx;
      v1::ReserveRequest req;
      v1::ReserveResponse resp;
    };
    auto* op = new Op;
    op->ctx.set_deadline(args.deadline);
    op->req.set_request_id(args.request_id);
    op->req.set_num_tokens(args.num_tokens);
    op->req.set_lease_ms(static_cast<int32_t>(args.lease.count()));
    op->req.mutable_prompt_token_ids()->Assign(args.prompt->begin(), args.prompt->end());
    op->req.set_cache_salt(args.cache_salt);
    op->req.set_reservation_key(args.key);
    in_flight_.Add();
    stub_->async()->Reserve(&op->ctx, &op->req, &op->resp,
                            [this, op, done = std::move(done)](grpc::Status s) {
                              if (!s.ok()) {
                                done(FromWorker(s, "decode reserve", address_));
                              } else {
                                const v1::ReserveResponse& p = op->resp;
                                Reservation r;
                                r.lease_id = p.lease_id();
                                r.block_ids.assign(p.block_ids().begin(), p.block_ids().end());
                                r.layout = p.fingerprint().SerializeAsString();
                                r.cached_blocks = p.cached_blocks();
                                r.epoch = p.epoch();
                                done(std::move(r));
                              }
                              delete op;
                              in_flight_.Done();
                            });
  }

  void Release(const ReleaseArgs& args, std::function<void(absl::Status)> done) override {
    struct Op {
      grpc::ClientContext ctx;
      v1::ReleaseRequest req;
      v1::ReleaseResponse resp;
    };
    auto* op = new Op;
    op->ctx.set_deadline(std::chrono::system_clock::now() + kReleaseTimeout);
    op->req.set_lease_id(args.lease_id);
    op->req.set_reservation_key(args.key);
    in_flight_.Add();
    stub_->async()->Release(&op->ctx, &op->req, &op->resp,
                            [this, op, done = std::move(done)](grpc::Status s) {
                              if (done) done(FromWorker(s, "decode release", address_));
                              delete op;
                              in_flight_.Done();
                            });
  }

  std::shared_ptr<WorkerCall> Decode(const DecodeArgs& args, std::function<void(DecodeChunk)> chunk,
                                     std::function<void(absl::Status)> done) override {
    auto* stream = new Stream(this, std::move(chunk), std::move(done));
    v1::DecodeRequest& req = stream->req;
    req.set_request_id(args.request_id);
    req.set_lease_id(args.lease_id);
    req.mutable_prompt_token_ids()->Assign(args.prompt->begin(), args.prompt->end());
    req.set_first_token_id(args.first_token.value_or(0));
    req.set_prefill_here(!args.first_token.has_value());
    ToProto(*args.params, req.mutable_params());
    if (args.deadline.has_value()) stream->ctx.set_deadline(*args.deadline);
    std::shared_ptr<WorkerCall> call = stream->call;
    in_flight_.Add();
    stub_->async()->Decode(&stream->ctx, &stream->req, stream);
    stream->StartRead(&stream->msg);
    stream->StartCall();
    return call;
  }

 private:
  // One Decode stream; deletes itself when it ends.
  class Stream : public grpc::ClientReadReactor<v1::DecodeResponse> {
   public:
    Stream(GrpcDecodeClient* client, std::function<void(DecodeChunk)> chunk,
           std::function<void(absl::Status)> done)
        : call(std::make_shared<GrpcCall>(&ctx)),
          client_(client),
          chunk_(std::move(chunk)),
          done_(std::move(done)) {}

    void OnReadDone(bool ok) override {
      if (!ok) return;  // the stream ended; OnDone follows
      DecodeChunk out;
      out.tokens.assign(msg.token_ids().begin(), msg.token_ids().end());
      for (int i = 0; i < msg.logprobs_size() && i < msg.token_ids_size(); ++i) {
        out.logprobs.push_back(FromProto(msg.token_ids(i), msg.logprobs(i)));
      }
      out.finish = FromProto(msg.finish_reason());
      chunk_(std::move(out));
      StartRead(&msg);
    }
    void OnDone(const grpc::Status& s) override {
      call->Ended();
      done_(FromWorker(s, "decode", client_->address_));
      InFlight& in_flight = client_->in_flight_;
      delete this;
      in_flight.Done();
    }

    grpc::ClientContext ctx;
    v1::DecodeRequest req;
    v1::DecodeResponse msg;
    std::shared_ptr<GrpcCall> call;

   private:
    GrpcDecodeClient* client_;
    std::function<void(DecodeChunk)> chunk_;
    std::function<void(absl::Status)> done_;
  };
};

}  // namespace

absl::Status LayoutsPair(std::string_view prefill, std::string_view decode) {
  // Equal bytes are equal layouts (the common case, checked each poll for every pair).
  if (prefill.empty() || decode.empty() || prefill == decode) return absl::OkStatus();
  v1::KvLayoutFingerprint p, d;
  if (!p.ParseFromArray(prefill.data(), static_cast<int>(prefill.size())) ||
      !d.ParseFromArray(decode.data(), static_cast<int>(decode.size()))) {
    return absl::FailedPreconditionError("KV layout mismatch: a layout that does not parse");
  }
  return rpc::CheckFingerprint(p, d, "on the prefill worker", "on the decode worker");
}

WorkerClientFactory GrpcWorkerClients(std::string api_key) {
  return {[api_key](const std::string& address) -> std::unique_ptr<PrefillClient> {
            return std::make_unique<GrpcPrefillClient>(address, api_key);
          },
          [api_key](const std::string& address) -> std::unique_ptr<DecodeClient> {
            return std::make_unique<GrpcDecodeClient>(address, api_key);
          }};
}

}  // namespace tandem::router
