#include "common/grammar/grammar.h"

#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "common/grammar/code_point_set.h"
#include "common/util/status_macros.h"
#include "common/util/strings.h"
#include "common/util/utf8.h"

namespace tandem::grammar {
namespace {

constexpr uint32_t kMaxCodepoint = CodePointSet::kMax;
constexpr int kMaxRepetition = 1000;  // bound of {m,n}

int EncodedLength(uint32_t cp) { return cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4; }

std::string Encode(uint32_t cp) {
  std::string s;
  utf8::AppendCodepoint(cp, &s);
  return s;
}

// The UTF-8 encodings of [lo, hi] (one encoded length, no surrogates) as runs of byte
// ranges, each run a product: every byte i in [first[i], last[i]].
void Utf8Runs(uint32_t lo, uint32_t hi,
              std::vector<std::vector<std::pair<uint8_t, uint8_t>>>* out) {
  const int n = EncodedLength(lo);
  for (int i = 1; i < n; ++i) {
    const uint32_t m = (uint32_t{1} << (6 * i)) - 1;  // the low i continuation bytes
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        Utf8Runs(lo, lo | m, out);
        Utf8Runs((lo | m) + 1, hi, out);
        return;
      }
      if ((hi & m) != m) {
        Utf8Runs(lo, (hi & ~m) - 1, out);
        Utf8Runs(hi & ~m, hi, out);
        return;
      }
    }
  }
  const std::string a = Encode(lo), b = Encode(hi);
  std::vector<std::pair<uint8_t, uint8_t>> run;
  for (int i = 0; i < n; ++i) run.push_back({uint8_t(a[i]), uint8_t(b[i])});
  out->push_back(std::move(run));
}

}  // namespace

// Reads GBNF into a Grammar. Rules are numbered as they are first named or made;
// groups and repetitions become rules of their own named after the rule they sit in.
class GbnfParser {
 public:
  explicit GbnfParser(std::string_view text) : text_(text) {}

  absl::StatusOr<Grammar> Run(std::string_view root_name) {
    if (text_.size() > Grammar::kMaxSourceBytes) {
      return Error(StrCat("the grammar is ", text_.size(), " bytes (at most ",
                          Grammar::kMaxSourceBytes, ")"));
    }
    if (size_t bad = utf8::FirstInvalid(text_); bad != text_.size()) {
      return Error(StrCat("the grammar is not valid UTF-8 (byte ", bad, ")"));
    }
    SkipSpace(true);
    while (pos_ < text_.size()) {
      const std::string name = Name();
      if (name.empty()) return Error("expected a rule name");
      const int32_t rule = RuleId(name);
      if (defined_[rule]) return Error(StrCat("rule '", name, "' is defined twice"));
      defined_[rule] = true;
      SkipSpace(false);
      if (text_.substr(pos_, 3) != "::=") return Error("expected '::='");
      pos_ += 3;
      SkipSpace(true);
      RETURN_IF_ERROR(Alternates(rule, name, false));
      if (pos_ < text_.size() && text_[pos_] != '\n') {
        return Error("expected the end of the rule");
      }
      SkipSpace(true);
    }
    for (int32_t r = 0; r < static_cast<int32_t>(g_.rules_.size()); ++r) {
      if (!defined_[r])
        return absl::InvalidArgumentError(
            StrCat("grammar: rule '", g_.names_[r], "' is used but not defined"));
    }
    auto root = ids_.find(std::string(root_name));
    if (root == ids_.end()) {
      return absl::InvalidArgumentError(StrCat("grammar: there is no rule '", root_name, "'"));
    }
    g_.root_ = root->second;
    RETURN_IF_ERROR(Check());
    return std::move(g_);
  }

 private:
  using Element = Grammar::Element;
  using Kind = Grammar::Kind;

