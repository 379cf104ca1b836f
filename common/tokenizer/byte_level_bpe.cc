#include "common/tokenizer/byte_level_bpe.h"

#include <algorithm>
#include <climits>
#include <queue>

#include "absl/status/status.h"
#include "common/util/strings.h"
#include "common/util/utf8.h"

namespace tandem::tokenizer {

ByteAlphabet::ByteAlphabet() {
  byte_of_.fill(-1);
  // Printable bytes keep their own code point; the rest take 256, 257, ... in order.
  uint32_t next = 256;
  for (int b = 0; b < 256; ++b) {
    bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
    uint32_t cp = printable ? static_cast<uint32_t>(b) : next++;
    utf8::AppendCodepoint(cp, &spelled_[b]);
    byte_of_[cp] = static_cast<int16_t>(b);
  }
}

const ByteAlphabet& GetByteAlphabet() {
  static const ByteAlphabet* alphabet = new ByteAlphabet();
  return *alphabet;
}

absl::StatusOr<std::unique_ptr<ByteLevelBpe>> ByteLevelBpe::Create(const Vocab& vocab) {
  std::unique_ptr<ByteLevelBpe> bpe(new ByteLevelBpe());
  bpe->vocab_ = &vocab;
  bpe->code_points_ = vocab.model == TokenizerModel::kCodePointBpe;
  const ByteAlphabet& alphabet = GetByteAlphabet();
  for (int b = 0; b < 256; ++b) {
    static constexpr char kHex[] = "0123456789ABCDEF";
    const std::string fallback = {'<', '0', 'x', kHex[b >> 4], kHex[b & 15], '>'};
    auto it = vocab.token_to_id.find(bpe->code_points_ ? std::string_view(fallback)
                                                       : alphabet.Spell(static_cast<uint8_t>(b)));
    bpe->byte_token_[b] = it == vocab.token_to_id.end() ? -1 : it->second;  // -1: dropped
  }
  if (vocab.ignore_merges) {
    for (int32_t i = 0; i < vocab.size(); ++i) {
      if (!vocab.IsSpecial(i)) bpe->whole_.try_emplace(vocab.tokens[i], i);
    }
  }
  bpe->merges_.reserve(vocab.merges.size());
  for (size_t rank = 0; rank < vocab.merges.size(); ++rank) {
    std::string_view m = vocab.merges[rank];
    size_t sp = m.find(' ', 1);
    if (sp == std::string_view::npos) continue;
    std::string_view left = m.substr(0, sp), right = m.substr(sp + 1);
    auto l = vocab.token_to_id.find(left);
    auto r = vocab.token_to_id.find(right);
    auto merged = vocab.token_to_id.find(StrCat(left, right));
    // A merge whose parts or result are not tokens can never apply; skip it.
    if (l == vocab.token_to_id.end() || r == vocab.token_to_id.end() ||
        merged == vocab.token_to_id.end()) {
      continue;
    }
    bpe->merges_.try_emplace(PairKey(l->second, r->second),
                             Merge{static_cast<int32_t>(rank), merged->second});
  }
  return bpe;
}

void ByteLevelBpe::Encode(std::string_view piece, std::vector<int32_t>* out) const {
  if (piece.size() <= kMaxCachedPiece) {
    absl::MutexLock lock(&cache_mu_);
    auto it = cache_.find(piece);
    if (it != cache_.end()) {
      out->insert(out->end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const size_t start = out->size();
  EncodeUncached(piece, out);
  if (piece.size() <= kMaxCachedPiece) {
    absl::MutexLock lock(&cache_mu_);
    if (cache_.size() >= kCacheCapacity) cache_.clear();
    cache_.try_emplace(std::string(piece), out->begin() + static_cast<std::ptrdiff_t>(start),
                       out->end());
  }
}

void ByteLevelBpe::EncodeUncached(std::string_view piece, std::vector<int32_t>* out) const {
  if (!whole_.empty()) {
    const ByteAlphabet& alphabet = GetByteAlphabet();
    std::string spelled;
    for (char c : piece) spelled += alphabet.Spell(static_cast<uint8_t>(c));
    if (auto it = whole_.find(spelled); it != whole_.end()) {
      out->push_back(it->second);
      return;
    }
  }
  // Symbols form a doubly linked list over the bytes (or code points) that have a token;
  // a merged-away symbol is dead (next skips it).
  std::vector<int32_t> id;
  Symbols(piece, &id);
  const int n = static_cast<int>(id.size());
  std::vector<int32_t> prev(n), next(n);
  for (int i = 0; i < n; ++i) {
    prev[i] = i - 1;
    next[i] = i + 1 < n ? i + 1 : -1;
  }
  struct Candidate {
    int32_t rank, left, right, left_id, right_id;
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : left > o.left;
    }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  auto consider = [&](int left, int right) {
    if (left < 0 || right < 0 || id[left] < 0 || id[right] < 0) return;  // fallbacks never merge
    auto it = merges_.find(PairKey(id[left], id[right]));
    if (it != merges_.end()) heap.push({it->second.rank, left, right, id[left], id[right]});
  };
  for (int i = 0; i + 1 < n; ++i) consider(i, i + 1);
  while (!heap.empty()) {
    Candidate c = heap.top();
    heap.pop();
    // Stale: one side was merged since this candidate was queued.
    if (id[c.left] != c.left_id || id[c.right] != c.right_id || next[c.left] != c.right) continue;
    id[c.left] = merges_.find(PairKey(c.left_id, c.right_id))->second.merged_id;
    id[c.right] = INT32_MIN;  // dead
    next[c.left] = next[c.right];
    if (next[c.right] >= 0) prev[next[c.right]] = c.left;
    consider(prev[c.left], c.left);
    consider(c.left, next[c.left]);
  }
  for (int i = 0; i >= 0 && i < n; i = next[i]) {
    if (id[i] >= 0) {
      out->push_back(id[i]);
    } else if (id[i] != INT32_MIN) {  // a code point outside the vocabulary: its bytes
      const size_t at = static_cast<size_t>(-1 - id[i]);
      size_t len = 0;
      utf8::DecodeCodepoint(piece.substr(at), &len);
      for (size_t b = at; b < at + std::max<size_t>(len, 1); ++b) {
        if (const int32_t t = byte_token_[static_cast<uint8_t>(piece[b])]; t >= 0) {
          out->push_back(t);
        }
      }
    }
  }
}

void ByteLevelBpe::Symbols(std::string_view piece, std::vector<int32_t>* id) const {
  id->reserve(piece.size());
  if (!code_points_) {
    for (char c : piece) {
      if (const int32_t t = byte_token_[static_cast<uint8_t>(c)]; t >= 0) id->push_back(t);
    }
    return;
  }
  for (size_t i = 0; i < piece.size();) {
    size_t len = 0;
    utf8::DecodeCodepoint(piece.substr(i), &len);
    len = std::max<size_t>(len, 1);
    auto it = vocab_->token_to_id.find(piece.substr(i, len));
    id->push_back(it != vocab_->token_to_id.end() && !vocab_->IsSpecial(it->second)
                      ? it->second
                      : -1 - static_cast<int32_t>(i));
    i += len;
  }
}

std::string ByteLevelBpe::TokenBytes(const std::string& token_text) const {
  const ByteAlphabet& alphabet = GetByteAlphabet();
  std::string bytes;
  std::string_view s = token_text;
  size_t i = 0;
  while (i < s.size()) {
    size_t len = 0;
    uint32_t cp = utf8::DecodeCodepoint(s.substr(i), &len);
    int b = len > 0 ? alphabet.ByteOf(cp) : -1;
    if (b >= 0) {
      bytes.push_back(static_cast<char>(b));
    } else {
      // Not in the byte alphabet: keep the text as written.
      size_t take = len > 0 ? len : 1;
      bytes.append(s.substr(i, take));
      len = take;
    }
    i += len;
  }
  return bytes;
}

}  // namespace tandem::tokenizer
