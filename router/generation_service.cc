#include "router/generation_service.h"

#include "common/rpc/status_convert.h"
#include "common/rpc/stream_outbox.h"

namespace tandem::router {

namespace {

v1::FinishReason ToProto(engine::FinishReason r) {
  switch (r) {
    case engine::FinishReason::kStop:
      return v1::FINISH_REASON_STOP;
    case engine::FinishReason::kLength:
      return v1::FINISH_REASON_LENGTH;
    case engine::FinishReason::kNone:
    case engine::FinishReason::kCancelled:
      break;
  }
  return v1::FINISH_REASON_UNSPECIFIED;
}

// Router output → GenerateResponse messages in the stream's outbox.
class OutboxSink : public ResponseSink {
 public:
  explicit OutboxSink(std::shared_ptr<rpc::StreamOutbox<v1::GenerateResponse>> outbox)
      : outbox_(std::move(outbox)) {}

  void OnChunk(OutputChunk chunk) override {
    v1::GenerateResponse msg;
    v1::GenerateChunk* c = msg.mutable_chunk();
    c->mutable_token_ids()->Assign(chunk.token_ids.begin(), chunk.token_ids.end());
    c->set_text(std::move(chunk.text));
    for (const TokenLogprobs& lp : chunk.logprobs) {
      v1::TokenLogprob* out = c->add_logprobs();
      out->set_token_id(lp.token);
      out->set_logprob(lp.logprob);
      for (const auto& [id, logprob] : lp.top) {
        v1::TopLogprob* t = out->add_top_logprobs();
        t->set_token_id(id);
        t->set_logprob(logprob);
      }
    }
    for (tokenizer::ToolCall& call : chunk.tool_calls) {
      v1::ToolCall* out = c->add_tool_calls();
      out->set_id(std::move(call.id));
      out->set_name(std::move(call.name));
      out->set_arguments(std::move(call.arguments));
    }
    outbox_->Push(std::move(msg));
  }

  void OnComplete(const Completion& done) override {
    v1::GenerateResponse msg;
    v1::GenerateComplete* c = msg.mutable_complete();
    c->set_finish_reason(done.tool_calls && done.reason == engine::FinishReason::kStop
                             ? v1::FINISH_REASON_TOOL_CALLS
                             : ToProto(done.reason));
    c->set_stop_reason(done.stop_reason);
    c->set_request_id(done.request_id);
    c->mutable_usage()->set_prompt_tokens(done.prompt_tokens);
    c->mutable_usage()->set_completion_tokens(done.completion_tokens);
    c->mutable_usage()->set_cached_tokens(done.cached_tokens);
    v1::Timings* t = c->mutable_timings();
    t->set_queue_ms(done.timings.queue_ms);
    t->set_prefill_ms(done.timings.prefill_ms);
    t->set_kv_transfer_ms(done.timings.kv_transfer_ms);
    t->set_time_to_first_token_ms(done.timings.ttft_ms);
    t->set_decode_ms(done.timings.decode_ms);
    t->set_e2e_ms(done.timings.e2e_ms);
    t->set_prefill_compute_ms(done.timings.prefill_compute_ms);
    t->set_prefill_queue_ms(done.timings.prefill_queue_ms);
    outbox_->Push(std::move(msg));
    outbox_->End(grpc::Status::OK);
  }

  void OnError(const absl::Status& status) override { outbox_->End(rpc::ToGrpc(status)); }

 private:
  std::shared_ptr<rpc::StreamOutbox<v1::GenerateResponse>> outbox_;
};

// Chunks queued behind a write in flight are merged into one.
bool MergeChunks(v1::GenerateResponse* into, const v1::GenerateResponse& next) {
  if (!into->has_chunk() || !next.has_chunk()) return false;
  v1::GenerateChunk* c = into->mutable_chunk();
  c->mutable_token_ids()->MergeFrom(next.chunk().token_ids());
  c->mutable_text()->append(next.chunk().text());
  c->mutable_logprobs()->MergeFrom(next.chunk().logprobs());
  return true;
}

class GenerateStream : public grpc::ServerWriteReactor<v1::GenerateResponse> {
 public:
  GenerateStream(grpc::CallbackServerContext* ctx, const v1::GenerateRequest* req, Router* router,
                 WorkerPool* pool, const RequestValidator* validator)
      : router_(router),
        outbox_(std::make_shared<rpc::StreamOutbox<v1::GenerateResponse>>(this, &MergeChunks)) {
    auto spec = validator->Validate(*req, pool->MaxDecodeCapacity());
    if (!spec.ok()) {
      router->RecordRejected(spec.status());
      outbox_->End(rpc::ToGrpc(spec.status()));
      return;
    }
    std::optional<std::chrono::system_clock::time_point> deadline;
    if (ctx->deadline() != std::chrono::system_clock::time_point::max()) deadline = ctx->deadline();
    auto r = router->Submit(*std::move(spec), deadline, std::make_shared<OutboxSink>(outbox_));
    if (!r.ok()) {
      outbox_->End(rpc::ToGrpc(r.status()));
      return;
    }
    std::lock_guard<std::mutex> lock(mu_);
    request_ = *std::move(r);
  }

