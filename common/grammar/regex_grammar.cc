#include "common/grammar/regex_grammar.h"

#include <cstdio>

#include "common/grammar/code_point_set.h"
#include "common/grammar/grammar.h"
#include "common/util/status_macros.h"
#include "common/util/strings.h"
#include "common/util/utf8.h"

namespace tandem::grammar {
namespace {

CodePointSet Digits() { return CodePointSet({{'0', '9'}}); }
CodePointSet Word() { return CodePointSet({{'0', '9'}, {'A', 'Z'}, {'a', 'z'}, {'_', '_'}}); }
CodePointSet Space() { return CodePointSet({{'\t', '\r'}, {' ', ' '}}); }  // \t \n \v \f \r

// What JSON must escape inside a string.
CodePointSet JsonEscaped() { return CodePointSet({{0, 0x1F}, {'"', '"'}, {'\\', '\\'}}); }

// How JSON writes code point `cp` inside a string.
std::string JsonSpelling(uint32_t cp) {
  switch (cp) {
    case '"':
      return "\\\"";
    case '\\':
      return "\\\\";
    case '\n':
      return "\\n";
    case '\r':
      return "\\r";
    case '\t':
      return "\\t";
    case '\b':
      return "\\b";
    case '\f':
      return "\\f";
    default:
      break;
  }
  if (cp < 0x20) {
    char buf[8];
    std::snprintf(buf, sizeof(buf), "\\u%04x", cp);
    return buf;
  }
  std::string s;
  utf8::AppendCodepoint(cp, &s);
  return s;
}

class RegexParser {
 public:
  RegexParser(std::string_view pattern, const RegexOptions& options)
      : p_(pattern), options_(options) {}

  absl::StatusOr<std::string> Run() {
    if (size_t bad = utf8::FirstInvalid(p_); bad != p_.size()) {
      return Error(StrCat("is not valid UTF-8 (byte ", bad, ")"));
    }
    bool start_anchor = false, end_anchor = false;
    if (!p_.empty() && p_[0] == '^') {
      start_anchor = true;
      pos_ = 1;
    }
    std::string_view body = p_;
    if (body.size() > pos_ && body.back() == '$' && !Escaped(body.size() - 1)) {
      end_anchor = true;
      end_ = body.size() - 1;
    } else {
      end_ = body.size();
    }
    ASSIGN_OR_RETURN(std::string alt, Alternation());
    if (pos_ != end_) return Error(StrCat("has an unmatched ')' at ", pos_));
    if (!options_.search) return alt;
    const std::string any = StrCat(
        "(", options_.json_string ? JsonStringCharGbnf() : CodePointSet::All().GbnfClass(), ")*");
    std::string out;
    if (!start_anchor) out += any + " ";
    out += "(" + alt + ")";
    if (!end_anchor) out += " " + any;
    return out;
  }

 private:
  absl::Status Error(std::string_view what) const {
    return absl::InvalidArgumentError(StrCat("regex: the pattern ", what));
  }

  // Whether p_[i] is escaped by an odd run of backslashes before it.
  bool Escaped(size_t i) const {
    size_t n = 0;
    while (i > n && p_[i - n - 1] == '\\') ++n;
    return n % 2 == 1;
  }

  // One character, or a set of them, as GBNF.
  std::string Char(const std::vector<CodePointSet::Range>& ranges) const {
    CodePointSet set(ranges);
    if (!options_.json_string) return set.GbnfClass();
    const CodePointSet escaped = JsonEscaped();
    const CodePointSet plain = set.Minus(escaped);
    std::vector<std::string> alts;
    if (!plain.Empty()) alts.push_back(plain.GbnfClass());
    for (auto [lo, hi] : set.ranges()) {
      for (uint32_t cp = lo; cp <= hi && cp <= 0x5C; ++cp) {
        if (escaped.Contains(cp)) alts.push_back(GbnfLiteral(JsonSpelling(cp)));
      }
    }
    if (alts.size() == 1) return alts[0];
    std::string out = "(";
    for (size_t i = 0; i < alts.size(); ++i) out += (i ? " | " : "") + alts[i];
    return out + ")";
  }
  std::string Literal(uint32_t cp) const {
    if (options_.json_string) return GbnfLiteral(JsonSpelling(cp));
    std::string s;
    utf8::AppendCodepoint(cp, &s);
    return GbnfLiteral(s);
  }

  bool AtEnd() const { return pos_ >= end_; }
  char Peek() const { return p_[pos_]; }

  absl::StatusOr<std::string> Alternation() {
    std::vector<std::string> alts;
    ASSIGN_OR_RETURN(std::string first, Sequence());
    alts.push_back(std::move(first));
    while (!AtEnd() && Peek() == '|') {
      ++pos_;
      ASSIGN_OR_RETURN(std::string next, Sequence());
      alts.push_back(std::move(next));
    }
    if (alts.size() == 1) return alts[0];
    std::string out = "(";
    for (size_t i = 0; i < alts.size(); ++i) out += (i ? " | " : "") + alts[i];
    return out + ")";
  }

