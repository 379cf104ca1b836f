// PreTokenizer: splits text into the pieces BPE runs on, by the regular expressions
// that `tokenizer.ggml.pre` names (PCRE2, UTF-8 with Unicode properties, JIT).
//
// A pre-tokenizer is a sequence of patterns; each one splits every piece produced by
// the previous one, keeping both the matches and the text between them ("isolated"
// splitting, as in Hugging Face tokenizers). Concatenating the pieces always gives
// back the input. Pieces are UTF-8 except after a byte-mode step (falcon's digits, as
// its byte-level spelling sees them), which may cut a character. Immutable after Create(); Split()
// may be called from any thread.
#ifndef TANDEM_COMMON_TOKENIZER_PRE_TOKENIZER_H_
#define TANDEM_COMMON_TOKENIZER_PRE_TOKENIZER_H_

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace tandem::tokenizer {

class PreTokenizer {
 public:
  // The pre-tokenizer named by `tokenizer.ggml.pre` (e.g. "gpt2", "smollm", "llama3",
  // "qwen2", "deepseek-llm", "falcon", "tekken"); "" and "default" mean GPT-2.
  // Unimplemented for unknown names.
  static absl::StatusOr<std::unique_ptr<PreTokenizer>> ForName(std::string_view name);
  // The `tokenizer.ggml.pre` family whose splitting steps are exactly `steps` — each
  // a pattern as Hugging Face's tokenizer.json writes it (a Split's regex; kByteLevel
  // for ByteLevel with use_regex; kDigits for Digits(individual_digits)) — or "" when
  // none is. Matched: gpt2, smollm, llama-bpe, qwen2, qwen35, tekken, gpt-4o (whose
  // patterns tandem keeps as tokenizer.json writes them); not: deepseek-llm,
  // deepseek-coder, falcon (rewritten for PCRE2 or byte mode).
  static std::string_view FamilyOf(const std::vector<std::string>& steps);
  static constexpr std::string_view kByteLevel =
      "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
  static constexpr std::string_view kDigits = "\\p{N}";

  // A pre-tokenizer from explicit patterns, applied in order.
  static absl::StatusOr<std::unique_ptr<PreTokenizer>> FromPatterns(
      const std::vector<std::string>& patterns);

  ~PreTokenizer();
  PreTokenizer(const PreTokenizer&) = delete;
  PreTokenizer& operator=(const PreTokenizer&) = delete;

  // Appends the pieces of `text` (valid UTF-8, checked by the caller) to `out`; the
  // pieces are views into `text`.
  void Split(std::string_view text, std::vector<std::string_view>* out) const;

 private:
  struct Pattern;
  PreTokenizer() = default;
  // Appends a step; `bytes` matches bytes rather than UTF-8 code points, and such a
  // step may cut a character (for byte-level BPE, whose pieces are bytes).
  absl::Status Add(std::string_view pattern, bool bytes);
  std::vector<std::unique_ptr<Pattern>> patterns_;
};

}  // namespace tandem::tokenizer

#endif  // TANDEM_COMMON_TOKENIZER_PRE_TOKENIZER_H_
