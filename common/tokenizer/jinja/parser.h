// Parser: Jinja source to a syntax tree (ast.h), by recursive descent.
//
// The grammar and operator precedence are jinja2's (parser.py): conditional
// expressions, or / and / not, comparisons and `in`, + -, ~, * / // %, **, unary
// minus, then postfix `.attr`, `[i]`, `[a:b:c]`, calls, `| filter` and `is test`.
// Statements: if/elif/else, for (with `if` filter and else), set (plain, tuple,
// namespace attribute, block), macro, break/continue, generation. Tags jinja2 knows
// but a sandboxed chat template has no use for (include, import, extends, block, call,
// filter, with, ...) are Unimplemented; anything else malformed is InvalidArgument
// naming the line and column. Nesting deeper than `max_depth` is an error, which keeps
// every later walk over the tree shallow. Pure; thread-safe.
#ifndef TANDEM_COMMON_TOKENIZER_JINJA_PARSER_H_
#define TANDEM_COMMON_TOKENIZER_JINJA_PARSER_H_

#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "common/tokenizer/jinja/ast.h"

namespace tandem::tokenizer::jinja {

absl::StatusOr<std::vector<Stmt>> Parse(std::string_view source, int max_depth);

}  // namespace tandem::tokenizer::jinja

#endif  // TANDEM_COMMON_TOKENIZER_JINJA_PARSER_H_
