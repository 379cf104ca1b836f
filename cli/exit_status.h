// How a command reports a failure: "error: <message>" on stderr, exit code 1.
#ifndef TANDEM_CLI_EXIT_STATUS_H_
#define TANDEM_CLI_EXIT_STATUS_H_

#include <cstdio>
#include <string>

#include "absl/status/status.h"

namespace tandem::cli {

inline int Fail(const absl::Status& status) {
  std::fprintf(stderr, "error: %s\n", std::string(status.message()).c_str());
  return 1;
}

}  // namespace tandem::cli

#endif  // TANDEM_CLI_EXIT_STATUS_H_
