// RegexToGbnf: a regular expression as a GBNF expression matching the same strings.
//
// The dialect is the common core of Python's `re` (vLLM's guided_regex) and ECMA-262
// (JSON Schema's "pattern"): literals; escapes \n \r \t \f \v \0 \xHH \uHHHH and
// escaped punctuation; classes [...] / [^...] with ranges; \d \w \s and \D \W \S
// (ASCII: [0-9], [0-9A-Za-z_], [ \t\n\r\f\v]); `.` (any character but "\n");
// groups (...) (?:...) (?P<name>...) (?<name>...); | ; the quantifiers * + ? {m}
// {m,} {m,n} (lazy or possessive forms match the same strings); ^ at the start and $ at
// the end. Anything else (back-references, look-around, \b, inline flags, anchors
// inside) is refused with an InvalidArgument naming it. Matching is on code points.
//
// Pure functions; thread-safe.
#ifndef TANDEM_COMMON_GRAMMAR_REGEX_GRAMMAR_H_
#define TANDEM_COMMON_GRAMMAR_REGEX_GRAMMAR_H_

#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace tandem::grammar {

struct RegexOptions {
  // Spell each character as it appears inside a JSON string ('"' as \", control
  // characters escaped), for a "pattern" constraining a string's value.
  bool json_string = false;
  // Search semantics (JSON Schema's): any text may come before the match unless the
  // pattern starts with ^, and after it unless it ends with $. Otherwise the whole
  // text must match (vLLM's guided_regex), with or without ^ and $.
  bool search = false;
  // Repetition bounds above this are refused.
  int max_repetition = 1000;
};

// A GBNF expression (no rule name, no newline) accepting exactly what `pattern` does.
absl::StatusOr<std::string> RegexToGbnf(std::string_view pattern, const RegexOptions& options = {});

// The GBNF expression of one character inside a JSON string: unescaped ones and every
// escape JSON allows.
std::string JsonStringCharGbnf();

}  // namespace tandem::grammar

#endif  // TANDEM_COMMON_GRAMMAR_REGEX_GRAMMAR_H_
