#include "decode_worker/decode_service.h"

#include <mutex>

#include "common/rpc/engine_convert.h"
#include "common/rpc/status_convert.h"
#include "common/rpc/stream_outbox.h"
#include "common/transport/transport_proto.h"
#include "common/util/status_macros.h"
#include "common/util/strings.h"

namespace tandem::decode {

namespace {

const grpc::Status kLoading(grpc::StatusCode::UNAVAILABLE, "decode worker: model still loading");

// The Decode stream: engine-thread tokens → an outbox → gRPC. Tokens that arrive
// while a write is in flight are merged into one message.
class DecodeStream : public grpc::ServerWriteReactor<v1::DecodeResponse> {
 public:
  // The engine thread's end of the stream.
  class Sink : public TokenSink {
   public:
    Sink(std::shared_ptr<rpc::StreamOutbox<v1::DecodeResponse>> outbox, bool logprobs)
        : outbox_(std::move(outbox)), logprobs_(logprobs) {}
    void OnToken(const engine::TokenEvent& ev) override {
      if (ev.finished && ev.reason == engine::FinishReason::kCancelled) {
        outbox_->End(grpc::Status(grpc::StatusCode::CANCELLED, "cancelled"));
        return;
      }
      v1::DecodeResponse msg;
      if (ev.token >= 0) {
        msg.add_token_ids(ev.token);
        if (logprobs_) rpc::ToProto(ev, msg.add_logprobs());
      }
      if (ev.finished) msg.set_finish_reason(rpc::ToProto(ev.reason));
      outbox_->Push(std::move(msg));
      if (ev.finished) outbox_->End(grpc::Status::OK);
    }
    void OnError(const absl::Status& status) override { outbox_->End(rpc::ToGrpc(status)); }

   private:
    std::shared_ptr<rpc::StreamOutbox<v1::DecodeResponse>> outbox_;
    const bool logprobs_;
  };

  DecodeStream(DecodeWorker* worker, const v1::DecodeRequest* req)
      : worker_(worker),
        lease_(req->lease_id()),
        outbox_(std::make_shared<rpc::StreamOutbox<v1::DecodeResponse>>(this, &Merge)) {
    std::vector<int32_t> prompt(req->prompt_token_ids().begin(), req->prompt_token_ids().end());
    auto sink = std::make_shared<Sink>(outbox_, req->params().logprobs() >= 0);
    absl::StatusOr<engine::SamplingParams> params = rpc::FromProto(req->params());
    if (!params.ok()) {
      sink->OnError(params.status());  // the lease stays for the router to release
      return;
    }
    // Not StartDecode: a callback thread must not wait for the engine's step (gRPC's
    // health service shares these threads). A refusal ends the stream through the sink.
    std::optional<int32_t> first;
    if (!req->prefill_here()) first = req->first_token_id();
    worker_->BeginDecode(lease_, std::move(prompt), first, *params, std::move(sink));
  }

  void OnWriteDone(bool ok) override { outbox_->WriteDone(ok); }
  void OnCancel() override { worker_->CancelDecode(lease_); }
  void OnDone() override { delete this; }

 private:
  static bool Merge(v1::DecodeResponse* into, const v1::DecodeResponse& next) {
    into->MergeFrom(next);  // appends token ids and logprobs; the finish reason is last
    return true;
  }

