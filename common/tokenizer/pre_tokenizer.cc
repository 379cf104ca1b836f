#include "common/tokenizer/pre_tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "absl/status/status.h"
#include "common/util/status_macros.h"
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

constexpr std::string_view kGpt2 = PreTokenizer::kByteLevel;
constexpr std::string_view kLlama3 =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}"
    "| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
constexpr std::string_view kQwen2 =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}"
    "| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
// Qwen3.5: marks (\p{M}) join the letters they follow and leave the punctuation class.
constexpr std::string_view kQwen35 =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}"
    "| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
// Tekken (Mistral Nemo and later) and GPT-4o: a word is an optional leading
// non-letter, then upper-case-ish letters and lower-case-ish ones, so "HelloWorld"
// splits at the case change.
constexpr std::string_view kTekken =
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+"
    "|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*"
    "|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
constexpr std::string_view kGpt4o =
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+"
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
    "|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*"
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
    "|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
constexpr std::string_view kDigit = PreTokenizer::kDigits;
constexpr std::string_view kDigitRuns = "\\p{N}+";
// CJK ideographs U+4E00..U+9FA5, everything from U+0800 up to them, and Hangul
// syllables with their neighbours up to U+D7FF (DeepSeek's tokenizer.json ranges).
constexpr std::string_view kDeepSeekCjk =
    "[\\x{4E00}-\\x{9FA5}\\x{0800}-\\x{4E00}\\x{AC00}-\\x{D7FF}]+";
// DeepSeek LLM's letters: ASCII and the cased letters of Latin, Greek, Cyrillic,
// Armenian, Georgian, Cherokee, Glagolitic, Coptic, Deseret, Osage, Old Hungarian,
// Warang Citi and Adlam, as its tokenizer.json lists them.
constexpr std::string_view kDeepSeekLetters =
    "\\s?[A-Za-z\\x{B5}\\x{C0}-\\x{D6}\\x{D8}-\\x{F6}\\x{F8}-\\x{1BA}\\x{1BC}-\\x{1BF}"
    "\\x{1C4}-\\x{293}\\x{295}-\\x{2AF}\\x{370}-\\x{373}\\x{376}\\x{377}\\x{37B}-\\x{37D}"
    "\\x{37F}\\x{386}\\x{388}-\\x{38A}\\x{38C}\\x{38E}-\\x{3A1}\\x{3A3}-\\x{3F5}"
    "\\x{3F7}-\\x{481}\\x{48A}-\\x{52F}\\x{531}-\\x{556}\\x{10A0}-\\x{10C5}"
    "\\x{13A0}-\\x{13F5}\\x{13F8}-\\x{13FD}\\x{1C90}-\\x{1CBA}\\x{1CBD}-\\x{1CBF}"
    "\\x{1D00}-\\x{1D2B}\\x{1D6B}-\\x{1D77}\\x{1D79}-\\x{1D9A}\\x{1E00}-\\x{1F15}"
    "\\x{1F18}-\\x{1F1D}\\x{1F20}-\\x{1F45}\\x{1F48}-\\x{1F4D}\\x{1F50}-\\x{1F57}"
    "\\x{1F59}\\x{1F5B}\\x{1F5D}\\x{1F5F}-\\x{1F7D}\\x{1F80}-\\x{1FB4}\\x{1FB6}-\\x{1FBC}"
    "\\x{1FBE}\\x{1FC2}-\\x{1FC4}\\x{1FC6}-\\x{1FCC}\\x{1FD0}-\\x{1FD3}\\x{1FD6}-\\x{1FDB}"
    "\\x{1FE0}-\\x{1FEC}\\x{1FF2}-\\x{1FF4}\\x{1FF6}-\\x{1FFC}\\x{2102}\\x{2107}"
    "\\x{210A}-\\x{2113}\\x{2115}\\x{2119}-\\x{211D}\\x{2124}\\x{2126}\\x{2128}"
    "\\x{212A}-\\x{212D}\\x{212F}-\\x{2134}\\x{2139}\\x{213C}-\\x{213F}\\x{2145}-\\x{2149}"
    "\\x{214E}\\x{2183}\\x{2184}\\x{2C00}-\\x{2C7B}\\x{2C7E}-\\x{2CE4}\\x{2CEB}-\\x{2CEE}"
    "\\x{2CF2}\\x{2CF3}\\x{A640}-\\x{A66D}\\x{A680}-\\x{A69B}\\x{A722}-\\x{A76F}"
    "\\x{A771}-\\x{A787}\\x{A78B}-\\x{A78E}\\x{AB70}-\\x{ABBF}\\x{FB00}-\\x{FB06}"
    "\\x{FB13}-\\x{FB17}\\x{FF21}-\\x{FF3A}\\x{FF41}-\\x{FF5A}\\x{10400}-\\x{1044F}"
    "\\x{104B0}-\\x{104D3}\\x{104D8}-\\x{104FB}\\x{10C80}-\\x{10CB2}\\x{10CC0}-\\x{10CF2}"
    "\\x{118A0}-\\x{118DF}\\x{1E900}-\\x{1E943}]+";
// DeepSeek LLM's punctuation: printable ASCII other than letters and digits, its
// full-width forms, curly quotes and the CJK symbols U+3000..U+3002.
constexpr std::string_view kDeepSeekPunct =
    "\\s?[!-/:-~\\x{FF01}-\\x{FF0F}\\x{FF1A}-\\x{FF5E}\\x{2018}-\\x{201F}\\x{3000}-\\x{3002}]+";
// Hugging Face's Punctuation pre-tokenizer (contiguous runs): Unicode P plus every
// ASCII punctuation character (some of which Unicode calls symbols).
constexpr std::string_view kPunctuationRuns = "[\\p{P}!-/:-@\\[-`{-~]+";

