// Vocab: a tokenizer's vocabulary as stored in GGUF metadata (`tokenizer.ggml.*`).
//
// A plain value built once by FromGguf, which validates every array length, token
// type, special id and merge against the rest; immutable afterwards and safe to read
// from any thread.
#ifndef TANDEM_COMMON_TOKENIZER_VOCAB_H_
#define TANDEM_COMMON_TOKENIZER_VOCAB_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "common/model/gguf_file.h"
#include "common/tokenizer/normalizer.h"
#include "common/util/strings.h"

namespace tandem::tokenizer {

// `tokenizer.ggml.token_type` values; never renumber.
enum class TokenType : int32_t {
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

enum class TokenizerModel {
  kByteLevelBpe,      // tokenizer.ggml.model = "gpt2": GPT-2 style byte-level BPE with merges
  kSentencePieceBpe,  // tokenizer.ggml.model = "llama": score-ordered merges, byte fallback
  // tokenizer.ggml.model = "gemma4": spaces written "▁", the text cut into runs of
  // newlines and runs of anything else, ranked merges over code points, byte fallback
  // ("<0xXX>") for what stays outside the vocabulary.
  kCodePointBpe,
};

// SentencePiece's "▁" prefix, applied to each stretch of text between special tokens:
// - kEverySegment: every stretch (llama.cpp, and Hugging Face's legacy Prepend normalizer);
// - Hugging Face's Metaspace pre-tokenizer (GGUF key `tandem.tokenizer.metaspace`) skips a
//   stretch that already begins with a space or "▁"; with prepend_scheme "first" it
//   prefixes only the stretch that begins the input, with "always" every stretch.
enum class SpacePrefix { kEverySegment, kMetaspaceAlways, kMetaspaceFirst };

struct Vocab {
  TokenizerModel model = TokenizerModel::kByteLevelBpe;
  std::string model_name;           // tokenizer.ggml.model
  std::string pre;                  // tokenizer.ggml.pre ("" when absent)
  std::vector<std::string> tokens;  // [n_vocab] token text as stored
  std::vector<TokenType> types;     // [n_vocab]
  std::vector<float> scores;        // [n_vocab] (SentencePiece) or empty
  std::vector<std::string> merges;  // "left right", highest priority first (byte-level BPE)
  absl::flat_hash_map<std::string, int32_t, StringViewHash, StringViewEq>
      token_to_id;  // a duplicated text maps to its last id

  int32_t bos_id = -1;  // -1: none
  int32_t eos_id = -1;
  int32_t unk_id = -1;
  int32_t pad_id = -1;
  bool add_bos = false;
  bool add_eos = false;
  bool add_space_prefix = false;  // SentencePiece: prepend "▁" to the text
  // Which stretches of text between special tokens get that prefix.
  SpacePrefix space_prefix = SpacePrefix::kEverySegment;
  // Byte-level BPE: a pre-tokenized piece that is itself a token is that token, merges
  // or not (Hugging Face's `ignore_merges`; Llama 3 and Tekken vocabularies set it).
  bool ignore_merges = false;
  // Applied to the text between special tokens before pre-tokenizing.
  Normalization normalization = Normalization::kNone;

  int32_t size() const { return static_cast<int32_t>(tokens.size()); }
  bool IsSpecial(int32_t id) const {
    return types[id] == TokenType::kControl || types[id] == TokenType::kUserDefined;
  }

  static absl::StatusOr<Vocab> FromGguf(const model::GgufFile& file);
};

}  // namespace tandem::tokenizer

#endif  // TANDEM_COMMON_TOKENIZER_VOCAB_H_
