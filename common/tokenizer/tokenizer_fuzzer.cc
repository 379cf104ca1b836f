// libFuzzer target: the tokenizers of the default model (byte-level BPE, SmolLM2), of
// tests/data/spm_tiny.gguf (SentencePiece BPE) and of the falcon and deepseek-llm test
// vocabularies (a byte-mode splitting step; six chained patterns) on arbitrary input.
//
// The first byte picks the mode. Text: Encode either refuses ill-formed UTF-8 or
// succeeds, and for byte-level BPE decode(encode(text)) == text exactly (special
// tokens parsed or not), but for the bytes the vocabulary has no token for, which are
// dropped as Hugging Face drops them. Ids: the rest read as little-endian int32s; Decode refuses an
// id outside the vocabulary or succeeds, and a Detokenizer fed the same ids one at a
// time emits exactly Decode's text. Any violation aborts (a finding).
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/model/gguf_file.h"
#include "common/tokenizer/detokenizer.h"
#include "common/tokenizer/tokenizer.h"
#include "common/util/utf8.h"

namespace {

using tandem::tokenizer::Tokenizer;

std::unique_ptr<Tokenizer> Load(const std::string& path) {
  auto file = tandem::model::GgufFile::Open(path);
  if (!file.ok()) {
    std::fprintf(stderr, "tokenizer_fuzzer: %s: %s (run scripts/fetch-model.sh)\n", path.c_str(),
                 std::string(file.status().message()).c_str());
    std::abort();
  }
  auto tok = Tokenizer::FromGguf(**file);
  if (!tok.ok()) std::abort();
  return std::move(*tok);
}

[[noreturn]] void Fail(const char* what, std::string_view input) {
  std::fprintf(stderr, "tokenizer_fuzzer: %s for %zu input bytes\n", what, input.size());
  std::abort();
}

// The bytes a byte-level vocabulary spells as a token of their own.
std::array<bool, 256> SpelledBytes(const Tokenizer& tok) {
  std::array<bool, 256> spelled{};
  for (int32_t id = 0; id < tok.vocab_size(); ++id) {
    const std::string& bytes = tok.TokenBytes(id);
    if (!tok.vocab().IsSpecial(id) && bytes.size() == 1)
      spelled[static_cast<uint8_t>(bytes[0])] = true;
  }
  return spelled;
}

// What decoding gives back for `text`: the bytes `spelled` lacks dropped, and what
// that leaves ill-formed as U+FFFD, one per maximal subpart (as Decode writes it).
std::string Expected(std::string_view text, const std::array<bool, 256>& spelled) {
  std::string kept;
  for (char c : text) {
    if (spelled[static_cast<uint8_t>(c)]) kept.push_back(c);
  }
  std::string out;
  std::string_view s = kept;
  while (!s.empty()) {
    if (const size_t n = tandem::utf8::SequenceLength(s); n > 0) {
      out.append(s.substr(0, n));
      s.remove_prefix(n);
    } else {
      out.append(tandem::utf8::kReplacement);
      s.remove_prefix(tandem::utf8::MaximalSubpart(s));
    }
  }
  return out;
}

// `spelled`: SpelledBytes(tok) to check the round trip; null not to.
void CheckText(const Tokenizer& tok, const std::array<bool, 256>* spelled, std::string_view text) {
  const bool valid = tandem::utf8::IsValid(text);
  for (bool parse_special : {false, true}) {
    tandem::tokenizer::EncodeOptions opts;
    opts.add_special = false;
    opts.parse_special = parse_special;
    auto ids = tok.Encode(text, opts);
    if (ids.ok() != valid) Fail("Encode's verdict differs from the UTF-8 check", text);
    if (!ids.ok()) {
      if (!absl::IsInvalidArgument(ids.status()))
        Fail("Encode failed other than InvalidArgument", text);
      return;
    }
    for (int32_t id : *ids) {
      if (id < 0 || id >= tok.vocab_size())
        Fail("Encode produced an id outside the vocabulary", text);
    }
    auto back = tok.Decode(*ids);
    if (!back.ok()) Fail("Decode refused Encode's ids", text);
    if (spelled != nullptr && *back != Expected(text, *spelled)) {
      Fail("decode(encode(text)) != text (less the bytes without a token)", text);
    }
  }
}

void CheckIds(const Tokenizer& tok, std::string_view bytes) {
  std::vector<int32_t> ids(bytes.size() / 4);
  if (!ids.empty()) std::memcpy(ids.data(), bytes.data(), ids.size() * 4);
  // Mostly in range, sometimes just outside it or far outside.
  for (int32_t& id : ids) {
    const uint32_t u = static_cast<uint32_t>(id);
    if ((u >> 28) != 0xF)
      id = static_cast<int32_t>(u % static_cast<uint32_t>(tok.vocab_size() + 2));
  }
  bool in_range = true;
  for (int32_t id : ids) in_range = in_range && id >= 0 && id < tok.vocab_size();
  auto text = tok.Decode(ids);
  if (text.ok() != in_range) Fail("Decode's verdict differs from the range check", bytes);
  if (!text.ok()) return;
  if (!tandem::utf8::IsValid(*text)) Fail("Decode produced ill-formed UTF-8", bytes);
  tandem::tokenizer::Detokenizer detok(tok);
  std::string streamed;
  for (int32_t id : ids) {
    auto piece = detok.Push(id);
    if (!piece.ok()) Fail("Detokenizer refused an id Decode took", bytes);
    streamed += *piece;
  }
  streamed += detok.Finish();
  if (streamed != *text) Fail("the Detokenizer's stream differs from Decode", bytes);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::unique_ptr<Tokenizer> bpe =
      Load(std::string(TANDEM_SOURCE_DIR) + "/models/smollm2-135m-instruct-q4_1.gguf");
  static const std::unique_ptr<Tokenizer> spm =
      Load(std::string(TANDEM_SOURCE_DIR) + "/tests/data/spm_tiny.gguf");
  static const std::unique_ptr<Tokenizer> falcon =
      Load(std::string(TANDEM_SOURCE_DIR) + "/tests/data/bpe_falcon.gguf");
  static const std::unique_ptr<Tokenizer> deepseek =
      Load(std::string(TANDEM_SOURCE_DIR) + "/tests/data/bpe_deepseek_llm.gguf");
  static const std::array<bool, 256> bpe_spelled = SpelledBytes(*bpe);
  static const std::array<bool, 256> falcon_spelled = SpelledBytes(*falcon);
  static const std::array<bool, 256> deepseek_spelled = SpelledBytes(*deepseek);
  if (size == 0) return 0;
  const std::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 6) {
    case 0:
      CheckText(*bpe, &bpe_spelled, rest);
      break;
    case 1:
      // SentencePiece normalizes (a literal "▁" decodes as a space): no exact round trip.
      CheckText(*spm, nullptr, rest);
      break;
    case 2:
      CheckIds(*bpe, rest);
      break;
    case 3:
      CheckIds(*spm, rest);
      break;
    case 4:
      CheckText(*falcon, &falcon_spelled, rest);
      break;
    default:
      CheckText(*deepseek, &deepseek_spelled, rest);
      break;
  }
  return 0;
}