  absl::Status Error(std::string_view what) const {
    size_t line = 1, col = 1;
    for (size_t i = 0; i < pos_ && i < text_.size(); ++i) {
      if (text_[i] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
    return absl::InvalidArgumentError(
        StrCat("grammar: ", what, " at line ", line, ", column ", col));
  }

  int32_t RuleId(const std::string& name) {
    auto [it, inserted] = ids_.try_emplace(name, static_cast<int32_t>(g_.rules_.size()));
    if (inserted) {
      g_.rules_.emplace_back();
      g_.names_.push_back(name);
      defined_.push_back(false);
    }
    return it->second;
  }
  int32_t NewRule(std::string_view base) {
    const int32_t id = static_cast<int32_t>(g_.rules_.size());
    g_.rules_.emplace_back();
    g_.names_.push_back(StrCat(base, "-", id));
    defined_.push_back(true);
    return id;
  }
  int32_t ByteSetId(const ByteSet& s) {
    auto [it, inserted] =
        byte_set_ids_.try_emplace(s.bits, static_cast<int32_t>(g_.byte_sets_.size()));
    if (inserted) g_.byte_sets_.push_back(s);
    return it->second;
  }
  absl::Status AddAlternative(int32_t rule, const std::vector<Element>& seq) {
    if (g_.elements_.size() + seq.size() + 1 > Grammar::kMaxElements) {
      return Error(StrCat("the grammar has more than ", Grammar::kMaxElements, " elements"));
    }
    g_.rules_[rule].push_back(static_cast<int32_t>(g_.elements_.size()));
    g_.elements_.insert(g_.elements_.end(), seq.begin(), seq.end());
    g_.elements_.push_back({Kind::kEnd, 0});
    return absl::OkStatus();
  }

  // Spaces, tabs, comments; newlines too when `newlines` (inside parentheses).
  void SkipSpace(bool newlines) {
    while (pos_ < text_.size()) {
      const char c = text_[pos_];
      if (c == ' ' || c == '\t' || c == '\r' || (newlines && c == '\n')) {
        ++pos_;
      } else if (c == '#') {
        while (pos_ < text_.size() && text_[pos_] != '\n') ++pos_;
      } else {
        break;
      }
    }
  }
  std::string Name() {
    const size_t start = pos_;
    while (pos_ < text_.size() && (std::isalnum(static_cast<unsigned char>(text_[pos_])) ||
                                   text_[pos_] == '-' || text_[pos_] == '_')) {
      ++pos_;
    }
    return std::string(text_.substr(start, pos_ - start));
  }

  // One code point of a literal or class, escapes decoded.
  absl::StatusOr<uint32_t> Char() {
    if (pos_ >= text_.size()) return Error("unexpected end of the grammar");
    if (text_[pos_] != '\\') {
      size_t len = 0;
      const uint32_t cp = utf8::DecodeCodepoint(text_.substr(pos_), &len);
      pos_ += len;
      return cp;
    }
    if (++pos_ >= text_.size()) return Error("unexpected end of the grammar after '\\'");
    const char c = text_[pos_++];
    int digits = 0;
    switch (c) {
      case 'n':
        return uint32_t{'\n'};
      case 'r':
        return uint32_t{'\r'};
      case 't':
        return uint32_t{'\t'};
      case '\\':
      case '"':
      case '[':
      case ']':
      case '-':
      case '^':
      case '/':
      case '\'':
        return static_cast<uint32_t>(c);
      case 'x':
        digits = 2;
        break;
      case 'u':
        digits = 4;
        break;
      case 'U':
        digits = 8;
        break;
      default:
        return Error(StrCat("unknown escape '\\", std::string(1, c), "'"));
    }
    uint32_t v = 0;
    for (int i = 0; i < digits; ++i, ++pos_) {
      if (pos_ >= text_.size() || !std::isxdigit(static_cast<unsigned char>(text_[pos_]))) {
        return Error(StrCat("'\\", std::string(1, c), "' needs ", digits, " hex digits"));
      }
      const char h = text_[pos_];
      v = v * 16 +
          static_cast<uint32_t>(std::isdigit(static_cast<unsigned char>(h))
                                    ? h - '0'
                                    : std::tolower(static_cast<unsigned char>(h)) - 'a' + 10);
    }
    if (v > kMaxCodepoint || (v >= 0xD800 && v <= 0xDFFF)) {
      return Error(StrCat("escape value ", v, " is not a Unicode scalar value"));
    }
    return v;
  }

  // The element matching one code point of `ranges`: a byte set when every code point
  // is one byte, else a rule whose alternatives are the UTF-8 byte runs.
  absl::StatusOr<Element> CharClass(const CodePointSet& set, std::string_view base) {
    ByteSet single;
    std::vector<std::vector<std::pair<uint8_t, uint8_t>>> runs;
    for (auto [lo, hi] : set.ranges()) {
      // Split at the encoded-length boundaries.
      for (uint32_t edge : {0x7Fu, 0x7FFu, 0xFFFFu, kMaxCodepoint}) {
        if (lo > hi) break;
        if (lo > edge) continue;
        const uint32_t top = std::min(hi, edge);
        if (top < 0x80) {
          single.AddRange(static_cast<uint8_t>(lo), static_cast<uint8_t>(top));
        } else {
          Utf8Runs(lo, top, &runs);
        }
        lo = top + 1;
        if (top == kMaxCodepoint) break;
      }
    }
    if (runs.empty()) return Element{Kind::kBytes, ByteSetId(single)};
    const int32_t rule = NewRule(base);
    if (!single.Empty()) RETURN_IF_ERROR(AddAlternative(rule, {{Kind::kBytes, ByteSetId(single)}}));
    for (const auto& run : runs) {
      std::vector<Element> seq;
      for (auto [a, b] : run) {
        ByteSet s;
        s.AddRange(a, b);
        seq.push_back({Kind::kBytes, ByteSetId(s)});
      }
      RETURN_IF_ERROR(AddAlternative(rule, seq));
    }
    return Element{Kind::kRule, rule};
  }

  // `x` repeated min..max times (max < 0: unbounded), as elements appended to `seq`.
  absl::Status Repeat(std::vector<Element> item, int min, int max, std::string_view base,
                      std::vector<Element>* seq) {
    Element x = item.size() == 1 ? item[0] : Element{Kind::kRule, NewRule(base)};
    if (item.size() != 1) RETURN_IF_ERROR(AddAlternative(x.index, item));
    for (int i = 0; i < min; ++i) seq->push_back(x);
    if (max < 0) {  // star ::= x star | ε
      const int32_t star = NewRule(base);
      RETURN_IF_ERROR(AddAlternative(star, {x, {Kind::kRule, star}}));
      RETURN_IF_ERROR(AddAlternative(star, {}));
      seq->push_back({Kind::kRule, star});
      return absl::OkStatus();
    }
    // opt_k ::= x opt_{k-1} | ε, nested max - min deep.
    int32_t inner = -1;
    for (int k = 0; k < max - min; ++k) {
      const int32_t opt = NewRule(base);
      std::vector<Element> body = {x};
      if (inner >= 0) body.push_back({Kind::kRule, inner});
      RETURN_IF_ERROR(AddAlternative(opt, body));
      RETURN_IF_ERROR(AddAlternative(opt, {}));
      inner = opt;
    }
    if (inner >= 0) seq->push_back({Kind::kRule, inner});
    return absl::OkStatus();
  }

  absl::StatusOr<int> Number() {
    const size_t start = pos_;
    int v = 0;
    while (pos_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[pos_]))) {
      v = v * 10 + (text_[pos_++] - '0');
      if (v > kMaxRepetition) return Error(StrCat("a repetition bound is above ", kMaxRepetition));
    }
    if (pos_ == start) return -1;
    return v;
  }

