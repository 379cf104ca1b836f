#include "common/tokenizer/tokenizer.h"

#include <algorithm>

#include "absl/status/status.h"
#include "common/tokenizer/byte_level_bpe.h"
#include "common/tokenizer/detokenizer.h"
#include "common/tokenizer/pre_tokenizer.h"
#include "common/tokenizer/sentencepiece_bpe.h"
#include "common/util/status_macros.h"
#include "common/util/strings.h"
#include "common/util/utf8.h"

namespace tandem::tokenizer {

namespace {

// The byte a "<0xXX>" token stands for, or -1 for any other text.
int ByteTokenValue(std::string_view t) {
  auto hex = [](char c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
  };
  if (t.size() != 6 || !t.starts_with("<0x") || t[5] != '>') return -1;
  const int hi = hex(t[3]), lo = hex(t[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

}  // namespace

Tokenizer::~Tokenizer() = default;

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromGguf(const model::GgufFile& file) {
  std::unique_ptr<Tokenizer> tok(new Tokenizer());
  ASSIGN_OR_RETURN(tok->vocab_, Vocab::FromGguf(file));
  const Vocab& v = tok->vocab_;
  const int32_t n = v.size();
  tok->token_bytes_.resize(n);
  if (v.model == TokenizerModel::kCodePointBpe) {
    ASSIGN_OR_RETURN(tok->bpe_, ByteLevelBpe::Create(tok->vocab_));
    for (int32_t i = 0; i < n; ++i) {
      const std::string& t = v.tokens[i];
      if (v.IsSpecial(i)) {
        tok->token_bytes_[i] = t;
      } else if (const int b = ByteTokenValue(t); v.types[i] == TokenType::kByte && b >= 0) {
        tok->token_bytes_[i] = std::string(1, static_cast<char>(b));
      } else {
        tok->token_bytes_[i] = ReplaceAll(t, kSpaceMarker, " ");
      }
    }
  } else if (v.model == TokenizerModel::kByteLevelBpe) {
    ASSIGN_OR_RETURN(tok->pre_, PreTokenizer::ForName(v.pre));
    ASSIGN_OR_RETURN(tok->bpe_, ByteLevelBpe::Create(tok->vocab_));
    for (int32_t i = 0; i < n; ++i) {
      tok->token_bytes_[i] = v.IsSpecial(i) ? v.tokens[i] : tok->bpe_->TokenBytes(v.tokens[i]);
    }
  } else {
    ASSIGN_OR_RETURN(tok->spm_, SentencePieceBpe::Create(tok->vocab_));
    for (int32_t i = 0; i < n; ++i) {
      tok->token_bytes_[i] = v.IsSpecial(i) ? v.tokens[i] : tok->spm_->TokenBytes(i);
    }
    tok->strip_leading_space_ = v.add_space_prefix;
  }
  for (int32_t i = 0; i < n; ++i) {
    if (v.IsSpecial(i) && !v.tokens[i].empty()) {
      tok->special_.push_back(i);
      if (v.types[i] == TokenType::kUserDefined) tok->has_user_defined_ = true;
    }
  }
  for (int32_t id : tok->special_) {
    tok->special_by_first_byte_[static_cast<uint8_t>(v.tokens[id][0])].push_back(id);
  }
  for (auto& bucket : tok->special_by_first_byte_) {
    std::stable_sort(bucket.begin(), bucket.end(),
                     [&](int32_t a, int32_t b) { return v.tokens[a].size() > v.tokens[b].size(); });
  }
  return tok;
}

void Tokenizer::EncodeText(std::string_view text, bool at_start, std::vector<int32_t>* out) const {
  if (text.empty()) return;
  if (spm_ != nullptr) {
    spm_->Encode(text, at_start, out);
    return;
  }
  if (vocab_.model == TokenizerModel::kCodePointBpe) {
    // Spaces as "▁"; runs of newlines (one token where the run is one) and runs of
    // anything else, each merged on its own.
    const std::string s = ReplaceAll(text, " ", kSpaceMarker);
    for (size_t i = 0; i < s.size();) {
      const bool newlines = s[i] == '\n';
      size_t j = i;
      while (j < s.size() && (s[j] == '\n') == newlines) ++j;
      const std::string_view run(s.data() + i, j - i);
      i = j;
      if (newlines) {
        if (auto it = vocab_.token_to_id.find(run); it != vocab_.token_to_id.end()) {
          out->push_back(it->second);
          continue;
        }
      }
      bpe_->Encode(run, out);
    }
    return;
  }
  std::string normalized;
  if (vocab_.normalization != Normalization::kNone) {
    normalized = Normalize(vocab_.normalization, text);
    text = normalized;
  }
  std::vector<std::string_view> pieces;
  pre_->Split(text, &pieces);
  for (std::string_view p : pieces) bpe_->Encode(p, out);
}

absl::StatusOr<std::vector<int32_t>> Tokenizer::Encode(std::string_view text,
                                                       const EncodeOptions& options) const {
  if (size_t bad = utf8::FirstInvalid(text); bad != text.size()) {
    return absl::InvalidArgumentError(
        StrCat("text is not valid UTF-8 (ill-formed sequence at byte ", bad, ")"));
  }
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 2);
  if (options.add_special && vocab_.add_bos) ids.push_back(vocab_.bos_id);

  size_t segment = 0;  // start of the plain text not yet encoded
  // User-defined tokens are always matched whole (Hugging Face's non-special added
  // tokens, such as GPT-NeoX's runs of spaces); control tokens only when asked.
  if (options.parse_special ? !special_.empty() : has_user_defined_) {
    for (size_t i = 0; i < text.size();) {
      int32_t match = -1;
      for (int32_t id : special_by_first_byte_[static_cast<uint8_t>(text[i])]) {
        if (!options.parse_special && vocab_.types[id] != TokenType::kUserDefined) continue;
        if (text.substr(i, vocab_.tokens[id].size()) == vocab_.tokens[id]) {
          match = id;
          break;
        }
      }
      if (match < 0) {
        ++i;
        continue;
      }
      EncodeText(text.substr(segment, i - segment), segment == 0, &ids);
      ids.push_back(match);
      i += vocab_.tokens[match].size();
      segment = i;
    }
  }
  EncodeText(text.substr(segment), segment == 0, &ids);

  if (options.add_special && vocab_.add_eos) ids.push_back(vocab_.eos_id);
  return ids;
}

absl::StatusOr<std::string> Tokenizer::Decode(const std::vector<int32_t>& ids) const {
  Detokenizer detok(*this);
  std::string text;
  for (int32_t id : ids) {
    ASSIGN_OR_RETURN(std::string piece, detok.Push(id));
    text += piece;
  }
  text += detok.Finish();
  return text;
}

}  // namespace tandem::tokenizer
