#include "common/tokenizer/detokenizer.h"

#include "absl/status/status.h"
#include "common/model/token_rules.h"
#include "common/tokenizer/tokenizer.h"
#include "common/util/strings.h"
#include "common/util/utf8.h"

namespace tandem::tokenizer {

absl::StatusOr<std::string> Detokenizer::Push(int32_t id) {
  if (absl::Status st = model::CheckTokenId("token_ids", id, tokenizer_.vocab_size()); !st.ok()) {
    return st;
  }
  std::string_view bytes = tokenizer_.TokenBytes(id);
  if (at_start_ && tokenizer_.StripsLeadingSpace() && !bytes.empty() && bytes[0] == ' ') {
    bytes.remove_prefix(1);
  }
  at_start_ = false;
  pending_.append(bytes);

  std::string out;
  std::string_view s = pending_;
  size_t i = 0;
  while (i < s.size()) {
    size_t len = utf8::SequenceLength(s.substr(i));
    if (len > 0) {
      out.append(s.substr(i, len));
      i += len;
      continue;
    }
    size_t part = utf8::MaximalSubpart(s.substr(i));
    if (i + part == s.size() && part < utf8::DeclaredLength(static_cast<uint8_t>(s[i]))) {
      break;  // an incomplete character at the end: wait for more bytes
    }
    out.append(utf8::kReplacement);
    i += part;
  }
  pending_.erase(0, i);
  return out;
}

std::string Detokenizer::Finish() {
  std::string out;
  if (!pending_.empty()) out.append(utf8::kReplacement);
  pending_.clear();
  return out;
}

}  // namespace tandem::tokenizer