  absl::Status Sequence(int32_t rule, std::string_view base, bool nested) {
    std::vector<Element> seq;
    size_t last = 0;  // where the last item's elements begin in seq
    bool have_item = false;
    while (pos_ < text_.size()) {
      const char c = text_[pos_];
      if (c == '"') {
        ++pos_;
        last = seq.size();
        while (pos_ < text_.size() && text_[pos_] != '"') {
          ASSIGN_OR_RETURN(uint32_t cp, Char());
          for (char b : Encode(cp)) {
            ByteSet s;
            s.Add(static_cast<uint8_t>(b));
            seq.push_back({Kind::kBytes, ByteSetId(s)});
          }
        }
        if (pos_ >= text_.size()) return Error("unterminated literal");
        ++pos_;
        have_item = true;
      } else if (c == '[') {
        ++pos_;
        const bool negated = pos_ < text_.size() && text_[pos_] == '^';
        if (negated) ++pos_;
        CodePointSet ranges;
        while (pos_ < text_.size() && text_[pos_] != ']') {
          ASSIGN_OR_RETURN(uint32_t lo, Char());
          uint32_t hi = lo;
          if (pos_ + 1 < text_.size() && text_[pos_] == '-' && text_[pos_ + 1] != ']') {
            ++pos_;
            ASSIGN_OR_RETURN(hi, Char());
            if (hi < lo) return Error("a class range runs backwards");
          }
          ranges.Add(lo, hi);
        }
        if (pos_ >= text_.size()) return Error("unterminated character class");
        ++pos_;
        if (negated) ranges = ranges.Complement();
        last = seq.size();
        ASSIGN_OR_RETURN(Element e, CharClass(ranges, base));
        seq.push_back(e);
        have_item = true;
      } else if (c == '.') {
        ++pos_;
        last = seq.size();
        ASSIGN_OR_RETURN(Element e, CharClass(CodePointSet::All(), base));
        seq.push_back(e);
        have_item = true;
      } else if (c == '(') {
        ++pos_;
        SkipSpace(true);
        if (++depth_ > kMaxNesting)
          return Error(StrCat("groups nest more than ", kMaxNesting, " deep"));
        const int32_t group = NewRule(base);
        RETURN_IF_ERROR(Alternates(group, base, true));
        --depth_;
        if (pos_ >= text_.size() || text_[pos_] != ')') return Error("expected ')'");
        ++pos_;
        last = seq.size();
        seq.push_back({Kind::kRule, group});
        have_item = true;
      } else if (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_') {
        last = seq.size();
        seq.push_back({Kind::kRule, RuleId(Name())});
        have_item = true;
      } else if (c == '*' || c == '+' || c == '?' || c == '{') {
        if (!have_item) return Error(StrCat("'", std::string(1, c), "' follows nothing"));
        ++pos_;
        int min = 0, max = -1;
        if (c == '+') min = 1;
        if (c == '?') max = 1;
        if (c == '{') {
          SkipSpace(false);
          ASSIGN_OR_RETURN(min, Number());
          SkipSpace(false);
          if (pos_ < text_.size() && text_[pos_] == ',') {
            ++pos_;
            SkipSpace(false);
            ASSIGN_OR_RETURN(max, Number());
            SkipSpace(false);
          } else {
            max = min;
          }
          if (min < 0) min = 0;
          if (pos_ >= text_.size() || text_[pos_] != '}') return Error("expected '}'");
          ++pos_;
          if (max >= 0 && max < min) return Error("a repetition's maximum is below its minimum");
        }
        std::vector<Element> item(seq.begin() + static_cast<std::ptrdiff_t>(last), seq.end());
        seq.resize(last);
        RETURN_IF_ERROR(Repeat(std::move(item), min, max, base, &seq));
        have_item = false;  // "x**" is refused, as llama.cpp does
      } else {
        break;
      }
      SkipSpace(nested);
    }
    return AddAlternative(rule, seq);
  }

