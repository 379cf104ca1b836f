#include "decode_worker/decode_service.h"

#include <mutex>

#include "common/rpc/engine_convert.h"
#include "common/rpc/status_convert.h"
#include "common/util/strings.h"

namespace tandem::decode {

namespace {

const grpc::Status kLoading(grpc::StatusCode::UNAVAILABLE, "decode worker: model still loading");

// The Decode stream. The engine thread pushes tokens through the sink half; gRPC
// drives the reactor half. At most one write is in flight; tokens that arrive
// meanwhile go out together in the next message. Finish is called exactly once, and
// the reactor is never touched after it (OnDone may delete it at any time then).
class DecodeStream : public grpc::ServerWriteReactor<v1::DecodeResponse> {
 public:
  class Sink : public TokenSink {
   public:
    explicit Sink(DecodeStream* stream) : stream_(stream) {}
    void OnToken(const engine::TokenEvent& ev) override {
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (ev.token >= 0) {
          pending_.add_token_ids(ev.token);
          if (logprobs_) rpc::ToProto(ev, pending_.add_logprobs());
        }
        if (ev.finished) {
          ended_ = true;
          if (ev.reason == engine::FinishReason::kCancelled) {
            status_ = grpc::Status(grpc::StatusCode::CANCELLED, "cancelled");
          } else {
            pending_.set_finish_reason(rpc::ToProto(ev.reason));
          }
        }
      }
      Pump();
    }
    void OnError(const absl::Status& status) override {
      {
        std::lock_guard<std::mutex> lock(mu_);
        ended_ = true;
        status_ = rpc::ToGrpc(status);
      }
      Pump();
    }
    void WriteDone(bool ok) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        writing_ = false;
        if (!ok && !ended_) {
          ended_ = true;
          status_ = grpc::Status(grpc::StatusCode::CANCELLED, "stream broken");
        }
      }
      Pump();
    }
    void set_logprobs(bool on) { logprobs_ = on; }

   private:
    // Starts the next write, or finishes, outside the lock.
    void Pump() {
      enum { kNothing, kWrite, kFinish } action = kNothing;
      grpc::Status status;
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (writing_ || finished_) return;
        const bool has_data = pending_.token_ids_size() > 0 ||
                              pending_.finish_reason() != v1::WORKER_FINISH_REASON_UNSPECIFIED;
        if (has_data && status_.ok()) {
          stream_->out_.Swap(&pending_);
          pending_.Clear();
          writing_ = true;
          action = kWrite;
        } else if (ended_) {
          finished_ = true;
          status = status_;
          action = kFinish;
        }
      }
      if (action == kWrite) stream_->StartWrite(&stream_->out_);
      if (action == kFinish) stream_->Finish(status);
    }

    DecodeStream* const stream_;
    bool logprobs_ = false;
    std::mutex mu_;
    v1::DecodeResponse pending_;
    bool writing_ = false;
    bool ended_ = false;     // the sequence is over (or failed)
    bool finished_ = false;  // Finish called
    grpc::Status status_;
  };

  DecodeStream(DecodeWorker* worker, const v1::DecodeRequest* req)
      : worker_(worker), lease_(req->lease_id()), sink_(std::make_shared<Sink>(this)) {
    sink_->set_logprobs(req->params().logprobs() >= 0);
    std::vector<int32_t> prompt(req->prompt_token_ids().begin(), req->prompt_token_ids().end());
    absl::Status st = worker_->StartDecode(lease_, std::move(prompt), req->first_token_id(),
                                           rpc::FromProto(req->params()), sink_);
    if (!st.ok()) sink_->OnError(st);
  }

  void OnWriteDone(bool ok) override { sink_->WriteDone(ok); }
  void OnCancel() override { worker_->CancelDecode(lease_); }
  void OnDone() override { delete this; }

 private:
  DecodeWorker* const worker_;
  const uint64_t lease_;
  std::shared_ptr<Sink> sink_;
  v1::DecodeResponse out_;  // the message being written
};

// A stream that ends at once with `status`.
class FailedStream : public grpc::ServerWriteReactor<v1::DecodeResponse> {
 public:
  explicit FailedStream(const grpc::Status& status) { Finish(status); }
  void OnDone() override { delete this; }
};

}  // namespace

grpc::Status DecodeService::Reserve(grpc::ServerContext*, const v1::ReserveRequest* req,
                                    v1::ReserveResponse* resp) {
  DecodeWorker* w = worker_.load();
  if (w == nullptr) return kLoading;
  auto r = w->Reserve(req->num_tokens(), std::chrono::milliseconds(req->lease_ms()));
  if (!r.ok()) return rpc::ToGrpc(r.status());
  resp->set_lease_id(r->lease_id);
  resp->mutable_block_ids()->Assign(r->block_ids.begin(), r->block_ids.end());
  return grpc::Status::OK;
}

