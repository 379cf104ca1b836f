#include "common/tokenizer/pre_tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "absl/status/status.h"
#include "common/util/strings.h"

namespace tandem::tokenizer {

namespace {

// Unicode White_Space, which is what `\s` means to the reference tokenizers.
// PCRE2's own `\s` differs (it includes U+180E), so patterns spell it out.
constexpr std::string_view kWhiteSpace =
    "\\t\\n\\x{0B}\\f\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}"
    "\\x{202F}\\x{205F}\\x{3000}";

// Writes patterns with `\s` / `\S` in terms of kWhiteSpace: `[^\s...]` → `[^WS...]`,
// bare `\s` → `[WS]`, `\S` → `[^WS]`.
std::string Expand(std::string_view pattern) {
  const std::string ws(kWhiteSpace);
  // Negated classes first, so their `\s` is not bracketed twice.
  std::string out = ReplaceAll(pattern, "[^\\s", "[^" + ws);
  out = ReplaceAll(out, "\\s", "[" + ws + "]");
  return ReplaceAll(out, "\\S", "[^" + ws + "]");
}

constexpr std::string_view kGpt2 =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
constexpr std::string_view kLlama3 =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}"
    "| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
constexpr std::string_view kQwen2 =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}"
    "| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
constexpr std::string_view kDigit = "\\p{N}";

}  // namespace

struct PreTokenizer::Pattern {
  pcre2_code* code = nullptr;
  ~Pattern() { pcre2_code_free(code); }
};

PreTokenizer::~PreTokenizer() = default;

absl::StatusOr<std::unique_ptr<PreTokenizer>> PreTokenizer::ForName(std::string_view name) {
  std::vector<std::string_view> raw;
  if (name.empty() || name == "default" || name == "gpt2" || name == "gpt-2") {
    raw = {kGpt2};
  } else if (name == "smollm" || name == "starcoder" || name == "refact" || name == "command-r" ||
             name == "codeshell" || name == "exaone" || name == "minerva") {
    // Every digit on its own, then GPT-2 splitting.
    raw = {kDigit, kGpt2};
  } else if (name == "llama3" || name == "llama-v3" || name == "llama-bpe" || name == "falcon3" ||
             name == "smaug-bpe" || name == "dbrx" || name == "pixtral") {
    raw = {kLlama3};
  } else if (name == "qwen2" || name == "deepseek-r1-qwen" || name == "megrez") {
    raw = {kQwen2};
  } else {
    return absl::UnimplementedError(
        StrCat("tokenizer: pre-tokenizer '", name, "' is not supported"));
  }
  std::vector<std::string> patterns;
  for (auto p : raw) patterns.push_back(Expand(p));
  return FromPatterns(patterns);
}

absl::StatusOr<std::unique_ptr<PreTokenizer>> PreTokenizer::FromPatterns(
    const std::vector<std::string>& patterns) {
  std::unique_ptr<PreTokenizer> pt(new PreTokenizer());
  for (const auto& p : patterns) {
    int err = 0;
    PCRE2_SIZE err_off = 0;
    auto pat = std::make_unique<Pattern>();
    pat->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(p.data()), p.size(),
                              PCRE2_UTF | PCRE2_UCP, &err, &err_off, nullptr);
    if (pat->code == nullptr) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(err, msg, sizeof(msg));
      return absl::InvalidArgumentError(
          StrCat("tokenizer: bad pattern at ", err_off, ": ", reinterpret_cast<const char*>(msg)));
    }
    // JIT is an optimization; the interpreter is the fallback where it is unavailable.
    pcre2_jit_compile(pat->code, PCRE2_JIT_COMPLETE);
    pt->patterns_.push_back(std::move(pat));
  }
  return pt;
}

void PreTokenizer::Split(std::string_view text, std::vector<std::string_view>* out) const {
  std::vector<std::string_view> pieces{text}, next;
  for (const auto& pat : patterns_) {
    pcre2_match_data* md = pcre2_match_data_create_from_pattern(pat->code, nullptr);
    next.clear();
    for (std::string_view piece : pieces) {
      const auto* subject = reinterpret_cast<PCRE2_SPTR>(piece.data());
      size_t last = 0, start = 0;
      while (start < piece.size()) {
        // The text was validated once up front: skip PCRE2's per-call UTF-8 check,
        // which would otherwise rescan the whole subject on every match.
        int rc =
            pcre2_match(pat->code, subject, piece.size(), start, PCRE2_NO_UTF_CHECK, md, nullptr);
        if (rc < 0) break;
        const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
        size_t s = ov[0], e = ov[1];
        if (s > last) next.push_back(piece.substr(last, s - last));
        if (e > s) {
          next.push_back(piece.substr(s, e - s));
          last = e;
          start = e;
        } else {
          // Empty match: step over one character.
          start = e + 1;
          while (start < piece.size() && (static_cast<uint8_t>(piece[start]) & 0xC0) == 0x80)
            ++start;
        }
      }
      if (last < piece.size()) next.push_back(piece.substr(last));
    }
    pcre2_match_data_free(md);
    pieces.swap(next);
  }
  out->insert(out->end(), pieces.begin(), pieces.end());
}

}  // namespace tandem::tokenizer
