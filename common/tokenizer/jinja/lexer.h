// Lexer: splits Jinja source into text and the tokens inside `{{ }}` / `{% %}`.
//
// Whitespace handling is jinja2's with trim_blocks and lstrip_blocks on (as Hugging
// Face renders chat templates) and keep_trailing_newline off:
//   - `{%-`, `{{-`, `{#-` strip all whitespace before the tag; `-%}`, `-}}`, `-#}` after it;
//   - a newline right after `%}` or `#}` is dropped (trim_blocks), unless `+%}`;
//   - spaces and tabs from the start of a line up to `{%` or `{#` are dropped
//     (lstrip_blocks), unless `{%+`;
//   - line endings become "\n" and one final newline of the source is dropped.
// Comments disappear here; string literals arrive unescaped (Python escapes).
// Errors are InvalidArgument naming the line and column. Pure; thread-safe.
#ifndef TANDEM_COMMON_TOKENIZER_JINJA_LEXER_H_
#define TANDEM_COMMON_TOKENIZER_JINJA_LEXER_H_

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace tandem::tokenizer::jinja {

enum class TokenKind {
  kText,       // template text, output as is
  kExprBegin,  // {{
  kExprEnd,    // }}
  kStmtBegin,  // {%
  kStmtEnd,    // %}
  kName,       // identifier or keyword
  kString,     // text holds the unescaped value
  kInt,        // text holds the digits
  kFloat,      // text holds the literal
  kOperator,   // + - * / // % ** ~ == != < <= > >= = . : | , ( ) [ ] { }
  kEnd,        // end of source
};

struct Token {
  TokenKind kind;
  std::string text;
  int line = 1;    // 1-based, in the source
  int column = 1;  // 1-based, in bytes
};

absl::StatusOr<std::vector<Token>> Tokenize(std::string_view source);

}  // namespace tandem::tokenizer::jinja

#endif  // TANDEM_COMMON_TOKENIZER_JINJA_LEXER_H_
