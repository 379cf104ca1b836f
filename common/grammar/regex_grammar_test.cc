#include "common/grammar/regex_grammar.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/grammar/grammar.h"
#include "common/grammar/grammar_matcher.h"
#include "common/grammar/grammar_test_util.h"
#include "common/util/utf8.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace tandem::grammar {
namespace {

using ::testing::HasSubstr;

std::shared_ptr<const Grammar> FromRegex(std::string_view pattern, const RegexOptions& o = {}) {
  auto body = RegexToGbnf(pattern, o);
  EXPECT_TRUE(body.ok()) << pattern << ": " << body.status();
  if (!body.ok()) return nullptr;
  std::string gbnf = "root ::= " + *body + "\n";
  if (o.json_string) gbnf = "root ::= \"\\\"\" (" + *body + ") \"\\\"\"\n";
  auto g = Grammar::Compile(gbnf);
  EXPECT_TRUE(g.ok()) << pattern << " → " << gbnf << ": " << g.status();
  return g.ok() ? std::make_shared<const Grammar>(*std::move(g)) : nullptr;
}

// The reference: PCRE2 in UTF mode, anchored at both ends (or searching).
class Pcre {
 public:
  explicit Pcre(const std::string& pattern, bool search = false) {
    int err = 0;
    PCRE2_SIZE offset = 0;
    const uint32_t anchors = search ? 0 : PCRE2_ANCHORED | PCRE2_ENDANCHORED;
    code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                          PCRE2_UTF | anchors, &err, &offset, nullptr);
    data_ = code_ ? pcre2_match_data_create_from_pattern(code_, nullptr) : nullptr;
  }
  ~Pcre() {
    pcre2_match_data_free(data_);
    pcre2_code_free(code_);
  }
  bool ok() const { return code_ != nullptr; }
  bool Matches(std::string_view s) const {
    return pcre2_match(code_, reinterpret_cast<PCRE2_SPTR>(s.data()), s.size(), 0, 0, data_,
                       nullptr) >= 0;
  }

 private:
  pcre2_code* code_ = nullptr;
  pcre2_match_data* data_ = nullptr;
};

TEST(RegexToGbnf, Examples) {
  struct Case {
    const char* pattern;
    std::vector<std::string> yes, no;
  };
  for (const Case& c : std::vector<Case>{
           {"[A-Z]{3}-\\d{2,4}", {"ABC-12", "XYZ-1234"}, {"AB-12", "ABC-1", "abc-12", "ABC-12345"}},
           {"^(cat|dog)s?$", {"cat", "dogs"}, {"cats ", "bird", ""}},
           {"a.c", {"abc", "a c", "aéc"}, {"a\nc", "ac"}},
           {"(?:ab)+|x*", {"", "ab", "abab", "xxx"}, {"aba", "abx"}},
           {"(?P<year>\\d{4})-(?<m>\\d\\d)", {"2024-05"}, {"24-05"}},
           {"[^a-c\\s]+", {"xyz", "d!"}, {"xa", "x y", ""}},
           {"\\w+@\\w+\\.com", {"me@host.com"}, {"me@host.org", "@host.com"}},
           {"a{2}b{,2}", {"aa", "aab", "aabb"}, {"aab{,2}", "aabbb"}},  // Python: {,n} is {0,n}
           {"colou?r", {"color", "colour"}, {"colouur"}},
           {"\\x41\\u00e9\\.\\*", {"Aé.*"}, {"Aé.x"}},
           {"[]a]+", {"]a]"}, {"b"}},
           {"a+?b*?", {"aab", "a"}, {"b"}},
           {"", {""}, {"a"}},
       }) {
    SCOPED_TRACE(c.pattern);
    auto g = FromRegex(c.pattern);
    ASSERT_NE(g, nullptr);
    for (const std::string& s : c.yes) EXPECT_TRUE(Matches(g, s)) << s;
    for (const std::string& s : c.no) EXPECT_FALSE(Matches(g, s)) << s;
  }
}

// Inside a JSON string each character takes the spelling a JSON encoder gives it:
// quotes, backslashes and control characters escaped, the rest as they are.
TEST(RegexToGbnf, JsonStringSpelling) {
  RegexOptions json;
  json.json_string = true;
  auto g = FromRegex("[\\s\"\\\\x]+\\x01", json);
  ASSERT_NE(g, nullptr);
  for (const std::string& s : {std::string("x\n\t\"\\ \r\f\v\x01")}) {
    EXPECT_TRUE(Matches(g, nlohmann::json(s).dump())) << nlohmann::json(s).dump();
  }
  EXPECT_FALSE(Matches(g, "\"x\n\x01\""));    // a raw newline is not JSON
  EXPECT_FALSE(Matches(g, "\"\"\\u0001\""));  // an unescaped quote ends the string
  RegexOptions search = json;
  search.search = true;
  auto gs = FromRegex("^ab", search);
  ASSERT_NE(gs, nullptr);
  EXPECT_TRUE(Matches(gs, "\"ab\\u0041\\n\\\"\""));  // any JSON escapes after the match
  EXPECT_FALSE(Matches(gs, "\"xab\""));
}

