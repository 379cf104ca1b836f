#include "router/metered_sink.h"

#include "common/rpc/status_convert.h"

namespace tandem::router {

void MeteredSink::OnChunk(OutputChunk chunk) {
  const auto now = std::chrono::steady_clock::now();
  const int32_t tokens = static_cast<int32_t>(chunk.token_ids.size());
  if (tokens > 0) {
    // The first token's latency is TTFT; tokens that arrive with it have no gap to report.
    if (seen_token_) {
      metrics_->TokensArrived(std::chrono::duration<double>(now - last_token_).count(), tokens);
    }
    seen_token_ = true;
    last_token_ = now;
  }
  inner_->OnChunk(std::move(chunk));
}

void MeteredSink::OnComplete(const Completion& c) {
  metrics::RequestRecord r;
  r.finished_reason = c.reason == engine::FinishReason::kLength ? "length" : "stop";
  r.prompt_tokens = c.prompt_tokens;
  r.generation_tokens = c.completion_tokens;
  r.ttft = c.timings.ttft_ms / 1e3;
  r.e2e = c.timings.e2e_ms / 1e3;
  r.queue = c.timings.queue_ms / 1e3;
  r.prefill = c.timings.prefill_ms / 1e3;
  r.decode = c.timings.decode_ms / 1e3;
  metrics_->RequestFinished(r);
  inner_->OnComplete(c);
}

void MeteredSink::OnError(const absl::Status& status) {
  metrics_->RequestFailed(rpc::CodeName(rpc::ToGrpc(status).error_code()));
  inner_->OnError(status);
}

}  // namespace tandem::router
