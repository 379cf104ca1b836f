// FinishReason: why a sequence stopped generating. The engine sets it, the workers send
// it, the router reports it to clients (OpenAI's finish_reason is its name).
#ifndef TANDEM_COMMON_ENGINE_FINISH_REASON_H_
#define TANDEM_COMMON_ENGINE_FINISH_REASON_H_

#include <string_view>

namespace tandem::engine {

enum class FinishReason {
  kNone,
  kStop,       // EOS or a stop token id
  kLength,     // max_tokens, or the model's context is full
  kCancelled,  // the client cancelled
};

// "stop", "length", "cancelled"; "" for kNone.
constexpr std::string_view FinishReasonName(FinishReason r) {
  switch (r) {
    case FinishReason::kNone:
      return "";
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kCancelled:
      return "cancelled";
  }
  return "";
}

}  // namespace tandem::engine

#endif  // TANDEM_COMMON_ENGINE_FINISH_REASON_H_
