// Interpreter: renders a parsed template by walking its syntax tree.
//
// Semantics are jinja2's: undefined names render as "" and are false, but reading an
// attribute of an undefined, calling it or doing arithmetic with it is an error (as in
// jinja2's default Undefined); `for` bodies and macros get their own scope, so a `set`
// inside them is invisible outside (which is why `namespace()` exists); `raise_exception(msg)`
// fails the render with exactly `msg`. The template can read only `variables` and the
// builtins (builtins.h): nothing reaches files, the clock or the environment.
// Every step is counted against `limits` (budget.h). Other errors are InvalidArgument
// naming the line and column. A render owns all its state; `program` is only read, so
// renders may run concurrently.
#ifndef TANDEM_COMMON_TOKENIZER_JINJA_INTERPRETER_H_
#define TANDEM_COMMON_TOKENIZER_JINJA_INTERPRETER_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/tokenizer/jinja/ast.h"
#include "common/tokenizer/jinja/budget.h"
#include "common/tokenizer/jinja/value.h"

namespace tandem::tokenizer::jinja {

absl::StatusOr<std::string> Interpret(const std::vector<Stmt>& program, const ValueDict& variables,
                                      const Limits& limits);

}  // namespace tandem::tokenizer::jinja

#endif  // TANDEM_COMMON_TOKENIZER_JINJA_INTERPRETER_H_