// A byte-mode step (no UTF-8 decoding): Hugging Face's Digits pre-tokenizer placed
// after ByteLevel sees the GPT-2 spelling of each byte, in which the numeric
// characters are the ASCII digits and the Latin-1 bytes ² ³ ¹ ¼ ½ ¾ (which may also be
// continuation bytes of other characters).
constexpr std::string_view kSpelledDigits = "[0-9\\xB2\\xB3\\xB9\\xBC-\\xBE]+";

struct Step {
  std::string_view pattern;
  bool bytes = false;  // match bytes, not UTF-8 code points
};

// The splitting steps of a `tokenizer.ggml.pre` family, as its tokenizer.json builds
// them; empty for an unknown name.
std::vector<Step> StepsFor(std::string_view name) {
  if (name.empty() || name == "default" || name == "gpt2" || name == "gpt-2" || name == "mpt" ||
      name == "phi-2" || name == "olmo" || name == "jais") {
    return {{kGpt2}};
  }
  if (name == "smollm" || name == "starcoder" || name == "refact" || name == "command-r" ||
      name == "codeshell" || name == "exaone" || name == "minerva" || name == "minerva-7b") {
    return {{kDigit}, {kGpt2}};  // every digit on its own, then GPT-2 splitting
  }
  if (name == "llama3" || name == "llama-v3" || name == "llama-bpe" || name == "falcon3" ||
      name == "smaug-bpe" || name == "dbrx" || name == "pixtral" || name == "chatglm-bpe" ||
      name == "glm4") {
    return {{kLlama3}};
  }
  if (name == "qwen2" || name == "deepseek-r1-qwen" || name == "megrez" || name == "stablelm2") {
    return {{kQwen2}};
  }
  if (name == "qwen35") return {{kQwen35}};
  if (name == "tekken") return {{kTekken}};
  if (name == "gpt-4o") return {{kGpt4o}};
  if (name == "deepseek-llm") {
    return {{"[\\r\\n]"}, {kDeepSeekLetters}, {kDeepSeekPunct},
            {"\\s+\\z"},  {kDeepSeekCjk},     {kDigitRuns}};
  }
  if (name == "deepseek-coder") {
    return {{"[\\r\\n]"}, {"\\s?\\p{L}+"}, {"\\s?\\p{P}+"}, {kDeepSeekCjk}, {kDigit}};
  }
  if (name == "falcon") {
    // Punctuation runs, GPT-2 splitting, then (after the byte spelling) digit runs and
    // groups of three ASCII digits.
    return {{kPunctuationRuns}, {kGpt2}, {kSpelledDigits, true}, {"[0-9][0-9][0-9]", true}};
  }
  return {};
}

}  // namespace

struct PreTokenizer::Pattern {
  pcre2_code* code = nullptr;
  bool bytes = false;
  ~Pattern() { pcre2_code_free(code); }
};

PreTokenizer::~PreTokenizer() = default;

absl::StatusOr<std::unique_ptr<PreTokenizer>> PreTokenizer::ForName(std::string_view name) {
  const std::vector<Step> steps = StepsFor(name);
  if (steps.empty()) {
    return absl::UnimplementedError(
        StrCat("tokenizer: pre-tokenizer '", name, "' is not supported"));
  }
  std::unique_ptr<PreTokenizer> pt(new PreTokenizer());
  for (const Step& step : steps) {
    RETURN_IF_ERROR(pt->Add(Expand(step.pattern), step.bytes));
  }
  return pt;
}

std::string_view PreTokenizer::FamilyOf(const std::vector<std::string>& steps) {
  // One canonical name per distinct family.
  for (std::string_view name :
       {"gpt2", "smollm", "llama-bpe", "qwen2", "qwen35", "tekken", "gpt-4o"}) {
    const std::vector<Step> mine = StepsFor(name);
    if (mine.size() != steps.size()) continue;
    bool same = true;
    for (size_t i = 0; i < steps.size(); ++i) same &= !mine[i].bytes && mine[i].pattern == steps[i];
    if (same) return name;
  }
  return {};
}

absl::StatusOr<std::unique_ptr<PreTokenizer>> PreTokenizer::FromPatterns(
    const std::vector<std::string>& patterns) {
  std::unique_ptr<PreTokenizer> pt(new PreTokenizer());
  for (const auto& p : patterns) RETURN_IF_ERROR(pt->Add(p, /*bytes=*/false));
  return pt;
}

absl::Status PreTokenizer::Add(std::string_view pattern, bool bytes) {
  // A piece after a byte step may not be UTF-8, which a code-point step must not see.
  if (!bytes && !patterns_.empty() && patterns_.back()->bytes) {
    return absl::InvalidArgumentError("tokenizer: a code-point step after a byte step");
  }
  int err = 0;
  PCRE2_SIZE err_off = 0;
  auto pat = std::make_unique<Pattern>();
  pat->bytes = bytes;
  pat->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                            bytes ? 0 : PCRE2_UTF | PCRE2_UCP, &err, &err_off, nullptr);
  if (pat->code == nullptr) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof(msg));
    return absl::InvalidArgumentError(
        StrCat("tokenizer: bad pattern at ", err_off, ": ", reinterpret_cast<const char*>(msg)));
  }
  // JIT is an optimization; the interpreter is the fallback where it is unavailable.
  pcre2_jit_compile(pat->code, PCRE2_JIT_COMPLETE);
  patterns_.push_back(std::move(pat));
  return absl::OkStatus();
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
          while (!pat->bytes && start < piece.size() &&
                 (static_cast<uint8_t>(piece[start]) & 0xC0) == 0x80)
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
