// SentencePieceBpe: SentencePiece-style BPE (`tokenizer.ggml.model = llama`).
//
// Spaces are written "▁" (U+2581), and "▁" is prepended to the text when the
// vocabulary asks for it (Vocab::space_prefix says to which stretches). With
// `ignore_merges` a stretch that is itself a token is that token. Otherwise the text
// is split into code points; then, repeatedly, the adjacent pair whose concatenation
// is a token with the highest score is merged (leftmost first among equal scores). A
// symbol that is not a token at the end is spelled with byte tokens "<0xXX>" (byte
// fallback), or the unknown token.
//
// Immutable after Create(); Encode() may run on any number of threads.
#ifndef TANDEM_COMMON_TOKENIZER_SENTENCEPIECE_BPE_H_
#define TANDEM_COMMON_TOKENIZER_SENTENCEPIECE_BPE_H_

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "common/tokenizer/vocab.h"

namespace tandem::tokenizer {

inline constexpr std::string_view kSpaceMarker = "\xE2\x96\x81";  // U+2581 "▁"

class SentencePieceBpe {
 public:
  static absl::StatusOr<std::unique_ptr<SentencePieceBpe>> Create(const Vocab& vocab);

  // Appends the ids of `text` (valid UTF-8; spaces not yet replaced) to `out`.
  // `text` is one stretch between special tokens; `at_start`: it begins the input.
  void Encode(std::string_view text, bool at_start, std::vector<int32_t>* out) const;

  // Raw bytes a token stands for: "▁" → " ", "<0xXX>" → that byte.
  std::string TokenBytes(int32_t id) const;

 private:
  explicit SentencePieceBpe(const Vocab& vocab) : vocab_(vocab) {}
  // Id of a token that may take part in merges, or -1.
  int32_t MergeableId(std::string_view text) const;

  const Vocab& vocab_;
  std::array<int32_t, 256> byte_token_{};  // "<0xXX>" ids, -1 if absent
};

}  // namespace tandem::tokenizer

#endif  // TANDEM_COMMON_TOKENIZER_SENTENCEPIECE_BPE_H_