grpc::Status DecodeService::Release(grpc::ServerContext*, const v1::ReleaseRequest* req,
                                    v1::ReleaseResponse* resp) {
  DecodeWorker* w = worker_.load();
  if (w == nullptr) return kLoading;
  resp->set_released(w->Release(req->lease_id()));
  return grpc::Status::OK;
}

grpc::ServerWriteReactor<v1::DecodeResponse>* DecodeService::Decode(grpc::CallbackServerContext*,
                                                                    const v1::DecodeRequest* req) {
  DecodeWorker* w = worker_.load();
  if (w == nullptr) return new FailedStream(kLoading);
  return new DecodeStream(w, req);
}

grpc::Status DecodeService::GetWorkerStats(grpc::ServerContext*, const v1::GetWorkerStatsRequest*,
                                           v1::WorkerStats* resp) {
  DecodeWorker* w = worker_.load();
  if (w == nullptr) return kLoading;
  const DecodeWorkerStats s = w->Stats();
  resp->set_num_blocks(s.engine.blocks.num_blocks);
  resp->set_block_size(s.engine.blocks.block_size);
  resp->set_free_blocks(s.engine.blocks.free_blocks);
  resp->set_cached_blocks(0);
  resp->set_running(s.engine.running);
  resp->set_waiting(s.engine.waiting);
  resp->set_reserved(s.leases);
  resp->set_preemptions_total(s.engine.preemptions);
  resp->set_kv_bytes_per_token(w->layout().BytesPerToken());
  resp->set_queued_prompt_tokens(s.engine.waiting_prompt_tokens);
  resp->set_kv_transfer_bytes_total(s.kv_bytes_received);
  resp->set_kv_transfer_failures_total(s.kv_failures);
  resp->set_expired_leases_total(s.expired_leases);
  resp->set_generated_tokens_total(s.engine.generated_tokens);
  return grpc::Status::OK;
}

void KvReceiverService::SetWorker(DecodeWorker* worker, v1::KvLayoutFingerprint fingerprint) {
  fingerprint_ = std::move(fingerprint);
  worker_.store(worker);
}

grpc::Status KvReceiverService::Handshake(grpc::ServerContext*, const v1::HandshakeRequest* req,
                                          v1::HandshakeResponse* resp) {
  if (worker_.load() == nullptr) return kLoading;
  *resp->mutable_fingerprint() = fingerprint_;
  resp->set_transport(v1::TRANSPORT_KIND_HOST);
  if (absl::Status st = rpc::CheckFingerprint(fingerprint_, req->fingerprint()); !st.ok()) {
    return rpc::ToGrpc(st);
  }
  for (int t : req->transports()) {
    if (t == v1::TRANSPORT_KIND_HOST) return grpc::Status::OK;
  }
  return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                      "transports: this decode worker only speaks TRANSPORT_KIND_HOST");
}

grpc::Status KvReceiverService::PushKvBlocks(grpc::ServerContext*,
                                             grpc::ServerReader<v1::KvBlocksChunk>* reader,
                                             v1::PushKvBlocksResponse* resp) {
  DecodeWorker* w = worker_.load();
  if (w == nullptr) return kLoading;
  v1::KvBlocksChunk chunk;
  if (!reader->Read(&chunk)) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "PushKvBlocks: empty stream");
  }
  if (absl::Status st = rpc::CheckFingerprint(fingerprint_, chunk.fingerprint()); !st.ok()) {
    return rpc::ToGrpc(st);
  }
  const uint64_t lease = chunk.lease_id();
  std::vector<int32_t> block_ids(chunk.block_ids().begin(), chunk.block_ids().end());
  if (absl::Status st = w->BeginKv(lease, block_ids); !st.ok()) return rpc::ToGrpc(st);
  int64_t bytes = 0;
  do {
    const std::string& p = chunk.payload();
    absl::Status st = w->WriteKv(lease, chunk.layer(), chunk.first_block(), chunk.num_blocks(),
                                 {reinterpret_cast<const uint8_t*>(p.data()), p.size()});
    if (!st.ok()) return rpc::ToGrpc(st);
    bytes += static_cast<int64_t>(p.size());
  } while (reader->Read(&chunk));
  if (absl::Status st = w->EndKv(lease); !st.ok()) return rpc::ToGrpc(st);
  resp->set_bytes_received(bytes);
  return grpc::Status::OK;
}

}  // namespace tandem::decode
