// absl::Status ↔ grpc::Status. The codes share their numbering; messages pass through.
// Only service and client files use this: everything below them speaks absl::Status.
#ifndef TANDEM_COMMON_RPC_STATUS_CONVERT_H_
#define TANDEM_COMMON_RPC_STATUS_CONVERT_H_

#include <grpcpp/support/status.h>

#include <string>
#include <string_view>

#include "absl/status/status.h"

namespace tandem::rpc {

inline grpc::Status ToGrpc(const absl::Status& s) {
  if (s.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()), std::string(s.message()));
}

inline absl::Status FromGrpc(const grpc::Status& s) {
  if (s.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
}

// The same code, the message prefixed with `context` ("prefill on host:port").
inline absl::Status FromGrpc(const grpc::Status& s, std::string_view context) {
  if (s.ok()) return absl::OkStatus();
  std::string message(context);
  message += ": ";
  message += s.error_message();
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()), message);
}

// "INVALID_ARGUMENT", "UNAVAILABLE", ...
inline std::string CodeName(grpc::StatusCode code) {
  return absl::StatusCodeToString(static_cast<absl::StatusCode>(code));
}

}  // namespace tandem::rpc

#endif  // TANDEM_COMMON_RPC_STATUS_CONVERT_H_
