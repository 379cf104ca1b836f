// ByteLevelBpe: GPT-2 style byte-level BPE over one pre-tokenized piece.
//
// Every byte is first spelled as a printable code point (GPT-2's bytes_to_unicode:
// printable Latin-1 bytes map to themselves, the others to U+0100 onwards) so the
// vocabulary never holds raw bytes; then the pair with the best (lowest) merge rank is
// merged repeatedly, leftmost first among equal ranks, until no listed merge applies.
// A byte whose spelling is not in the vocabulary is dropped before merging (its
// neighbours may then merge), as Hugging Face's BPE without an unknown token does:
// SmolLM2's vocabulary, for one, has no token for byte 0x14. With the vocabulary's
// ignore_merges, a piece whose spelling is a (non-special) token is that token.
//
// A code-point vocabulary (Vocab kCodePointBpe, Gemma 4) takes the same merges over
// code points instead of spelled bytes: a code point that is not a token stays out of
// the merges and is written as byte tokens "<0xXX>" (byte fallback).
//
// Immutable after Create() except for a bounded word cache guarded by a mutex, so
// Encode() may run on any number of threads.
#ifndef TANDEM_COMMON_TOKENIZER_BYTE_LEVEL_BPE_H_
#define TANDEM_COMMON_TOKENIZER_BYTE_LEVEL_BPE_H_

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/tokenizer/vocab.h"
#include "common/util/strings.h"

namespace tandem::tokenizer {

// The GPT-2 byte ↔ code point spelling.
class ByteAlphabet {
 public:
  ByteAlphabet();
  // UTF-8 spelling of byte b.
  std::string_view Spell(uint8_t b) const { return spelled_[b]; }
  // The byte a code point spells, or -1 if it spells none.
  int ByteOf(uint32_t codepoint) const {
    return codepoint < byte_of_.size() ? byte_of_[codepoint] : -1;
  }

 private:
  std::array<std::string, 256> spelled_;
  std::array<int16_t, 324> byte_of_;  // code points 0..323 cover the whole alphabet
};

const ByteAlphabet& GetByteAlphabet();

class ByteLevelBpe {
 public:
  static absl::StatusOr<std::unique_ptr<ByteLevelBpe>> Create(const Vocab& vocab);

  // Appends the ids of `piece` (raw UTF-8 bytes, not yet spelled) to `out`.
  void Encode(std::string_view piece, std::vector<int32_t>* out) const;

  // Raw bytes a token stands for (its spelling undone).
  std::string TokenBytes(const std::string& token_text) const;

 private:
  struct Merge {
    int32_t rank;
    int32_t merged_id;
  };
  static uint64_t PairKey(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  void EncodeUncached(std::string_view piece, std::vector<int32_t>* out) const;
  // The initial symbols of `piece`: token ids, or −1 − (offset of a code point that is
  // not a token), spelled out in bytes at the end.
  void Symbols(std::string_view piece, std::vector<int32_t>* id) const;

  bool code_points_ = false;  // kCodePointBpe
  const Vocab* vocab_ = nullptr;

  std::array<int32_t, 256> byte_token_{};  // id of each single spelled byte, -1 if absent
  absl::flat_hash_map<uint64_t, Merge> merges_;
  // Spelled token text → id, when the vocabulary ignores merges for whole tokens.
  absl::flat_hash_map<std::string, int32_t, StringViewHash, StringViewEq> whole_;

  static constexpr size_t kCacheCapacity = 1 << 16;
  static constexpr size_t kMaxCachedPiece = 64;  // bytes
  mutable absl::Mutex cache_mu_;
  mutable absl::flat_hash_map<std::string, std::vector<int32_t>, StringViewHash, StringViewEq>
      cache_ ABSL_GUARDED_BY(cache_mu_);
};

}  // namespace tandem::tokenizer

#endif  // TANDEM_COMMON_TOKENIZER_BYTE_LEVEL_BPE_H_