  void OnWriteDone(bool ok) override { outbox_->WriteDone(ok); }
  void OnCancel() override {
    std::shared_ptr<RouterRequest> r;
    {
      std::lock_guard<std::mutex> lock(mu_);
      r = request_;
    }
    if (r != nullptr) router_->Cancel(r);
    outbox_->End(grpc::Status(grpc::StatusCode::CANCELLED, "cancelled by the client"));
  }
  void OnDone() override { delete this; }

 private:
  Router* router_;
  std::shared_ptr<rpc::StreamOutbox<v1::GenerateResponse>> outbox_;
  std::mutex mu_;
  std::shared_ptr<RouterRequest> request_;
};

}  // namespace

grpc::ServerWriteReactor<v1::GenerateResponse>* GenerationService::Generate(
    grpc::CallbackServerContext* ctx, const v1::GenerateRequest* req) {
  return new GenerateStream(ctx, req, router_, pool_, validator_);
}

grpc::ServerUnaryReactor* GenerationService::Abort(grpc::CallbackServerContext* ctx,
                                                   const v1::AbortRequest* req,
                                                   v1::AbortResponse* resp) {
  resp->set_found(router_->Abort(req->request_id()));
  auto* reactor = ctx->DefaultReactor();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerUnaryReactor* GenerationService::Tokenize(grpc::CallbackServerContext* ctx,
                                                      const v1::TokenizeRequest* req,
                                                      v1::TokenizeResponse* resp) {
  auto* reactor = ctx->DefaultReactor();
  auto ids = validator_->Tokenize(*req);
  if (ids.ok()) resp->mutable_token_ids()->Assign(ids->begin(), ids->end());
  reactor->Finish(rpc::ToGrpc(ids.status()));
  return reactor;
}

grpc::ServerUnaryReactor* GenerationService::GetModelInfo(grpc::CallbackServerContext* ctx,
                                                          const v1::GetModelInfoRequest*,
                                                          v1::GetModelInfoResponse* resp) {
  resp->set_model_name(info_.name);
  resp->set_architecture(config_.architecture);
  resp->set_vocab_size(static_cast<int32_t>(config_.vocab_size));
  resp->set_max_context_length(static_cast<int32_t>(config_.context_length));
  resp->set_eos_token_id(config_.eos_token_id);
  resp->set_num_layers(static_cast<int32_t>(config_.n_layers));
  resp->set_hidden_size(static_cast<int32_t>(config_.hidden_size));
  resp->set_kv_bytes_per_token(info_.kv_bytes_per_token);
  auto* reactor = ctx->DefaultReactor();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerUnaryReactor* GenerationService::GetServerInfo(grpc::CallbackServerContext* ctx,
                                                           const v1::GetServerInfoRequest*,
                                                           v1::GetServerInfoResponse* resp) {
  const RouterStats s = router_->Stats();
  resp->set_version(TANDEM_VERSION);
  resp->set_queued_requests(s.queued_requests);
  resp->set_queued_tokens(s.queued_tokens);
  resp->set_running_requests(s.running_requests);
  auto fill = [](const std::vector<WorkerSnapshot>& in,
                 google::protobuf::RepeatedPtrField<v1::WorkerInfo>* out) {
    for (const WorkerSnapshot& w : in) {
      v1::WorkerInfo* i = out->Add();
      i->set_address(w.address);
      i->set_healthy(w.healthy);
      i->set_in_flight(w.in_flight);
      i->set_free_blocks(w.load.free_blocks);
      i->set_unpaired(w.unpaired);
    }
  };
  fill(pool_->Snapshot(WorkerRole::kPrefill), resp->mutable_prefill_workers());
  fill(pool_->Snapshot(WorkerRole::kDecode), resp->mutable_decode_workers());
  resp->set_not_ready_reason(pool_->NotReadyReason());
  auto* reactor = ctx->DefaultReactor();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

}  // namespace tandem::router
