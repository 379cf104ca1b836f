// Tokenizer: text ↔ token ids for a model, built from its GGUF metadata.
//
// Encoding: special tokens (CONTROL and USER_DEFINED; CONTROL only when parse_special)
// written in the text are matched whole first (leftmost, longest); the text between them is
// pre-tokenized and BPE'd by the vocabulary's model (byte-level BPE or SentencePiece BPE). Decoding
// goes through the same byte table as the streaming Detokenizer.
//
// Immutable after FromGguf() (the BPE word cache is internally synchronized), so one
// Tokenizer serves every thread. It does not keep the GgufFile alive.
#ifndef TANDEM_COMMON_TOKENIZER_TOKENIZER_H_
#define TANDEM_COMMON_TOKENIZER_TOKENIZER_H_

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "common/model/gguf_file.h"
#include "common/tokenizer/vocab.h"

namespace tandem::tokenizer {

class PreTokenizer;
class ByteLevelBpe;
class SentencePieceBpe;

struct EncodeOptions {
  bool add_special = true;  // BOS/EOS as the vocabulary's add_bos/add_eos flags say
  // Control-token text in the input (e.g. <|im_start|>) becomes that token; when false
  // it is plain text. User-defined tokens are matched either way, as Hugging Face
  // matches non-special added tokens.
  bool parse_special = true;
};

class Tokenizer {
 public:
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromGguf(const model::GgufFile& file);
  ~Tokenizer();

  // InvalidArgument if `text` is not valid UTF-8 (naming the byte offset).
  absl::StatusOr<std::vector<int32_t>> Encode(std::string_view text,
                                              const EncodeOptions& options = {}) const;

  // Text of `ids`; ill-formed UTF-8 becomes U+FFFD. InvalidArgument for an id
  // outside the vocabulary.
  absl::StatusOr<std::string> Decode(const std::vector<int32_t>& ids) const;

  // The bytes token `id` contributes to decoded text (special tokens: their text).
  // `id` must be in range.
  const std::string& TokenBytes(int32_t id) const { return token_bytes_[id]; }
  // Whether a leading space is dropped from the first decoded token (SentencePiece's
  // "▁" prefix).
  bool StripsLeadingSpace() const { return strip_leading_space_; }

  const Vocab& vocab() const { return vocab_; }
  int32_t vocab_size() const { return vocab_.size(); }
  size_t num_special_tokens() const { return special_.size(); }

 private:
  Tokenizer() = default;
  void EncodeText(std::string_view text, bool at_start, std::vector<int32_t>* out) const;

  Vocab vocab_;
  std::unique_ptr<PreTokenizer> pre_;
  std::unique_ptr<ByteLevelBpe> bpe_;
  std::unique_ptr<SentencePieceBpe> spm_;
  std::vector<std::string> token_bytes_;  // [n_vocab]
  bool strip_leading_space_ = false;
  // Special tokens by first byte, longest first.
  std::vector<int32_t> special_;
  bool has_user_defined_ = false;
  std::array<std::vector<int32_t>, 256> special_by_first_byte_;
};

}  // namespace tandem::tokenizer

#endif  // TANDEM_COMMON_TOKENIZER_TOKENIZER_H_
