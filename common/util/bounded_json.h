// ParseBoundedJson: JSON text from a request or a model, parsed with its nesting bounded
// (the parser callback stops at the first value deeper than `max_depth`), keys kept in
// the order written. InvalidArgument "nests deeper than N" or "is not valid JSON"; the
// caller prefixes what the text was. Header-only: its users already link nlohmann_json.
#ifndef TANDEM_COMMON_UTIL_BOUNDED_JSON_H_
#define TANDEM_COMMON_UTIL_BOUNDED_JSON_H_

#include <stdexcept>
#include <string_view>

#include "absl/status/statusor.h"
#include "common/util/strings.h"
#include "nlohmann/json.hpp"

namespace tandem {

inline constexpr int kMaxJsonDepth = 64;

inline absl::StatusOr<nlohmann::ordered_json> ParseBoundedJson(std::string_view text,
                                                               int max_depth = kMaxJsonDepth) {
  using json = nlohmann::ordered_json;
  const json::parser_callback_t bounded = [max_depth](int depth, json::parse_event_t, json&) {
    if (depth > max_depth) throw std::length_error("nesting");
    return true;
  };
  try {
    return json::parse(text, bounded);
  } catch (const std::length_error&) {
    return absl::InvalidArgumentError(StrCat("nests deeper than ", max_depth));
  } catch (const json::exception&) {
    return absl::InvalidArgumentError("is not valid JSON");
  }
}

}  // namespace tandem

#endif  // TANDEM_COMMON_UTIL_BOUNDED_JSON_H_
