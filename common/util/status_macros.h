// Early-return helpers for absl::Status / absl::StatusOr.
//
//   RETURN_IF_ERROR(expr);          // returns expr's status if it is not OK
//   ASSIGN_OR_RETURN(auto x, expr); // x = *expr, or returns expr.status()
#ifndef TANDEM_COMMON_UTIL_STATUS_MACROS_H_
#define TANDEM_COMMON_UTIL_STATUS_MACROS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define TANDEM_CONCAT_INNER_(a, b) a##b
#define TANDEM_CONCAT_(a, b) TANDEM_CONCAT_INNER_(a, b)

#define RETURN_IF_ERROR(expr)                        \
  do {                                               \
    const ::absl::Status tandem_status_ = (expr);    \
    if (!tandem_status_.ok()) return tandem_status_; \
  } while (0)

#define ASSIGN_OR_RETURN(lhs, expr) \
  TANDEM_ASSIGN_OR_RETURN_IMPL_(TANDEM_CONCAT_(tandem_statusor_, __LINE__), lhs, expr)

#define TANDEM_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, expr) \
  auto statusor = (expr);                                  \
  if (!statusor.ok()) return std::move(statusor).status(); \
  lhs = *std::move(statusor)

#endif  // TANDEM_COMMON_UTIL_STATUS_MACROS_H_
