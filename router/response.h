// What a request gives back to its client, in the router's own terms: output chunks,
// the completion record, and the ResponseSink both fronts (gRPC Generate, the OpenAI
// HTTP API) implement. One shape per value: a token's log-probabilities are a
// TokenLogprobs from the worker client to the HTTP writer.
#ifndef TANDEM_ROUTER_RESPONSE_H_
#define TANDEM_ROUTER_RESPONSE_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "common/engine/finish_reason.h"
#include "common/tokenizer/chat_template.h"

namespace tandem::router {

struct TokenLogprobs {
  int32_t token = 0;
  float logprob = 0;
  std::vector<std::pair<int32_t, float>> top;  // most likely first
};

struct OutputChunk {
  std::vector<int32_t> token_ids;
  std::string text;
  std::vector<TokenLogprobs> logprobs;  // one per token id when requested
  // Tool calls this chunk's output completed (their text is not in `text`).
  std::vector<tokenizer::ToolCall> tool_calls;
};

struct RequestTimings {
  double queue_ms = 0, prefill_ms = 0, kv_transfer_ms = 0, ttft_ms = 0, decode_ms = 0, e2e_ms = 0;
  double prefill_compute_ms = 0, prefill_queue_ms = 0;
};

struct Completion {
  engine::FinishReason reason = engine::FinishReason::kNone;  // kStop or kLength
  std::string stop_reason;                                    // the stop string, if one
  bool tool_calls = false;  // the output made tool calls (finish reason "tool_calls")
  int32_t prompt_tokens = 0;
  int32_t completion_tokens = 0;
  int32_t cached_tokens = 0;
  RequestTimings timings;
  std::string request_id;
};

// Where a request's output goes. Called from router and gRPC callback threads, never
// concurrently for one request, and never blocking (push to a queue, do not write to a
// socket); after OnComplete or OnError nothing more is called.
class ResponseSink {
 public:
  virtual ~ResponseSink() = default;
  virtual void OnChunk(OutputChunk chunk) = 0;
  virtual void OnComplete(const Completion& completion) = 0;
  virtual void OnError(const absl::Status& status) = 0;
};

}  // namespace tandem::router

#endif  // TANDEM_ROUTER_RESPONSE_H_
