// Template: a sandboxed Jinja template, parsed once and rendered any number of times.
//
// Renders the subset of Jinja that chat templates use exactly as Python's jinja2 does
// when configured the way Hugging Face transformers configures it
// (ImmutableSandboxedEnvironment with trim_blocks and lstrip_blocks, `raise_exception`
// as a global, a `tojson` that does not escape HTML); see lexer.h, parser.h,
// interpreter.h and builtins.cc for what is supported. A template reads only the
// variables passed to Render() and spends at most its `limits` (budget.h).
//
// Errors: Parse() — InvalidArgument for malformed or oversized source (naming the line
// and column), Unimplemented for jinja2 features outside the subset. Render() —
// InvalidArgument for the template's own raise_exception(msg) (message exactly `msg`)
// and for runtime errors such as using an undefined value (naming line and column);
// ResourceExhausted when a limit is hit.
// Immutable after Parse(); Render() may be called from several threads at once.
#ifndef TANDEM_COMMON_TOKENIZER_JINJA_TEMPLATE_H_
#define TANDEM_COMMON_TOKENIZER_JINJA_TEMPLATE_H_

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "common/tokenizer/jinja/ast.h"
#include "common/tokenizer/jinja/budget.h"
#include "common/tokenizer/jinja/value.h"

namespace tandem::tokenizer::jinja {

class Template {
 public:
  static absl::StatusOr<Template> Parse(std::string_view source, const Limits& limits = {});

  // Parse() uses the template size and nesting limits, Render() the others.
  absl::StatusOr<std::string> Render(const ValueDict& variables, const Limits& limits = {}) const;

 private:
  explicit Template(std::shared_ptr<const std::vector<Stmt>> program)
      : program_(std::move(program)) {}

  // Shared so copies are cheap; macros refer into it, so it never moves.
  std::shared_ptr<const std::vector<Stmt>> program_;
};

}  // namespace tandem::tokenizer::jinja

#endif  // TANDEM_COMMON_TOKENIZER_JINJA_TEMPLATE_H_
