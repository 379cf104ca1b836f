#include "common/tokenizer/sentencepiece_bpe.h"

#include <queue>

#include "common/util/strings.h"
#include "common/util/utf8.h"

namespace tandem::tokenizer {

absl::StatusOr<std::unique_ptr<SentencePieceBpe>> SentencePieceBpe::Create(const Vocab& vocab) {
  std::unique_ptr<SentencePieceBpe> spm(new SentencePieceBpe(vocab));
  spm->byte_token_.fill(-1);
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  for (int32_t id = 0; id < vocab.size(); ++id) {
    // Byte tokens are spelled exactly "<0xHH>".
    const std::string& t = vocab.tokens[id];
    if (vocab.types[id] != TokenType::kByte || t.size() != 6 || t.compare(0, 3, "<0x") != 0 ||
        t[5] != '>') {
      continue;
    }
    const int hi = hex(t[3]), lo = hex(t[4]);
    if (hi >= 0 && lo >= 0) spm->byte_token_[hi * 16 + lo] = id;
  }
  return spm;
}

int32_t SentencePieceBpe::MergeableId(std::string_view text) const {
  auto it = vocab_.token_to_id.find(text);
  if (it == vocab_.token_to_id.end()) return -1;
  TokenType t = vocab_.types[it->second];
  return t == TokenType::kNormal || t == TokenType::kUserDefined ? it->second : -1;
}

void SentencePieceBpe::Encode(std::string_view raw, bool at_start,
                              std::vector<int32_t>* out) const {
  bool prefix = vocab_.add_space_prefix;
  if (prefix && vocab_.space_prefix != SpacePrefix::kEverySegment) {
    prefix = !raw.starts_with(' ') && !raw.starts_with(kSpaceMarker) &&
             (at_start || vocab_.space_prefix == SpacePrefix::kMetaspaceAlways);
  }
  std::string text;
  if (prefix) text.append(kSpaceMarker);
  text.append(ReplaceAll(raw, " ", kSpaceMarker));
  if (text.empty()) return;
  if (vocab_.ignore_merges) {  // the whole stretch is a token: that token, merges or not
    if (int32_t id = MergeableId(text); id >= 0) {
      out->push_back(id);
      return;
    }
  }

  // Symbols are byte ranges [start, start + len) linked in a list.
  struct Symbol {
    int start, len, prev, next;
  };
  std::vector<Symbol> sym;
  for (size_t i = 0; i < text.size();) {
    size_t len = utf8::SequenceLength(std::string_view(text).substr(i));
    if (len == 0) len = 1;  // unreachable for validated input
    int idx = static_cast<int>(sym.size());
    sym.push_back({static_cast<int>(i), static_cast<int>(len), idx - 1, idx + 1});
    i += len;
  }
  sym.back().next = -1;

  struct Candidate {
    float score;
    int left, right, size;  // size guards against stale entries
    bool operator<(const Candidate& o) const {
      return score != o.score ? score < o.score : left > o.left;
    }
  };
  std::priority_queue<Candidate> heap;
  std::string_view view = text;
  auto consider = [&](int left, int right) {
    if (left < 0 || right < 0) return;
    int size = sym[left].len + sym[right].len;
    int32_t id = MergeableId(view.substr(sym[left].start, size));
    if (id >= 0) heap.push({vocab_.scores[id], left, right, size});
  };
  for (int i = 0; i + 1 < static_cast<int>(sym.size()); ++i) consider(i, i + 1);
  while (!heap.empty()) {
    Candidate c = heap.top();
    heap.pop();
    Symbol& l = sym[c.left];
    Symbol& r = sym[c.right];
    if (l.len == 0 || r.len == 0 || l.next != c.right || l.len + r.len != c.size) continue;
    l.len += r.len;
    r.len = 0;
    l.next = r.next;
    if (r.next >= 0) sym[r.next].prev = c.left;
    consider(l.prev, c.left);
    consider(c.left, l.next);
  }

  for (int i = 0; i >= 0; i = sym[i].next) {
    std::string_view piece = view.substr(sym[i].start, sym[i].len);
    auto it = vocab_.token_to_id.find(piece);
    if (it != vocab_.token_to_id.end()) {
      out->push_back(it->second);
      continue;
    }
    for (char ch : piece) {
      int32_t b = byte_token_[static_cast<uint8_t>(ch)];
      if (b >= 0) {
        out->push_back(b);
      } else if (vocab_.unk_id >= 0) {
        // Without byte tokens an unknown symbol becomes one unknown token.
        out->push_back(vocab_.unk_id);
        break;
      }
    }
  }
}

std::string SentencePieceBpe::TokenBytes(int32_t id) const {
  if (vocab_.types[id] == TokenType::kByte) {
    for (int b = 0; b < 256; ++b) {
      if (byte_token_[b] == id) return std::string(1, static_cast<char>(b));
    }
  }
  return ReplaceAll(vocab_.tokens[id], kSpaceMarker, " ");
}

}  // namespace tandem::tokenizer
