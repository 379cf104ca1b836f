#include "common/tokenizer/jinja/lexer.h"

#include <algorithm>
#include <cstdlib>

#include "absl/status/status.h"
#include "common/tokenizer/jinja/py_string.h"
#include "common/util/strings.h"
#include "common/util/utf8.h"

namespace tandem::tokenizer::jinja {
namespace {

bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsNameStart(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool IsNameChar(char c) { return IsNameStart(c) || IsDigit(c); }
int HexDigit(char c) {
  if (IsDigit(c)) return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

class Lexer {
 public:
  explicit Lexer(std::string_view source) {
    // Line endings become "\n"; one trailing newline goes (keep_trailing_newline=False).
    src_.reserve(source.size());
    for (size_t i = 0; i < source.size(); ++i) {
      if (source[i] == '\r') {
        src_.push_back('\n');
        if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
      } else {
        src_.push_back(source[i]);
      }
    }
    if (!src_.empty() && src_.back() == '\n') src_.pop_back();
    for (size_t i = 0; i < src_.size(); ++i) {
      if (src_[i] == '\n') newlines_.push_back(i);
    }
  }

  absl::StatusOr<std::vector<Token>> Run() {
    while (pos_ < src_.size()) {
      size_t tag = pos_;
      while ((tag = src_.find('{', tag)) != std::string::npos && tag + 1 < src_.size() &&
             src_[tag + 1] != '{' && src_[tag + 1] != '%' && src_[tag + 1] != '#') {
        ++tag;
      }
      if (tag == std::string::npos || tag + 1 >= src_.size()) {
        Emit(TokenKind::kText, src_.substr(pos_), pos_);
        break;
      }
      const char kind = src_[tag + 1];
      const char sign = tag + 2 < src_.size() ? src_[tag + 2] : '\0';
      EmitText(std::string_view(src_).substr(pos_, tag - pos_), sign, kind == '{');
      pos_ = tag + 2 + (sign == '-' || sign == '+' ? 1 : 0);
      absl::Status status = kind == '#'                     ? SkipComment(tag)
                            : kind == '%' && SkipRawBegin() ? LexRawBody(tag)
                                                            : LexTag(kind, tag);
      if (!status.ok()) return status;
    }
    Emit(TokenKind::kEnd, "", src_.size());
    return std::move(tokens_);
  }

 private:
  void Emit(TokenKind kind, std::string text, size_t at) {
    const auto it = std::lower_bound(newlines_.begin(), newlines_.end(), at);
    const size_t line_begin = it == newlines_.begin() ? 0 : *(it - 1) + 1;
    tokens_.push_back({kind, std::move(text), static_cast<int>(it - newlines_.begin()) + 1,
                       static_cast<int>(at - line_begin) + 1});
  }

  absl::Status Error(size_t at, std::string_view message) {
    Emit(TokenKind::kEnd, "", at);
    const Token& t = tokens_.back();
    return absl::InvalidArgumentError(
        StrCat("line ", t.line, ", column ", t.column, ": ", message));
  }

  // The text before a tag, with the tag's whitespace control applied.
  void EmitText(std::string_view text, char sign, bool expr_tag) {
    const size_t at = static_cast<size_t>(text.data() - src_.data());
    if (sign == '-') {
      text = py::Strip(text, /*left=*/false, /*right=*/true);
    } else if (sign != '+' && !expr_tag) {
      // lstrip_blocks: drop the indentation before `{%` / `{#` on an otherwise empty line.
      const size_t line_start = text.rfind('\n') + 1;  // 0 when there is no newline
      const std::string_view indent = text.substr(line_start);
      if ((line_start > 0 || line_starting_) && !indent.empty() &&
          py::Strip(indent, true, false).empty()) {
        text = text.substr(0, line_start);
      }
    }
    if (!text.empty()) Emit(TokenKind::kText, std::string(text), at);
  }

  size_t SkipSpaces(size_t p) const {
    size_t len = 0;
    while (p < src_.size() && py::IsSpace(py::DecodeAt(src_, p, &len))) p += len;
    return p;
  }

  // `{%` `raw` `%}` (pos_ is past `{%` and its sign): consumes the rest of the tag.
  bool SkipRawBegin() {
    size_t p = SkipSpaces(pos_);
    if (src_.compare(p, 3, "raw") != 0 || (p + 3 < src_.size() && IsNameChar(src_[p + 3]))) {
      return false;
    }
    p = SkipSpaces(p + 3);
    if (src_.compare(p, 3, "-%}") == 0) {
      p = SkipSpaces(p + 3);
    } else if (src_.compare(p, 2, "%}") == 0) {
      p += 2;  // no trim_blocks here, as in jinja2
    } else {
      return false;
    }
    pos_ = p;
    line_starting_ = src_[pos_ - 1] == '\n';
    return true;
  }

  // Everything up to `{% endraw %}` is text.
  absl::Status LexRawBody(size_t open) {
    for (size_t q = src_.find("{%", pos_); q != std::string::npos; q = src_.find("{%", q + 1)) {
      const char sign = q + 2 < src_.size() ? src_[q + 2] : '\0';
      size_t p = SkipSpaces(q + 2 + (sign == '-' || sign == '+' ? 1 : 0));
      if (src_.compare(p, 6, "endraw") != 0) continue;
      p = SkipSpaces(p + 6);
      const char end_sign = p < src_.size() ? src_[p] : '\0';
      if (end_sign == '-' || end_sign == '+') ++p;
      if (src_.compare(p, 2, "%}") != 0) continue;
      EmitText(std::string_view(src_).substr(pos_, q - pos_), sign, false);
      pos_ = p + 2;
      SkipAfterTag(end_sign == '-' || end_sign == '+' ? end_sign : '\0', /*block=*/true);
      return absl::OkStatus();
    }
    return Error(open, "missing end of raw directive");
  }

  // After a tag's closing delimiter: `-` strips all following whitespace, a plain block
  // or comment end (trim_blocks) one newline.
  void SkipAfterTag(char sign, bool block) {
    if (sign == '-') {
      pos_ = SkipSpaces(pos_);
    } else if (sign != '+' && block && pos_ < src_.size() && src_[pos_] == '\n') {
      ++pos_;
    }
    line_starting_ = pos_ > 0 && src_[pos_ - 1] == '\n';
  }

  absl::Status SkipComment(size_t open) {
    const size_t end = src_.find("#}", pos_);
    if (end == std::string::npos) return Error(open, "missing end of comment tag");
    const char sign = end > pos_ ? src_[end - 1] : '\0';
    pos_ = end + 2;
    SkipAfterTag(sign == '-' || sign == '+' ? sign : '\0', /*block=*/true);
    return absl::OkStatus();
  }

  absl::Status LexTag(char kind, size_t open) {
    const bool block = kind == '%';
    const std::string close = block ? "%}" : "}}";
    Emit(block ? TokenKind::kStmtBegin : TokenKind::kExprBegin, block ? "{%" : "{{", open);
    std::vector<char> brackets;  // a closing delimiter counts only outside ( [ {
    while (true) {
      if (pos_ >= src_.size()) return Error(open, "unexpected end of template inside a tag");
      if (brackets.empty()) {
        char sign = '\0';
        if ((src_[pos_] == '-' || (block && src_[pos_] == '+')) &&
            src_.compare(pos_ + 1, 2, close) == 0) {
          sign = src_[pos_++];
        }
        if (src_.compare(pos_, 2, close) == 0) {
          Emit(block ? TokenKind::kStmtEnd : TokenKind::kExprEnd, close, pos_);
          pos_ += 2;
          SkipAfterTag(sign, block);
          return absl::OkStatus();
        }
        if (sign != '\0') --pos_;
      }
      const char c = src_[pos_];
      size_t len = 0;
      if (py::IsSpace(py::DecodeAt(src_, pos_, &len))) {
        pos_ += len;
      } else if (IsDigit(c)) {
        LexNumber();
      } else if (IsNameStart(c)) {
        const size_t start = pos_;
        while (pos_ < src_.size() && IsNameChar(src_[pos_])) ++pos_;
        Emit(TokenKind::kName, src_.substr(start, pos_ - start), start);
      } else if (c == '\'' || c == '"') {
        absl::Status status = LexString();
        if (!status.ok()) return status;
      } else {
        absl::Status status = LexOperator(&brackets);
        if (!status.ok()) return status;
      }
    }
  }

  void LexNumber() {
    const size_t start = pos_;
    auto digits = [&] {
      while (pos_ < src_.size() &&
             (IsDigit(src_[pos_]) ||
              (src_[pos_] == '_' && pos_ + 1 < src_.size() && IsDigit(src_[pos_ + 1])))) {
        ++pos_;
      }
    };
    digits();
    bool is_float = false;
    // `x.0.1` is two subscripts, not a float (jinja2's lookbehind).
    const bool after_dot = start > 0 && src_[start - 1] == '.';
    if (!after_dot && pos_ + 1 < src_.size() && src_[pos_] == '.' && IsDigit(src_[pos_ + 1])) {
      ++pos_;
      digits();
      is_float = true;
    }
    if (!after_dot && pos_ < src_.size() && (src_[pos_] == 'e' || src_[pos_] == 'E')) {
      size_t p = pos_ + 1;
      if (p < src_.size() && (src_[p] == '+' || src_[p] == '-')) ++p;
      if (p < src_.size() && IsDigit(src_[p])) {
        pos_ = p;
        digits();
        is_float = true;
      }
    }
    std::string text = src_.substr(start, pos_ - start);
    text.erase(std::remove(text.begin(), text.end(), '_'), text.end());
    Emit(is_float ? TokenKind::kFloat : TokenKind::kInt, std::move(text), start);
  }

  // A quoted literal, unescaped the way Python's "unicode-escape" codec does.
  absl::Status LexString() {
    const size_t start = pos_;
    const char quote = src_[pos_++];
    std::string value;
    while (true) {
      if (pos_ >= src_.size()) return Error(start, "unterminated string literal");
      const char c = src_[pos_++];
      if (c == quote) break;
      if (c != '\\') {
        value.push_back(c);
        continue;
      }
      if (pos_ >= src_.size()) return Error(start, "unterminated string literal");
      const char e = src_[pos_++];
      switch (e) {
        case '\n':
          break;  // line continuation
        case '\\':
        case '\'':
        case '"':
          value.push_back(e);
          break;
        case 'n':
          value.push_back('\n');
          break;
        case 't':
          value.push_back('\t');
          break;
        case 'r':
          value.push_back('\r');
          break;
        case 'a':
          value.push_back('\a');
          break;
        case 'b':
          value.push_back('\b');
          break;
        case 'f':
          value.push_back('\f');
          break;
        case 'v':
          value.push_back('\v');
          break;
        case 'x':
        case 'u':
        case 'U': {
          const int n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          uint32_t cp = 0;
          for (int k = 0; k < n; ++k, ++pos_) {
            const int d = pos_ < src_.size() ? HexDigit(src_[pos_]) : -1;
            if (d < 0) return Error(start, StrCat("truncated \\", std::string(1, e), " escape"));
            cp = cp * 16 + static_cast<uint32_t>(d);
          }
          if (cp > 0x10FFFF) return Error(start, "illegal Unicode character in escape");
          utf8::AppendCodepoint(cp, &value);
          break;
        }
        default:
          if (e >= '0' && e <= '7') {  // up to three octal digits
            uint32_t cp = static_cast<uint32_t>(e - '0');
            for (int k = 0; k < 2 && pos_ < src_.size() && src_[pos_] >= '0' && src_[pos_] <= '7';
                 ++k) {
              cp = cp * 8 + static_cast<uint32_t>(src_[pos_++] - '0');
            }
            utf8::AppendCodepoint(cp, &value);
          } else {  // an unknown escape stays as written
            value.push_back('\\');
            value.push_back(e);
          }
      }
    }
    Emit(TokenKind::kString, std::move(value), start);
    return absl::OkStatus();
  }

  absl::Status LexOperator(std::vector<char>* brackets) {
    static constexpr std::string_view kTwo[] = {"//", "**", "==", "!=", ">=", "<="};
    for (std::string_view op : kTwo) {
      if (src_.compare(pos_, 2, op) == 0) {
        Emit(TokenKind::kOperator, std::string(op), pos_);
        pos_ += 2;
        return absl::OkStatus();
      }
    }
    const char c = src_[pos_];
    if (std::string_view("+-*/%~=.:|,;()[]{}<>").find(c) == std::string_view::npos) {
      return Error(pos_, StrCat("unexpected character '", std::string(1, c), "'"));
    }
    if (c == '(' || c == '[' || c == '{') {
      brackets->push_back(c == '(' ? ')' : c == '[' ? ']' : '}');
    }
    if (c == ')' || c == ']' || c == '}') {
      if (brackets->empty() || brackets->back() != c) {
        return Error(pos_, StrCat("unexpected '", std::string(1, c), "'"));
      }
      brackets->pop_back();
    }
    Emit(TokenKind::kOperator, std::string(1, c), pos_);
    ++pos_;
    return absl::OkStatus();
  }

  std::string src_;
  std::vector<size_t> newlines_;  // offsets of every '\n' in src_, ascending
  size_t pos_ = 0;
  bool line_starting_ = true;  // the last thing consumed ended a line (or nothing was)
  std::vector<Token> tokens_;
};

}  // namespace

absl::StatusOr<std::vector<Token>> Tokenize(std::string_view source) { return Lexer(source).Run(); }

}  // namespace tandem::tokenizer::jinja