  absl::StatusOr<std::string> Sequence() {
    std::string out;
    while (!AtEnd() && Peek() != '|' && Peek() != ')') {
      ASSIGN_OR_RETURN(std::string atom, Atom());
      ASSIGN_OR_RETURN(atom, Quantified(std::move(atom)));
      if (!out.empty()) out += " ";
      out += atom;
    }
    return out.empty() ? std::string("\"\"") : out;
  }

  absl::StatusOr<int> Number() {
    const size_t start = pos_;
    int64_t v = 0;
    while (!AtEnd() && std::isdigit(static_cast<unsigned char>(Peek()))) {
      v = v * 10 + (p_[pos_++] - '0');
      if (v > options_.max_repetition) {
        return Error(StrCat("repeats more than ", options_.max_repetition, " times"));
      }
    }
    return pos_ == start ? -1 : static_cast<int>(v);
  }

  absl::StatusOr<std::string> Quantified(std::string atom) {
    if (AtEnd()) return atom;
    const char c = Peek();
    std::string q;
    if (c == '*' || c == '+' || c == '?') {
      ++pos_;
      q = std::string(1, c);
    } else if (c == '{') {
      const size_t save = pos_++;
      ASSIGN_OR_RETURN(int min, Number());
      if (min < 0 && !AtEnd() && Peek() == ',') min = 0;  // Python's {,n} is {0,n}
      int max = min;
      if (!AtEnd() && Peek() == ',') {
        ++pos_;
        ASSIGN_OR_RETURN(max, Number());
      }
      if (min < 0 || AtEnd() || Peek() != '}') {
        // Python reads a '{' that does not start a bound as a literal.
        pos_ = save;
        return atom;
      }
      ++pos_;
      if (max >= 0 && max < min)
        return Error("has a repetition whose maximum is below its minimum");
      q = max < 0 ? StrCat("{", min, ",}") : StrCat("{", min, ",", max, "}");
    } else {
      return atom;
    }
    if (!AtEnd() && (Peek() == '?' || Peek() == '+')) ++pos_;  // lazy / possessive
    if (!AtEnd() && (Peek() == '*' || Peek() == '+' || Peek() == '?' || Peek() == '{')) {
      return Error(StrCat("has a quantifier on a quantifier at ", pos_));
    }
    return "(" + atom + ")" + q;
  }

  // An escape's code point, or the set it names (\d ...), after the backslash.
  absl::StatusOr<CodePointSet> Escape(bool in_class) {
    if (AtEnd()) return Error("ends with a lone '\\'");
    const char c = p_[pos_++];
    switch (c) {
      case 'd':
        return Digits();
      case 'D':
        return Digits().Complement();
      case 'w':
        return Word();
      case 'W':
        return Word().Complement();
      case 's':
        return Space();
      case 'S':
        return Space().Complement();
      case 'n':
        return CodePointSet({{'\n', '\n'}});
      case 'r':
        return CodePointSet({{'\r', '\r'}});
      case 't':
        return CodePointSet({{'\t', '\t'}});
      case 'f':
        return CodePointSet({{'\f', '\f'}});
      case 'v':
        return CodePointSet({{'\v', '\v'}});
      case '0':
        return CodePointSet({{0, 0}});
      case 'x':
      case 'u': {
        const int digits = c == 'x' ? 2 : 4;
        uint32_t v = 0;
        for (int i = 0; i < digits; ++i, ++pos_) {
          if (AtEnd() || !std::isxdigit(static_cast<unsigned char>(Peek()))) {
            return Error(StrCat("has '\\", std::string(1, c), "' without ", digits, " hex digits"));
          }
          const char h = Peek();
          v = v * 16 +
              static_cast<uint32_t>(std::isdigit(static_cast<unsigned char>(h))
                                        ? h - '0'
                                        : std::tolower(static_cast<unsigned char>(h)) - 'a' + 10);
        }
        if (v >= 0xD800 && v <= 0xDFFF) return Error("names a surrogate code point");
        return CodePointSet({{v, v}});
      }
      case 'b':
        if (in_class) return CodePointSet({{'\b', '\b'}});
        return Error("uses \\b (word boundaries are not supported)");
      default:
        break;
    }
    if (std::isalnum(static_cast<unsigned char>(c))) {
      return Error(StrCat("uses '\\", std::string(1, c),
                          "' (back-references, \\B, \\A, \\Z and \\p are not supported)"));
    }
    // Escaped punctuation (or any other character) stands for itself.
    size_t len = 0;
    --pos_;
    const uint32_t cp = utf8::DecodeCodepoint(p_.substr(pos_), &len);
    pos_ += len;
    return CodePointSet({{cp, cp}});
  }