  DecodeWorker* const worker_;
  const uint64_t lease_;
  std::shared_ptr<rpc::StreamOutbox<v1::DecodeResponse>> outbox_;
};

// A stream that ends at once with `status`.
class FailedStream : public grpc::ServerWriteReactor<v1::DecodeResponse> {
 public:
  explicit FailedStream(const grpc::Status& status) { Finish(status); }
  void OnDone() override { delete this; }
};

}  // namespace

grpc::Status DecodeService::Reserve(grpc::ServerContext* ctx, const v1::ReserveRequest* req,
                                    v1::ReserveResponse* resp) {
  DecodeWorker* w = worker_.load();
  if (w == nullptr) return kLoading;
  std::vector<int32_t> prompt(req->prompt_token_ids().begin(), req->prompt_token_ids().end());
  auto r = w->Reserve(req->num_tokens(), std::chrono::milliseconds(req->lease_ms()), prompt,
                      req->cache_salt(), req->reservation_key());
  if (!r.ok()) return rpc::ToGrpc(r.status());
  if (ctx->IsCancelled()) {
    // The router stopped waiting (its deadline passed while this worker was busy): no
    // one will use the lease, so it is freed now rather than at expiry. (Where the
    // deadline passes after this check, the router's Release by reservation_key frees it.)
    w->Release(r->lease_id);
    return grpc::Status(grpc::StatusCode::CANCELLED, "the caller gave up; reservation released");
  }
  resp->set_lease_id(r->lease_id);
  resp->set_cached_blocks(r->cached_blocks);
  resp->set_epoch(r->epoch);
  resp->mutable_block_ids()->Assign(r->block_ids.begin(), r->block_ids.end());
  *resp->mutable_fingerprint() = fingerprint_;
  return grpc::Status::OK;
}

grpc::Status DecodeService::Release(grpc::ServerContext*, const v1::ReleaseRequest* req,
                                    v1::ReleaseResponse* resp) {
  DecodeWorker* w = worker_.load();
  if (w == nullptr) return kLoading;
  if (req->lease_id() != 0) {
    resp->set_released(w->Release(req->lease_id()));
  } else if (req->reservation_key() != 0) {
    resp->set_released(w->Abandon(req->reservation_key()));
  } else {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "lease_id: 0 and no reservation_key; name the reservation to release");
  }
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
  rpc::ToProto(s.engine, resp);
  resp->set_reserved(s.leases);
  resp->set_kv_bytes_per_token(w->layout().BytesPerToken());
  resp->set_queued_prompt_tokens(s.engine.waiting_prompt_tokens);
  resp->set_kv_transfer_bytes_total(s.kv_bytes_received);
  resp->set_kv_transfer_failures_total(s.kv_failures);
  resp->set_expired_leases_total(s.expired_leases);
  for (transport::TransportKind k : transports_) {
    resp->add_kv_transports(std::string(transport::TransportName(k)));
  }
  *resp->mutable_kv_layout() = fingerprint_;
  return grpc::Status::OK;
}

void KvReceiverService::SetWorker(DecodeWorker* worker, v1::KvLayoutFingerprint fingerprint,
                                  KvTransports transports) {
  fingerprint_ = std::move(fingerprint);
  transports_ = std::move(transports);
  worker_.store(worker);
}

grpc::Status KvReceiverService::Handshake(grpc::ServerContext*, const v1::HandshakeRequest* req,
                                          v1::HandshakeResponse* resp) {
  DecodeWorker* w = worker_.load();
  if (w == nullptr) return kLoading;
  *resp->mutable_fingerprint() = fingerprint_;
  *resp->mutable_device() = transport::ToProto(transports_.device);
  resp->set_epoch(w->epoch());
  if (absl::Status st = rpc::CheckFingerprint(fingerprint_, req->fingerprint()); !st.ok()) {
    return rpc::ToGrpc(st);
  }
  std::vector<transport::TransportKind> offered;
  for (int t : req->transports()) {
    if (auto k = transport::FromProto(t)) offered.push_back(*k);
  }
  if (req->transports().empty()) offered.push_back(transport::TransportKind::kHost);
  auto chosen = transport::ChooseTransport(offered, transport::FromProto(req->device()),
                                           transports_.accepted, transports_.device);
  if (!chosen.ok()) return rpc::ToGrpc(chosen.status());
  resp->set_transport(transport::ToProto(*chosen));
  if (*chosen == transport::TransportKind::kHost) {
    if (req->has_peer()) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                          "peer: a rendezvous for the host transport");
    }
    return grpc::Status::OK;
  }
  if (transports_.peer == nullptr || !transports_.peer->Supports(*chosen)) {
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                        StrCat("transports: ", transport::TransportName(*chosen),
                               " accepted but not set up on this decode worker"));
  }
  resp->set_peer_max_payload_bytes(transports_.peer->max_payload_bytes());
  if (req->has_peer()) {
    const v1::PeerRendezvous& r = req->peer();
    if (absl::Status st =
            transports_.peer->Join(*chosen, r.sender_id(), r.generation(), r.comm_id());
        !st.ok()) {
      return rpc::ToGrpc(st);
    }
  }
  return grpc::Status::OK;
}

