// ResponseAssembler: the tokens a request's workers generate → what its client sees,
// for every front alike. Detokenizes and applies stop strings (TextStream, below), takes
// tool calls out of the text when the request has tools (ToolCallStream), counts
// completion tokens, carries log-probabilities, and sends the output to the sink:
// chunk by chunk when streaming, as one chunk at the end otherwise.
//
// One per request; not thread-safe (the request's transitions are serial).
#ifndef TANDEM_ROUTER_RESPONSE_ASSEMBLER_H_
#define TANDEM_ROUTER_RESPONSE_ASSEMBLER_H_

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/tokenizer/detokenizer.h"
#include "common/tokenizer/tokenizer.h"
#include "router/request_spec.h"
#include "router/response.h"
#include "router/tool_call_format.h"

namespace tandem::router {

// TextStream: a request's generated token ids → the text its client sees.
//
// Detokenizes incrementally (never half a UTF-8 character) and applies stop strings:
// text that could still be the start of a stop string is held back until the next
// token decides; when a stop string completes, the text before it is released and
// the stream stops (later tokens are ignored). The token that ends generation as
// end-of-sequence adds no text. One per request; not thread-safe.
class TextStream {
 public:
  TextStream(const tokenizer::Tokenizer& tokenizer, std::vector<std::string> stops)
      : detok_(tokenizer), stops_(std::move(stops)) {}

  // Adds a token; returns the text that can be released now. `is_eos`: the token is
  // the end-of-sequence that ended generation (it contributes no text).
  std::string Push(int32_t token, bool is_eos);
  // Generation ended: everything still held, unless a stop string was hit.
  std::string Finish();

  bool stopped() const { return stopped_; }
  const std::string& stop_string() const { return stop_; }  // the one that matched

 private:
  std::string Release();

  tokenizer::Detokenizer detok_;
  std::vector<std::string> stops_;
  std::string held_;  // complete UTF-8, not yet released
  bool stopped_ = false;
  std::string stop_;
};

class ResponseAssembler {
 public:
  // `eos_token_id`: the model's (its text is never shown). `spec` and `sink` outlive it.
  ResponseAssembler(const tokenizer::Tokenizer& tokenizer, int32_t eos_token_id,
                    const RequestSpec& spec, ResponseSink* sink);

  // Tokens from a worker (`logprobs`: one per token, or none); `finish` set when the
  // last of them ended generation. False once a stop string has matched: the tokens
  // after it are dropped and generation should stop.
  bool Add(std::span<const int32_t> tokens, std::span<const TokenLogprobs> logprobs,
           engine::FinishReason finish);
  // Generation ended (`reason`: the worker's; kStop after a stop string): sends what is
  // still held and fills `done`'s reason, stop string and completion tokens. The caller
  // then sends OnComplete.
  void Finish(engine::FinishReason reason, Completion* done);

 private:
  const RequestSpec& spec_;
  const int32_t eos_token_id_;
  ResponseSink* sink_;
  // The text through the tool-call parser (when the request has tools) into `chunk`.
  void Route(std::string text, OutputChunk* chunk);
  void RouteFinish(OutputChunk* chunk);

  TextStream text_;
  std::optional<ToolCallStream> tools_;
  OutputChunk all_;  // not streaming: everything so far
  int32_t tokens_ = 0;
};

}  // namespace tandem::router

#endif  // TANDEM_ROUTER_RESPONSE_ASSEMBLER_H_
