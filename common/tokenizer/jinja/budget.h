// Limits and Budget: the bounds that keep a hostile or broken template from running
// away. Exceeding one is a ResourceExhausted error (or InvalidArgument for a template
// too large or deep to parse), never a crash or a hang.
//
// A Budget is one render's running count of steps: every statement, expression, loop
// iteration and element of a value built, plus one step per 256 bytes copied or
// compared. It is owned by that render's interpreter; not thread-safe.
#ifndef TANDEM_COMMON_TOKENIZER_JINJA_BUDGET_H_
#define TANDEM_COMMON_TOKENIZER_JINJA_BUDGET_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "common/util/strings.h"

namespace tandem::tokenizer::jinja {

struct Limits {
  size_t max_template_bytes = 512 << 10;
  size_t max_output_bytes = 4 << 20;  // also the largest string a template may build
  int64_t max_steps = 1'000'000;
  int max_nesting = 100;     // syntax: blocks within blocks, expressions within expressions
  int max_depth = 500;       // rendering: recursion through expressions, blocks and macro calls
  int max_value_depth = 64;  // lists and dicts within each other
};

class Budget {
 public:
  explicit Budget(const Limits& limits) : limits_(limits), steps_left_(limits.max_steps) {}

  const Limits& limits() const { return limits_; }
  // Spends `units` steps; an error once the render has used more than max_steps.
  absl::Status Spend(int64_t units) {
    steps_left_ -= units;
    return Check();
  }
  absl::Status SpendBytes(size_t bytes) { return Spend(static_cast<int64_t>(bytes / 256)); }
  absl::Status Check() const {
    if (steps_left_ >= 0) return absl::OkStatus();
    return absl::ResourceExhaustedError(
        StrCat("the template ran past its budget of ", limits_.max_steps, " steps"));
  }
  // An error for a string of `bytes` before it is built.
  absl::Status CheckSize(size_t bytes) const {
    if (bytes <= limits_.max_output_bytes) return absl::OkStatus();
    return absl::ResourceExhaustedError(
        StrCat("a string of ", bytes, " bytes exceeds the limit of ", limits_.max_output_bytes));
  }
  // For Equals / Compare, which spend as they go.
  int64_t* steps_left() { return &steps_left_; }

 private:
  const Limits limits_;
  int64_t steps_left_;
};

}  // namespace tandem::tokenizer::jinja

#endif  // TANDEM_COMMON_TOKENIZER_JINJA_BUDGET_H_
