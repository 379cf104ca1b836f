#include "common/tokenizer/jinja/template.h"

#include "absl/status/status.h"
#include "common/tokenizer/jinja/interpreter.h"
#include "common/tokenizer/jinja/parser.h"
#include "common/util/status_macros.h"
#include "common/util/strings.h"

namespace tandem::tokenizer::jinja {

absl::StatusOr<Template> Template::Parse(std::string_view source, const Limits& limits) {
  if (source.size() > limits.max_template_bytes) {
    return absl::InvalidArgumentError(StrCat("the template is ", source.size(),
                                             " bytes, more than the limit of ",
                                             limits.max_template_bytes));
  }
  ASSIGN_OR_RETURN(std::vector<Stmt> program, jinja::Parse(source, limits.max_nesting));
  return Template(std::make_shared<const std::vector<Stmt>>(std::move(program)));
}

absl::StatusOr<std::string> Template::Render(const ValueDict& variables,
                                             const Limits& limits) const {
  return Interpret(*program_, variables, limits);
}

}  // namespace tandem::tokenizer::jinja
