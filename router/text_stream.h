// TextStream: a request's generated token ids → the text its client sees.
//
// Detokenizes incrementally (never half a UTF-8 character) and applies stop strings:
// text that could still be the start of a stop string is held back until the next
// token decides; when a stop string completes, the text before it is released and
// the stream stops (later tokens are ignored). The token that ends generation as
// end-of-sequence adds no text. One per request; not thread-safe.
#ifndef TANDEM_ROUTER_TEXT_STREAM_H_
#define TANDEM_ROUTER_TEXT_STREAM_H_

#include <cstdint>
#include <string>
#include <vector>

#include "common/tokenizer/detokenizer.h"
#include "common/tokenizer/tokenizer.h"

namespace tandem::router {

class TextStream {
 public:
  TextStream(const tokenizer::Tokenizer& tokenizer, std::vector<std::string> stops)
      : detok_(tokenizer), stops_(std::move(stops)) {}

  // Adds a token; returns the text that can be released now. `is_eos`: the token is
  // the end-of-sequence that ended generation (it contributes no text).
  std::string Push(int32_t token, bool is_eos);
  // Generation ended: everything still held, unless a stop string was hit.
  std::string Finish();

  bool stopped() const { return stopped_; }
  const std::string& stop_string() const { return stop_; }  // the one that matched

 private:
  std::string Release();

  tokenizer::Detokenizer detok_;
  std::vector<std::string> stops_;
  std::string held_;  // complete UTF-8, not yet released
  bool stopped_ = false;
  std::string stop_;
};

}  // namespace tandem::router

#endif  // TANDEM_ROUTER_TEXT_STREAM_H_
