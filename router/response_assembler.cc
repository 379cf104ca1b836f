#include "router/response_assembler.h"

#include <algorithm>

namespace tandem::router {

std::string TextStream::Push(int32_t token, bool is_eos) {
  if (stopped_) return {};
  if (!is_eos) {
    auto piece = detok_.Push(token);
    if (piece.ok()) held_ += *piece;
  }
  return Release();
}

std::string TextStream::Finish() {
  if (stopped_) return {};
  held_ += detok_.Finish();
  std::string out = Release();
  if (!stopped_) {
    out += held_;
    held_.clear();
  }
  return out;
}

std::string TextStream::Release() {
  // The earliest complete stop string wins.
  size_t hit = std::string::npos;
  for (const std::string& s : stops_) {
    const size_t at = held_.find(s);
    if (at != std::string::npos && at < hit) {
      hit = at;
      stop_ = s;
    }
  }
  if (hit != std::string::npos) {
    stopped_ = true;
    std::string out = held_.substr(0, hit);
    held_.clear();
    return out;
  }
  // Hold back the longest suffix that is a proper prefix of some stop string. Stop
  // strings start with a lead byte, so the cut falls on a character boundary.
  size_t keep = 0;
  for (const std::string& s : stops_) {
    const size_t max_len = std::min(s.size() - 1, held_.size());
    for (size_t len = max_len; len > keep; --len) {
      if (held_.compare(held_.size() - len, len, s, 0, len) == 0) {
        keep = len;
        break;
      }
    }
  }
  std::string out = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return out;
}

ResponseAssembler::ResponseAssembler(const tokenizer::Tokenizer& tokenizer, int32_t eos_token_id,
                                     const RequestSpec& spec, ResponseSink* sink)
    : spec_(spec), eos_token_id_(eos_token_id), sink_(sink), text_(tokenizer, spec.stop) {
  if (spec.parse_tool_calls) tools_.emplace(spec.tool_format, spec.tool_names);
}

void ResponseAssembler::Route(std::string text, OutputChunk* chunk) {
  if (!tools_) {
    chunk->text += text;
    return;
  }
  tools_->Push(text, &chunk->text, &chunk->tool_calls);
}

void ResponseAssembler::RouteFinish(OutputChunk* chunk) {
  if (tools_) tools_->Finish(&chunk->text, &chunk->tool_calls);
}

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
    Route(text_.Push(t, is_eos), &chunk);
    if (i < logprobs.size()) chunk.logprobs.push_back(logprobs[i]);
    if (text_.stopped()) break;
  }
  if (spec_.stream) {
    sink_->OnChunk(std::move(chunk));
  } else {
    all_.token_ids.insert(all_.token_ids.end(), chunk.token_ids.begin(), chunk.token_ids.end());
    all_.text += chunk.text;
    for (TokenLogprobs& lp : chunk.logprobs) all_.logprobs.push_back(std::move(lp));
    for (tokenizer::ToolCall& c : chunk.tool_calls) all_.tool_calls.push_back(std::move(c));
  }
  return !text_.stopped();
}

void ResponseAssembler::Finish(engine::FinishReason reason, Completion* done) {
  OutputChunk last;
  Route(text_.Finish(), &last);
  RouteFinish(&last);
  if (spec_.stream) {
    if (!last.text.empty() || !last.tool_calls.empty()) sink_->OnChunk(std::move(last));
  } else {
    all_.text += last.text;
    for (tokenizer::ToolCall& c : last.tool_calls) all_.tool_calls.push_back(std::move(c));
    sink_->OnChunk(std::move(all_));
  }
  done->tool_calls = tools_ && tools_->calls_made() > 0;
  done->reason = text_.stopped() ? engine::FinishReason::kStop : reason;
  done->stop_reason = text_.stopped() ? text_.stop_string() : "";
  done->completion_tokens = tokens_;
}

}  // namespace tandem::router