  absl::Status Alternates(int32_t rule, std::string_view base, bool nested) {
    RETURN_IF_ERROR(Sequence(rule, base, nested));
    while (pos_ < text_.size() && text_[pos_] == '|') {
      ++pos_;
      SkipSpace(true);
      RETURN_IF_ERROR(Sequence(rule, base, nested));
    }
    return absl::OkStatus();
  }

  // Every alternative kept can end (those that cannot — an empty class, a rule that
  // never finishes — are dropped, so no state is ever a dead end), the root has one,
  // and no rule is left-recursive in a way that grows the stack. Linear in the
  // grammar's size: worklists for the fixpoints, Tarjan's strongly connected
  // components for the cycles.
  absl::Status Check() {
    const int32_t n = static_cast<int32_t>(g_.rules_.size());
    const auto& el = g_.elements_;
    // Alternatives: owner rule and start; for each rule, the alternatives naming it.
    std::vector<int32_t> alt_rule, alt_start;
    std::vector<std::vector<int32_t>> used_in;
    auto index = [&] {
      alt_rule.clear();
      alt_start.clear();
      used_in.assign(n, {});
      for (int32_t r = 0; r < n; ++r) {
        for (int32_t start : g_.rules_[r]) {
          const int32_t a = static_cast<int32_t>(alt_rule.size());
          alt_rule.push_back(r);
          alt_start.push_back(start);
          for (int32_t i = start; el[i].kind != Kind::kEnd; ++i) {
            if (el[i].kind == Kind::kRule) used_in[el[i].index].push_back(a);
          }
        }
      }
    };
    // Productive: derives some finite string; nullable: the empty one. An alternative
    // waits on each rule reference not yet known to be so; at the end waiting[a] == 0
    // says the alternative itself is.
    auto fixpoint = [&](bool for_nullable, std::vector<int32_t>* waiting) {
      std::vector<bool> done(n, false);
      std::vector<int32_t> queue;
      waiting->assign(alt_rule.size(), 0);
      for (size_t a = 0; a < alt_rule.size(); ++a) {
        bool possible = true;
        for (int32_t i = alt_start[a]; el[i].kind != Kind::kEnd; ++i) {
          if (el[i].kind == Kind::kRule) {
            ++(*waiting)[a];
          } else if (for_nullable || g_.byte_sets_[el[i].index].Empty()) {
            possible = false;
          }
        }
        if (!possible) (*waiting)[a] = -1;
        if ((*waiting)[a] == 0 && !done[alt_rule[a]]) {
          done[alt_rule[a]] = true;
          queue.push_back(alt_rule[a]);
        }
      }
      while (!queue.empty()) {
        const int32_t r = queue.back();
        queue.pop_back();
        for (int32_t a : used_in[r]) {
          if ((*waiting)[a] > 0 && --(*waiting)[a] == 0 && !done[alt_rule[a]]) {
            done[alt_rule[a]] = true;
            queue.push_back(alt_rule[a]);
          }
        }
      }
      return done;
    };
    index();
    std::vector<int32_t> waiting;
    const std::vector<bool> productive = fixpoint(false, &waiting);
    if (!productive[g_.root_]) {
      return absl::InvalidArgumentError(
          StrCat("grammar: rule '", g_.names_[g_.root_], "' accepts no string at all"));
    }
    for (auto& alternatives : g_.rules_) alternatives.clear();
    for (size_t a = 0; a < alt_rule.size(); ++a) {
      if (waiting[a] == 0) g_.rules_[alt_rule[a]].push_back(alt_start[a]);
    }
    index();
    const std::vector<bool> nullable = fixpoint(true, &waiting);
    // Edges A → B where B can come first in A; `grows` when something follows B. A
    // growing edge inside a cycle is left recursion that never reads a byte.
    std::vector<std::vector<int32_t>> first(n);
    std::vector<std::pair<int32_t, int32_t>> growing;
    for (size_t a = 0; a < alt_rule.size(); ++a) {
      for (int32_t i = alt_start[a]; el[i].kind != Kind::kEnd; ++i) {
        if (el[i].kind == Kind::kBytes) break;
        first[alt_rule[a]].push_back(el[i].index);
        if (el[i + 1].kind != Kind::kEnd) growing.push_back({alt_rule[a], el[i].index});
        if (!nullable[el[i].index]) break;
      }
    }
    const std::vector<int32_t> component = Components(first);
    for (auto [a, b] : growing) {
      if (component[a] == component[b]) {
        return absl::InvalidArgumentError(
            StrCat("grammar: rule '", g_.names_[a], "' is left-recursive"));
      }
    }
    return absl::OkStatus();
  }

