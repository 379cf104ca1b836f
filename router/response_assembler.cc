#include "router/response_assembler.h"

namespace tandem::router {

ResponseAssembler::ResponseAssembler(const tokenizer::Tokenizer& tokenizer, int32_t eos_token_id,
                                     const RequestSpec& spec, ResponseSink* sink)
    : spec_(spec), eos_token_id_(eos_token_id), sink_(sink), text_(tokenizer, spec.stop) {}

bool ResponseAssembler::Add(std::span<const int32_t> tokens,
                            std::span<const TokenLogprobs> logprobs, engine::FinishReason finish) {
  if (text_.stopped()) return false;
  OutputChunk chunk;
  for (size_t i = 0; i < tokens.size(); ++i) {
    const int32_t t = tokens[i];
    const bool is_eos = i + 1 == tokens.size() && finish == engine::FinishReason::kStop &&
                        !spec_.params.ignore_eos && t == eos_token_id_;
    ++tokens_;
    chunk.token_ids.push_back(t);
    chunk.text += text_.Push(t, is_eos);
    if (i < logprobs.size()) chunk.logprobs.push_back(logprobs[i]);
    if (text_.stopped()) break;
  }
  if (spec_.stream) {
    sink_->OnChunk(std::move(chunk));
  } else {
    all_.token_ids.insert(all_.token_ids.end(), chunk.token_ids.begin(), chunk.token_ids.end());
    all_.text += chunk.text;
    for (TokenLogprobs& lp : chunk.logprobs) all_.logprobs.push_back(std::move(lp));
  }
  return !text_.stopped();
}

void ResponseAssembler::Finish(engine::FinishReason reason, Completion* done) {
  std::string tail = text_.Finish();
  if (spec_.stream) {
    if (!tail.empty()) sink_->OnChunk({{}, std::move(tail), {}});
  } else {
    all_.text += tail;
    sink_->OnChunk(std::move(all_));
  }
  done->reason = text_.stopped() ? engine::FinishReason::kStop : reason;
  done->stop_reason = text_.stopped() ? text_.stop_string() : "";
  done->completion_tokens = tokens_;
}

}  // namespace tandem::router
