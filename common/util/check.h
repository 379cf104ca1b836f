// TANDEM_CHECK: the one way a broken internal invariant stops the process.
// Bad input never reaches it: input errors are absl::Status values.
#ifndef TANDEM_COMMON_UTIL_CHECK_H_
#define TANDEM_COMMON_UTIL_CHECK_H_

#include <cstdio>
#include <cstdlib>

#define TANDEM_CHECK(cond)                                                          \
  do {                                                                              \
    if (!(cond)) {                                                                  \
      std::fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                 \
    }                                                                               \
  } while (0)

#endif  // TANDEM_COMMON_UTIL_CHECK_H_
