// OpenAiRequest: the body of an OpenAI `POST /v1/completions` or
// `POST /v1/chat/completions`, checked and turned into tandem GenerateRequests (which
// RequestValidator then validates like any gRPC request).
//
// Accepted, as OpenAI documents them: model, prompt (a string, an array of token ids,
// or an array of either — one choice group per prompt), messages (content a string or
// an array of text parts), max_tokens / max_completion_tokens, temperature, top_p, n
// (≤ kMaxChoices), stream, stream_options.include_usage, stop (string or array), seed,
// presence_penalty, frequency_penalty, logprobs (completions: an int; chat: a bool with
// top_logprobs), user (ignored), logit_bias, echo (completions, not with logprobs),
// best_of ≥ n (completions, not streaming: the n candidates of highest total
// log-probability), tools / tool_choice / parallel_tool_calls and tool turns (chat),
// response_format. Extensions vLLM accepts: top_k, min_p, repetition_penalty,
// ignore_eos, stop_token_ids, cache_salt, request_id, structured_outputs, guided_*;
// priority (lower runs first); tandem's own: disable_speculation.
// Features tandem does not have (suffix, non-text content parts) are refused with 400
// rather than silently ignored; unknown fields are ignored, as vLLM and OpenAI do.
//
// Errors are InvalidArgument("<param>: <why>"), the parameter named as the client sent it.
// With n > 1 and a seed, choice i samples with seed + i (so choices differ but the
// request is reproducible).
#ifndef TANDEM_ROUTER_OPENAI_REQUEST_H_
#define TANDEM_ROUTER_OPENAI_REQUEST_H_

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "tandem/v1/generation.pb.h"

namespace tandem::router {

enum class OpenAiEndpoint { kCompletions, kChatCompletions };

struct OpenAiRequest {
  OpenAiEndpoint endpoint = OpenAiEndpoint::kCompletions;
  std::string model;  // as sent; empty when absent
  // One request per candidate: prompt p's candidate i is choices[p * best_of + i]. Each
  // prompt's best_of candidates give its n choices (all of them when best_of == n).
  std::vector<v1::GenerateRequest> choices;
  int n = 1;
  int best_of = 1;    // ≥ n; > n only without streaming: the n most likely are returned
  bool echo = false;  // completions: each choice's text begins with its prompt
  // With echo: prompt p's text ("" for a token-id prompt: the front decodes it).
  std::vector<std::string> echo_texts;
  bool stream = false;
  bool include_usage = false;   // stream_options.include_usage
  int logprobs = -1;            // top alternatives per token to report; -1: no logprobs
  bool max_tokens_set = false;  // chat without max_tokens: up to the rest of the context
};

inline constexpr int kMaxChoices = 16;  // n × prompts per HTTP request
inline constexpr int kMaxTopLogprobs = 20;

absl::StatusOr<OpenAiRequest> ParseOpenAiRequest(OpenAiEndpoint endpoint, std::string_view body);

// vLLM's POST /tokenize body: {"prompt": "<text>"} or {"messages": [...]} (the same
// message rules as chat completions).
absl::StatusOr<v1::TokenizeRequest> ParseTokenizeRequest(std::string_view body);

}  // namespace tandem::router

#endif  // TANDEM_ROUTER_OPENAI_REQUEST_H_
