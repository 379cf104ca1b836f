// Python `str` semantics on UTF-8 bytes, for the Jinja interpreter.
//
// Lengths, indices and slices count code points as Python does; "whitespace" is the
// set Python's str.isspace() accepts (so `trim` strips U+00A0 and U+3000 like jinja2).
// Case mapping is ASCII only: non-ASCII letters are left as they are (Python would
// map them). Invalid UTF-8 is taken byte by byte and never read out of bounds.
// Pure functions; thread-safe.
#ifndef TANDEM_COMMON_TOKENIZER_JINJA_PY_STRING_H_
#define TANDEM_COMMON_TOKENIZER_JINJA_PY_STRING_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tandem::tokenizer::jinja::py {

// The code point starting at byte `i` (< s.size()); `*len` gets its byte length.
uint32_t DecodeAt(std::string_view s, size_t i, size_t* len);
bool IsSpace(uint32_t cp);

// Byte offsets of every code point, plus s.size() at the end: [length + 1].
std::vector<size_t> CodePointOffsets(std::string_view s);
size_t Length(std::string_view s);

// str.strip() / lstrip() / rstrip(): whitespace, or any code point of `chars`.
std::string_view Strip(std::string_view s, bool left, bool right);
std::string_view StripChars(std::string_view s, std::string_view chars, bool left, bool right);

// str.split(sep, maxsplit): whitespace runs when `sep` is empty; maxsplit < 0: no limit.
std::vector<std::string> Split(std::string_view s, std::string_view sep, int64_t maxsplit);

std::string Upper(std::string_view s);
std::string Lower(std::string_view s);
std::string Title(std::string_view s);
std::string Capitalize(std::string_view s);

// repr(s): quoted the way Python chooses, with its escapes.
std::string Repr(std::string_view s);
// json.dumps(s, ensure_ascii=False).
void AppendJsonString(std::string_view s, std::string* out, bool ascii = false);

}  // namespace tandem::tokenizer::jinja::py

#endif  // TANDEM_COMMON_TOKENIZER_JINJA_PY_STRING_H_
