#include "prefill_worker/prefill_service.h"

#include "common/rpc/address.h"
#include "common/rpc/engine_convert.h"
#include "common/rpc/status_convert.h"

namespace tandem::prefill {

namespace {
const grpc::Status kLoading(grpc::StatusCode::UNAVAILABLE, "prefill worker: model still loading");
}  // namespace

void PrefillService::SetWorker(PrefillWorker* worker, v1::KvLayoutFingerprint fingerprint,
                               std::vector<transport::TransportKind> transports) {
  fingerprint_ = std::move(fingerprint);
  transports_ = std::move(transports);
  worker_.store(worker);
}

grpc::Status PrefillService::Prefill(grpc::ServerContext* ctx, const v1::PrefillRequest* req,
                                     v1::PrefillResponse* resp) {
  PrefillWorker* w = worker_.load();
  if (w == nullptr) return kLoading;
  const v1::KvDestination& d = req->destination();
  // Checked before anything dials it (the transport would hand gRPC any string).
  if (absl::Status st = rpc::CheckAddress(d.address(), "destination.address"); !st.ok()) {
    return rpc::ToGrpc(st);
  }
  if (absl::Status st = rpc::CheckFingerprint(fingerprint_, d.fingerprint()); !st.ok()) {
    return rpc::ToGrpc(st);
  }
  transport::KvDestination dst{d.address(),
                               d.lease_id(),
                               {d.block_ids().begin(), d.block_ids().end()},
                               d.cached_blocks(),
                               d.epoch()};
  std::vector<int32_t> prompt(req->prompt_token_ids().begin(), req->prompt_token_ids().end());
  // The router cancels the call when its client goes; a deadline that passes cancels it
  // too. ctx outlives the wait (this thread blocks in Prefill until the answer).
  absl::StatusOr<engine::SamplingParams> params = rpc::FromProto(req->params());
  if (!params.ok()) return rpc::ToGrpc(params.status());
  auto r = w->Prefill(std::move(prompt), *params, dst, req->cache_salt(),
                      [ctx] { return ctx->IsCancelled(); });
  if (!r.ok()) return rpc::ToGrpc(r.status());
  resp->set_first_token_id(r->first.token);
  if (req->params().logprobs() >= 0) rpc::ToProto(r->first, resp->mutable_logprob());
  resp->set_finish_reason(rpc::ToProto(r->first.reason));
  resp->set_queue_ms(r->queue_ms);
  resp->set_compute_ms(r->compute_ms);
  resp->set_transfer_ms(r->transfer_ms);
  resp->set_kv_bytes(r->kv_bytes);
  resp->set_cached_tokens(static_cast<int32_t>(r->cached_tokens));
  return grpc::Status::OK;
}

grpc::Status PrefillService::GetWorkerStats(grpc::ServerContext*, const v1::GetWorkerStatsRequest*,
                                            v1::WorkerStats* resp) {
  PrefillWorker* w = worker_.load();
  if (w == nullptr) return kLoading;
  const PrefillWorkerStats s = w->Stats();
  rpc::ToProto(s.engine, resp);
  resp->set_kv_bytes_per_token(w->layout().BytesPerToken());
  resp->set_queued_prompt_tokens(s.queued_prompt_tokens);
  resp->set_kv_transfer_bytes_total(s.kv_bytes_sent);
  resp->set_kv_transfer_failures_total(s.kv_failures);
  for (transport::TransportKind k : transports_) {
    resp->add_kv_transports(std::string(transport::TransportName(k)));
  }
  *resp->mutable_kv_layout() = fingerprint_;
  return grpc::Status::OK;
}

}  // namespace tandem::prefill