TEST(RegexToGbnf, UnsupportedSyntaxIsNamed) {
  for (auto [pattern, what] : std::vector<std::pair<const char*, const char*>>{
           {"(?=a)b", "look-around"},
           {"(?i)abc", "inline flags"},
           {"(a)\\1", "back-references"},
           {"\\bword", "word boundaries"},
           {"a^b", "anchor '^' inside"},
           {"a$b", "anchor '$' inside"},
           {"(ab", "unterminated group"},
           {"ab)", "unmatched ')'"},
           {"[ab", "unterminated character class"},
           {"*a", "nothing to repeat"},
           {"a**", "quantifier on a quantifier"},
           {"a{3,2}", "maximum is below its minimum"},
           {"a{5000}", "more than 1000 times"},
           {"[z-a]", "runs backwards"},
           {"\\p{L}", "\\p"},
           {"[[:alpha:]]", "POSIX class"},
           {"\\u12", "hex digits"},
           {"abc\\", "lone '\\'"},
       }) {
    auto r = RegexToGbnf(pattern);
    ASSERT_FALSE(r.ok()) << pattern;
    EXPECT_THAT(std::string(r.status().message()), HasSubstr(what)) << pattern;
  }
}

// A random regular expression, and strings it matches, built together.
class RandomRegex {
 public:
  explicit RandomRegex(uint32_t seed) : rng_(seed) {}

  struct Node {
    enum Kind { kChar, kClass, kDot, kSeq, kAlt, kRepeat } kind = kChar;
    std::string text;            // kChar: the character; kClass: the pattern spelling
    std::vector<uint32_t> pool;  // kClass / kDot: characters it matches, for sampling
    std::vector<Node> kids;
    int min = 0, max = 0;
  };

  Node Make(int depth) {
    const int r = static_cast<int>(rng_() % (depth > 2 ? 4 : 7));
    if (r <= 1) return CharNode();
    if (r == 2) return ClassNode();
    if (r == 3) {
      Node n;
      n.kind = Node::kDot;
      n.pool = {'a', 'b', ' ', 0xE9, 0x4E16, '"'};
      return n;
    }
    if (r == 4) {
      Node n;
      n.kind = Node::kSeq;
      for (int i = 0, k = 2 + static_cast<int>(rng_() % 2); i < k; ++i)
        n.kids.push_back(Make(depth + 1));
      return n;
    }
    if (r == 5) {
      Node n;
      n.kind = Node::kAlt;
      for (int i = 0, k = 2 + static_cast<int>(rng_() % 2); i < k; ++i)
        n.kids.push_back(Make(depth + 1));
      return n;
    }
    Node n;
    n.kind = Node::kRepeat;
    n.kids.push_back(Make(depth + 1));
    static const int kBounds[][2] = {{0, -1}, {1, -1}, {0, 1}, {2, 2}, {1, 3}, {0, 2}, {2, -1}};
    const auto& b = kBounds[rng_() % 7];
    n.min = b[0];
    n.max = b[1];
    return n;
  }

  std::string Pattern(const Node& n) const {
    switch (n.kind) {
      case Node::kChar:
      case Node::kClass:
        return n.text;
      case Node::kDot:
        return ".";
      case Node::kSeq: {
        std::string s;
        for (const Node& k : n.kids) s += Pattern(k);
        return s;
      }
      case Node::kAlt: {
        std::string s = "(?:";
        for (size_t i = 0; i < n.kids.size(); ++i) s += (i ? "|" : "") + Pattern(n.kids[i]);
        return s + ")";
      }
      case Node::kRepeat: {
        std::string q = n.min == 0 && n.max < 0    ? "*"
                        : n.min == 1 && n.max < 0  ? "+"
                        : n.min == 0 && n.max == 1 ? "?"
                        : n.max < 0
                            ? "{" + std::to_string(n.min) + ",}"
                            : "{" + std::to_string(n.min) + "," + std::to_string(n.max) + "}";
        return "(?:" + Pattern(n.kids[0]) + ")" + q;
      }
    }
    return "";
  }

