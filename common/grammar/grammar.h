// Grammar: a context-free grammar over bytes, the one form every constraint on the
// output (GBNF, regular expression, JSON Schema, choice list) is compiled to.
//
// The source language is llama.cpp's GBNF:
//   root  ::= "{" ws pair ("," ws pair)* "}"     # rules; `root` is where text starts
//   pair  ::= [a-z]+ ":" ws value
//   ws    ::= [ \t\n]*
// with literals "..." and character classes [...] / [^...] (escapes \n \r \t \\ \" \[
// \] \- \xHH \uHHHH \UHHHHHHHH), `.` (any character), groups ( ... ), alternatives |,
// and the postfix operators * + ? {m} {m,} {m,n} {,n}. A rule ends at a newline
// outside parentheses. Characters are Unicode code points; a class is compiled to the
// UTF-8 byte sequences of its code points, so what the grammar accepts is valid UTF-8
// and a token's bytes can be checked one at a time.
//
// Compile() refuses, naming the rule: undefined rules, left recursion that grows the
// stack, a root that accepts nothing, and grammars beyond kMaxElements. Alternatives
// that can never end (an empty class, a rule with no finite string) are dropped, so
// every state a matcher reaches can still be completed. Immutable after construction;
// safe to share between threads.
#ifndef TANDEM_COMMON_GRAMMAR_GRAMMAR_H_
#define TANDEM_COMMON_GRAMMAR_GRAMMAR_H_

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace tandem::grammar {

// A set of bytes, 256 bits.
struct ByteSet {
  std::array<uint64_t, 4> bits{};
  bool Has(uint8_t b) const { return (bits[b >> 6] >> (b & 63)) & 1; }
  void Add(uint8_t b) { bits[b >> 6] |= uint64_t{1} << (b & 63); }
  void AddRange(uint8_t lo, uint8_t hi) {
    for (int b = lo; b <= hi; ++b) Add(static_cast<uint8_t>(b));
  }
  bool Empty() const { return (bits[0] | bits[1] | bits[2] | bits[3]) == 0; }
  bool operator==(const ByteSet&) const = default;
};

class Grammar {
 public:
  // What one position of an alternative holds.
  enum class Kind : uint8_t {
    kBytes,  // one byte from byte_sets[index]
    kRule,   // a string of rule `index`
    kEnd,    // the end of the alternative
  };
  struct Element {
    Kind kind;
    int32_t index;
  };

  static constexpr size_t kMaxElements = 1 << 20;
  static constexpr size_t kMaxSourceBytes = 1 << 20;

  // The grammar of GBNF `text`, starting at rule `root`.
  static absl::StatusOr<Grammar> Compile(std::string_view text, std::string_view root = "root");

  // Alternatives of every rule, each a run of elements ending in kEnd: rule r's
  // alternatives start at elements()[alternatives(r)[i]].
  const std::vector<Element>& elements() const { return elements_; }
  const std::vector<int32_t>& alternatives(int32_t rule) const { return rules_[rule]; }
  const ByteSet& byte_set(int32_t index) const { return byte_sets_[index]; }
  int32_t root() const { return root_; }
  // Elements of kind kBytes (the most stacks a state holds without ambiguity).
  size_t byte_elements() const { return byte_elements_; }
  int32_t rule_count() const { return static_cast<int32_t>(rules_.size()); }
  const std::string& rule_name(int32_t rule) const { return names_[rule]; }

 private:
  friend class GbnfParser;
  std::vector<Element> elements_;
  std::vector<std::vector<int32_t>> rules_;  // [rule][alternative] → start element
  std::vector<std::string> names_;           // [rule]
  std::vector<ByteSet> byte_sets_;
  int32_t root_ = 0;
  size_t byte_elements_ = 0;
};

// GBNF spelling of `text` as a literal, quotes included ("a\"b\n").
std::string GbnfLiteral(std::string_view text);

}  // namespace tandem::grammar

#endif  // TANDEM_COMMON_GRAMMAR_GRAMMAR_H_
