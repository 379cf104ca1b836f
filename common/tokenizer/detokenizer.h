// Detokenizer: turns a stream of token ids into text, one token at a time, without
// ever emitting part of a UTF-8 character.
//
// Bytes that could still complete a character are held back until the next token;
// bytes that can never become valid UTF-8 are emitted as U+FFFD (one per maximal
// ill-formed subsequence, as Python and Rust do). Finish() flushes what is held.
// One Detokenizer per stream; not thread-safe. It borrows the Tokenizer.
#ifndef TANDEM_COMMON_TOKENIZER_DETOKENIZER_H_
#define TANDEM_COMMON_TOKENIZER_DETOKENIZER_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace tandem::tokenizer {

class Tokenizer;

class Detokenizer {
 public:
  explicit Detokenizer(const Tokenizer& tokenizer) : tokenizer_(tokenizer) {}

  // Text completed by token `id` (may be empty). InvalidArgument for an id outside
  // the vocabulary; the stream is unchanged then.
  absl::StatusOr<std::string> Push(int32_t id);

  // Text still held back, as U+FFFD; the stream is then empty.
  std::string Finish();

  // Bytes held back waiting for the rest of a character (0..3).
  size_t pending_bytes() const { return pending_.size(); }

 private:
  const Tokenizer& tokenizer_;
  std::string pending_;
  bool at_start_ = true;
};

}  // namespace tandem::tokenizer

#endif  // TANDEM_COMMON_TOKENIZER_DETOKENIZER_H_
