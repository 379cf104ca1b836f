// Builtins: the filters, tests, methods and global functions a template may call.
//
// jinja2's filters (with transformers' `tojson`, which does not escape HTML) and
// tests, Python's methods on str and dict, and the globals `range`, `namespace` and
// `dict` — as far as chat templates use them; builtins.cc lists them all. As in
// jinja2's ImmutableSandboxedEnvironment, methods that would mutate a list or dict are
// refused. Strings built here are checked against the budget's size limit before they
// are built. Errors carry no source location (the interpreter adds it); a name that is
// not a builtin is NotFound. Pure apart from spending the budget.
#ifndef TANDEM_COMMON_TOKENIZER_JINJA_BUILTINS_H_
#define TANDEM_COMMON_TOKENIZER_JINJA_BUILTINS_H_

#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "common/tokenizer/jinja/budget.h"
#include "common/tokenizer/jinja/value.h"

namespace tandem::tokenizer::jinja {

struct CallArgs {
  std::vector<Value> positional;
  ValueDict keyword;
  // The argument at `index`, else the keyword `name`, else null.
  const Value* Get(size_t index, std::string_view name) const;
};

// obj.name and obj["name"] alike: a dict entry or namespace attribute, else an
// undefined saying what was missing ("'dict object' has no attribute 'x'").
Value GetAttribute(const Value& obj, std::string_view name);
// Python's iter(v) as a list: list items, dict keys, a string's characters; undefined
// is empty. An error for what Python cannot iterate.
absl::StatusOr<ValueList> Iterate(const Value& v, Budget* budget);

absl::StatusOr<Value> ApplyFilter(std::string_view name, const Value& subject, const CallArgs& args,
                                  Budget* budget);
absl::StatusOr<bool> ApplyTest(std::string_view name, const Value& subject, const CallArgs& args,
                               Budget* budget);
absl::StatusOr<Value> CallMethod(const Value& self, std::string_view name, const CallArgs& args,
                                 Budget* budget);
bool IsGlobalFunction(std::string_view name);
absl::StatusOr<Value> CallGlobalFunction(std::string_view name, const CallArgs& args,
                                         Budget* budget);

}  // namespace tandem::tokenizer::jinja

#endif  // TANDEM_COMMON_TOKENIZER_JINJA_BUILTINS_H_