absl::Status KvReceiverService::PeerChunk(DecodeWorker* w, uint64_t lease,
                                          const v1::KvBlocksChunk& chunk, bool begun) {
  if (transports_.peer == nullptr) {
    return absl::FailedPreconditionError("peer: this decode worker takes payloads in the chunks");
  }
  if (!chunk.payload().empty()) {
    return absl::InvalidArgumentError("payload: must be empty when `peer` names the payload");
  }
  PeerPayload p{.seq = chunk.peer().seq(),
                .lease_id = lease,
                .layer = chunk.layer(),
                .first_block = chunk.first_block(),
                .num_blocks = chunk.num_blocks(),
                .bytes = int64_t{chunk.num_blocks()} * w->layout().LayerBytes()};
  // Checked against the reservation before any byte moves; a refused payload is still
  // received (and dropped) so the communicator's pairing holds.
  const absl::Status accepted = begun ? w->AcceptPeerKv(lease, p.layer, p.first_block, p.num_blocks)
                                      : absl::FailedPreconditionError("the transfer was refused");
  p.accepted = accepted.ok();
  RETURN_IF_ERROR(transports_.peer->Submit(chunk.peer().sender_id(), chunk.peer().generation(), p));
  return accepted;
}

grpc::Status KvReceiverService::PushKvBlocks(grpc::ServerContext* ctx,
                                             grpc::ServerReader<v1::KvBlocksChunk>* reader,
                                             v1::PushKvBlocksResponse* resp) {
  DecodeWorker* w = worker_.load();
  if (w == nullptr) return kLoading;
  v1::KvBlocksChunk chunk;
  if (!reader->Read(&chunk)) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "PushKvBlocks: empty stream");
  }
  const uint64_t lease = chunk.lease_id();
  absl::Status failed = rpc::CheckFingerprint(fingerprint_, chunk.fingerprint());
  if (failed.ok()) {
    std::vector<int32_t> block_ids(chunk.block_ids().begin(), chunk.block_ids().end());
    failed = w->BeginKv(lease, chunk.epoch(), block_ids);
  }
  const bool begun = failed.ok();  // the stream named a live reservation rightly
  int64_t bytes = 0;
  do {
    if (!failed.ok()) {
      // The stream is read to its end: the sender has queued every layer, and each
      // peer payload it names is still taken off the communicator (and dropped), so
      // its Sends pair and the communicator goes on serving other transfers.
      if (chunk.has_peer()) PeerChunk(w, lease, chunk, /*begun=*/false).IgnoreError();
      continue;
    }
    const int64_t size = int64_t{chunk.num_blocks()} * w->layout().LayerBytes();
    if (chunk.has_peer()) {
      failed = PeerChunk(w, lease, chunk, /*begun=*/true);
    } else {
      failed = w->WriteKv(lease, chunk.layer(), chunk.first_block(), chunk.num_blocks(),
                          std::move(*chunk.mutable_payload()));
    }
    if (failed.ok()) bytes += size;
  } while (reader->Read(&chunk));
  if (ctx->IsCancelled() && begun) {
    // The sender gave up (its deadline passed while this worker was stalled, its process
    // died, its request was cancelled). Nothing decodes from a reservation whose push
    // failed (the router starts the request again on a fresh one, or ends it), so its
    // blocks go back now, not when the router's Release gets here or the lease ends.
    w->AwaitPeerKv(lease);
    w->Release(lease);
    return grpc::Status(grpc::StatusCode::CANCELLED, "PushKvBlocks: the sender went away");
  }
  // No accepted peer payload outlives the call (EndKv waits for them too).
  if (!failed.ok()) {
    w->AwaitPeerKv(lease);
    return rpc::ToGrpc(failed);
  }
  if (absl::Status st = w->EndKv(lease); !st.ok()) return rpc::ToGrpc(st);
  resp->set_bytes_received(bytes);
  return grpc::Status::OK;
}

}  // namespace tandem::decode