  absl::StatusOr<uint32_t> ClassChar(CodePointSet* set_out, bool* is_set) {
    *is_set = false;
    if (Peek() == '\\') {
      ++pos_;
      ASSIGN_OR_RETURN(CodePointSet s, Escape(true));
      if (s.ranges().size() == 1 && s.ranges()[0].first == s.ranges()[0].second) {
        return s.ranges()[0].first;
      }
      *is_set = true;
      *set_out = s;
      return 0;
    }
    size_t len = 0;
    const uint32_t cp = utf8::DecodeCodepoint(p_.substr(pos_), &len);
    pos_ += len;
    return cp;
  }

  absl::StatusOr<std::string> Class() {
    ++pos_;  // '['
    bool negated = false;
    if (!AtEnd() && Peek() == '^') {
      negated = true;
      ++pos_;
    }
    CodePointSet set;
    bool first = true;
    while (!AtEnd() && (Peek() != ']' || first)) {
      first = false;
      if (p_.substr(pos_, 2) == "[:") return Error("uses a POSIX class ([:name:]), not supported");
      CodePointSet named;
      bool is_set = false;
      ASSIGN_OR_RETURN(uint32_t lo, ClassChar(&named, &is_set));
      if (is_set) {
        set.Add(named);
        continue;
      }
      if (pos_ + 1 < end_ && Peek() == '-' && p_[pos_ + 1] != ']') {
        ++pos_;
        bool hi_is_set = false;
        ASSIGN_OR_RETURN(uint32_t hi, ClassChar(&named, &hi_is_set));
        if (hi_is_set) return Error("has a class range ending in a class escape");
        if (hi < lo) return Error("has a class range that runs backwards");
        set.Add(lo, hi);
      } else {
        set.Add(lo, lo);
      }
    }
    if (AtEnd()) return Error("has an unterminated character class");
    ++pos_;  // ']'
    if (negated) set = set.Complement();
    if (set.Empty()) return Error("has a character class that matches nothing");
    return Char(set.ranges());
  }

  absl::StatusOr<std::string> Atom() {
    const char c = Peek();
    switch (c) {
      case '(': {
        ++pos_;
        if (!AtEnd() && Peek() == '?') {
          const std::string_view rest = p_.substr(pos_, end_ - pos_);
          if (rest.starts_with("?:")) {
            pos_ += 2;
          } else if (rest.starts_with("?P<") || (rest.starts_with("?<") && rest.size() > 2 &&
                                                 rest[2] != '=' && rest[2] != '!')) {
            const size_t close = rest.find('>');
            if (close == std::string_view::npos) return Error("has an unterminated group name");
            pos_ += close + 1;
          } else {
            return Error(
                StrCat("uses '(", std::string(rest.substr(0, 3)),
                       "' (look-around, inline flags and conditionals are not supported)"));
          }
        }
        if (++depth_ > kMaxNesting)
          return Error(StrCat("nests groups more than ", kMaxNesting, " deep"));
        ASSIGN_OR_RETURN(std::string inner, Alternation());
        if (AtEnd() || Peek() != ')') return Error("has an unterminated group");
        ++pos_;
        --depth_;
        return "(" + inner + ")";
      }
      case '[':
        return Class();
      case '.':
        ++pos_;
        return Char(CodePointSet({{'\n', '\n'}}).Complement().ranges());
      case '\\': {
        ++pos_;
        ASSIGN_OR_RETURN(CodePointSet s, Escape(false));
        if (s.ranges().size() == 1 && s.ranges()[0].first == s.ranges()[0].second) {
          return Literal(s.ranges()[0].first);
        }
        return Char(s.ranges());
      }
      case '*':
      case '+':
      case '?':
        return Error(StrCat("has a quantifier with nothing to repeat at ", pos_));
      case '^':
      case '$':
        return Error(StrCat("has an anchor '", std::string(1, c), "' inside it at ", pos_,
                            " (only at the start and end)"));
      default: {
        size_t len = 0;
        const uint32_t cp = utf8::DecodeCodepoint(p_.substr(pos_), &len);
        pos_ += len;
        return Literal(cp);
      }
    }
  }

  static constexpr int kMaxNesting = 256;

  std::string_view p_;
  RegexOptions options_;
  int depth_ = 0;
  size_t pos_ = 0;
  size_t end_ = 0;
};

}  // namespace

absl::StatusOr<std::string> RegexToGbnf(std::string_view pattern, const RegexOptions& options) {
  return RegexParser(pattern, options).Run();
}

std::string JsonStringCharGbnf() {
  return StrCat(JsonEscaped().Complement().GbnfClass(),
                R"( | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4}))");
}

}  // namespace tandem::grammar