  // Strongly connected components of `edges` (Tarjan's, without recursion).
  static std::vector<int32_t> Components(const std::vector<std::vector<int32_t>>& edges) {
    const int32_t n = static_cast<int32_t>(edges.size());
    std::vector<int32_t> index(n, -1), low(n, 0), component(n, -1), stack;
    std::vector<bool> on_stack(n, false);
    std::vector<std::pair<int32_t, size_t>> calls;  // (node, next edge)
    int32_t counter = 0, components = 0;
    for (int32_t root = 0; root < n; ++root) {
      if (index[root] >= 0) continue;
      calls.push_back({root, 0});
      index[root] = low[root] = counter++;
      stack.push_back(root);
      on_stack[root] = true;
      while (!calls.empty()) {
        auto& [v, next] = calls.back();
        if (next < edges[v].size()) {
          const int32_t w = edges[v][next++];
          if (index[w] < 0) {
            index[w] = low[w] = counter++;
            stack.push_back(w);
            on_stack[w] = true;
            calls.push_back({w, 0});
          } else if (on_stack[w]) {
            low[v] = std::min(low[v], index[w]);
          }
          continue;
        }
        if (low[v] == index[v]) {
          int32_t w;
          do {
            w = stack.back();
            stack.pop_back();
            on_stack[w] = false;
            component[w] = components;
          } while (w != v);
          ++components;
        }
        const int32_t done = v;
        calls.pop_back();
        if (!calls.empty()) low[calls.back().first] = std::min(low[calls.back().first], low[done]);
      }
    }
    return component;
  }

  static constexpr int kMaxNesting = 256;

  std::string_view text_;
  size_t pos_ = 0;
  int depth_ = 0;  // open parentheses
  Grammar g_;
  absl::flat_hash_map<std::string, int32_t> ids_;
  absl::flat_hash_map<std::array<uint64_t, 4>, int32_t> byte_set_ids_;
  std::vector<bool> defined_;
};

absl::StatusOr<Grammar> Grammar::Compile(std::string_view text, std::string_view root) {
  absl::StatusOr<Grammar> g = GbnfParser(text).Run(root);
  if (g.ok()) {
    for (const Element& e : g->elements_) g->byte_elements_ += e.kind == Kind::kBytes;
  }
  return g;
}

std::string GbnfLiteral(std::string_view text) {
  std::string out = "\"";
  for (unsigned char c : text) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20 || c == 0x7F) {
          static constexpr char kHex[] = "0123456789ABCDEF";
          out += "\\x";
          out += kHex[c >> 4];
          out += kHex[c & 15];
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += "\"";
  return out;
}

}  // namespace tandem::grammar
