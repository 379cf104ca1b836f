// FieldError: a status about one field of a request, with the field as data.
//
// The message reads "<field>: <why>" (docs/api.md, "Statuses") and the field also travels as the
// status's payload, so a front that reports it separately (the OpenAI error's `param`)
// reads ErrorField instead of parsing the message. The payload lives only inside a
// process: across gRPC a client gets the message alone.
#ifndef TANDEM_COMMON_UTIL_FIELD_ERROR_H_
#define TANDEM_COMMON_UTIL_FIELD_ERROR_H_

#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"

namespace tandem {

absl::Status FieldError(std::string_view field, std::string_view why,
                        absl::StatusCode code = absl::StatusCode::kInvalidArgument);
// The field a FieldError names; nothing for any other status.
std::optional<std::string> ErrorField(const absl::Status& status);

}  // namespace tandem

#endif  // TANDEM_COMMON_UTIL_FIELD_ERROR_H_
