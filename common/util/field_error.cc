#include "common/util/field_error.h"

#include "absl/strings/cord.h"
#include "common/util/strings.h"

namespace tandem {

namespace {
constexpr char kFieldPayload[] = "tandem/field";
}  // namespace

absl::Status FieldError(std::string_view field, std::string_view why, absl::StatusCode code) {
  absl::Status st(code, StrCat(field, ": ", why));
  st.SetPayload(kFieldPayload, absl::Cord(std::string(field)));
  return st;
}

std::optional<std::string> ErrorField(const absl::Status& status) {
  const auto field = status.GetPayload(kFieldPayload);  // absl::optional on Debian
  if (!field.has_value()) return std::nullopt;
  return std::string(*field);
}

}  // namespace tandem
