// CodePointSet: a set of Unicode scalar values as sorted, disjoint, non-adjacent
// ranges (surrogates never in it). A value type; thread-compatible.
#ifndef TANDEM_COMMON_GRAMMAR_CODE_POINT_SET_H_
#define TANDEM_COMMON_GRAMMAR_CODE_POINT_SET_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace tandem::grammar {

class CodePointSet {
 public:
  using Range = std::pair<uint32_t, uint32_t>;  // [first, second]
  static constexpr uint32_t kMax = 0x10FFFF;

  CodePointSet() = default;
  static CodePointSet All() { return CodePointSet({{0, kMax}}); }
  explicit CodePointSet(std::vector<Range> ranges) { Add(std::move(ranges)); }

  void Add(uint32_t lo, uint32_t hi) { Add(std::vector<Range>{{lo, hi}}); }
  void Add(const CodePointSet& other) { Add(other.ranges_); }
  bool Contains(uint32_t cp) const;
  bool Empty() const { return ranges_.empty(); }
  CodePointSet Complement() const;
  CodePointSet Minus(const CodePointSet& other) const;
  const std::vector<Range>& ranges() const { return ranges_; }
  // The set as a GBNF character class ("[\U00000061-\U0000007A]").
  std::string GbnfClass() const;

 private:
  void Add(std::vector<Range> more);
  std::vector<Range> ranges_;
};

}  // namespace tandem::grammar

#endif  // TANDEM_COMMON_GRAMMAR_CODE_POINT_SET_H_