  void Sample(const Node& n, std::string* out) {
    switch (n.kind) {
      case Node::kChar:
        *out += Unescape(n.text);
        return;
      case Node::kClass:
      case Node::kDot:
        AppendCp(n.pool[rng_() % n.pool.size()], out);
        return;
      case Node::kSeq:
        for (const Node& k : n.kids) Sample(k, out);
        return;
      case Node::kAlt:
        Sample(n.kids[rng_() % n.kids.size()], out);
        return;
      case Node::kRepeat: {
        const int extra = n.max < 0 ? static_cast<int>(rng_() % 3) : n.max - n.min;
        const int count = n.min + (extra > 0 ? static_cast<int>(rng_() % (extra + 1)) : 0);
        for (int i = 0; i < count; ++i) Sample(n.kids[0], out);
        return;
      }
    }
  }

  std::mt19937& rng() { return rng_; }

 private:
  static void AppendCp(uint32_t cp, std::string* out) {
    if (cp < 0x80) {
      out->push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
      out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
      out->push_back(static_cast<char>(0x80 | (cp & 63)));
    } else {
      out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 63)));
      out->push_back(static_cast<char>(0x80 | (cp & 63)));
    }
  }
  static std::string Unescape(const std::string& t) { return t[0] == '\\' ? t.substr(1) : t; }

  Node CharNode() {
    static const char* kChars[] = {"a", "b",  "c", "\\.", "\\*",  "\\(",
                                   "é", "世", " ", "\"",  "\\\\", "-"};
    Node n;
    n.kind = Node::kChar;
    n.text = kChars[rng_() % 12];
    return n;
  }
  Node ClassNode() {
    Node n;
    n.kind = Node::kClass;
    switch (rng_() % 6) {
      case 0:
        n.text = "[a-c]";
        n.pool = {'a', 'b', 'c'};
        break;
      case 1:
        n.text = "[^a\\s]";
        n.pool = {'b', 'z', 0xE9, '"', '\\'};
        break;
      case 2:
        n.text = "\\d";
        n.pool = {'0', '5', '9'};
        break;
      case 3:
        n.text = "\\w";
        n.pool = {'a', 'Z', '_', '3'};
        break;
      case 4:
        n.text = "[\\-.é-ë]";
        n.pool = {'-', '.', 0xE9, 0xEB};
        break;
      default:
        n.text = "\\S";
        n.pool = {'x', 0x4E16, '"'};
        break;
    }
    return n;
  }

  std::mt19937 rng_;
};

// The property: on strings each random pattern matches, and on mutations of them, the
// grammar accepts exactly what PCRE2 accepts — whole-string, searching, and spelled
// inside a JSON string.
TEST(RegexToGbnf, AcceptsExactlyWhatPcre2Accepts) {
  const std::vector<std::string> mutations = {"a", "b", "1", "_", " ", "é", "\n", "\"", "\\", "."};
  int positives = 0, negatives = 0;
  for (uint32_t seed = 1; seed <= 250; ++seed) {
    RandomRegex gen(seed);
    const RandomRegex::Node node = gen.Make(0);
    const std::string pattern = gen.Pattern(node);
    SCOPED_TRACE(pattern);
    Pcre full(pattern), search(pattern, /*search=*/true);
    ASSERT_TRUE(full.ok());
    auto g = FromRegex(pattern);
    RegexOptions searching;
    searching.search = true;
    auto gs = FromRegex(pattern, searching);
    RegexOptions json;
    json.json_string = true;
    auto gj = FromRegex(pattern, json);
    ASSERT_NE(g, nullptr);
    ASSERT_NE(gs, nullptr);
    ASSERT_NE(gj, nullptr);
    std::vector<std::string> texts;
    for (int i = 0; i < 8; ++i) {
      std::string s;
      gen.Sample(node, &s);
      ASSERT_TRUE(full.Matches(s)) << "generator bug: " << s;
      texts.push_back(s);
      std::string m = s;
      const size_t at = m.empty() ? 0 : gen.rng()() % (m.size() + 1);
      switch (gen.rng()() % 3) {
        case 0:
          m.insert(at, mutations[gen.rng()() % mutations.size()]);
          break;
        case 1:
          if (at < m.size()) m.erase(at, 1);
          break;
        default:
          m += mutations[gen.rng()() % mutations.size()];
          break;
      }
      texts.push_back(m);
    }
    for (const std::string& t : texts) {
      if (!utf8::IsValid(t)) continue;  // a mutation may split a character
      const bool want = full.Matches(t);
      (want ? positives : negatives)++;
      EXPECT_EQ(Matches(g, t), want) << nlohmann::json(t).dump();
      EXPECT_EQ(Matches(gs, t), search.Matches(t)) << "search " << nlohmann::json(t).dump();
      EXPECT_EQ(Matches(gj, nlohmann::json(t).dump()), want) << "json " << nlohmann::json(t).dump();
    }
  }
  EXPECT_GT(positives, 1500);
  EXPECT_GT(negatives, 300);
}

}  // namespace
}  // namespace tandem::grammar
