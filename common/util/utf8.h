// UTF-8 helpers shared by the tokenizer, the detokenizer and input validation.
//
// Pure functions over byte strings; thread-safe.
#ifndef TANDEM_COMMON_UTIL_UTF8_H_
#define TANDEM_COMMON_UTIL_UTF8_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace tandem::utf8 {

inline constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

// Length of the well-formed sequence starting at s[0] (1..4), or 0 if s does not
// start with one (bad lead byte, bad continuation, overlong, surrogate, > U+10FFFF,
// or truncated).
size_t SequenceLength(std::string_view s);

// Length of the longest prefix of `s` that is, or could begin, a well-formed sequence
// (Unicode's "maximal subpart"): at least 1 for a non-empty `s`, 0 for an empty one.
// An ill-formed stretch is replaced by one U+FFFD per maximal subpart.
size_t MaximalSubpart(std::string_view s);

// Number of bytes a sequence starting with `lead` declares (1..4), or 0 for a byte
// that can never start one (continuation bytes, 0xC0, 0xC1, 0xF5..0xFF).
size_t DeclaredLength(uint8_t lead);

// True if `s` is entirely well-formed UTF-8.
bool IsValid(std::string_view s);

// Byte offset of the first ill-formed sequence, or s.size() if none.
size_t FirstInvalid(std::string_view s);

// Appends the UTF-8 encoding of `cp` (must be a scalar value).
void AppendCodepoint(uint32_t cp, std::string* out);

// Decodes the well-formed sequence at s[0]; `len` receives its length (0 if ill-formed).
uint32_t DecodeCodepoint(std::string_view s, size_t* len);

}  // namespace tandem::utf8

#endif  // TANDEM_COMMON_UTIL_UTF8_H_
