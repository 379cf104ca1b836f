// ResponseAssembler: the tokens a request's workers generate → what its client sees,
// for every front alike. Detokenizes and applies stop strings (TextStream), counts
// completion tokens, carries log-probabilities, and sends the output to the sink:
// chunk by chunk when streaming, as one chunk at the end otherwise.
//
// One per request; not thread-safe (the request's transitions are serial).
#ifndef TANDEM_ROUTER_RESPONSE_ASSEMBLER_H_
#define TANDEM_ROUTER_RESPONSE_ASSEMBLER_H_

#include <cstdint>
#include <span>

#include "common/tokenizer/tokenizer.h"
#include "router/request_spec.h"
#include "router/response.h"
#include "router/text_stream.h"

namespace tandem::router {

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
  TextStream text_;
  OutputChunk all_;  // not streaming: everything so far
  int32_t tokens_ = 0;
};

}  // namespace tandem::router

#endif  // TANDEM_ROUTER_RESPONSE_ASSEMBLER_H_
