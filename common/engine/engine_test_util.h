// Test helpers shared by the engine tests.
#ifndef TANDEM_COMMON_ENGINE_ENGINE_TEST_UTIL_H_
#define TANDEM_COMMON_ENGINE_ENGINE_TEST_UTIL_H_

#include <vector>

#include "common/engine/engine.h"
#include "gtest/gtest.h"

namespace tandem::engine {

// One step's events, by value: a range-for over `*engine.Step()` would read a
// destroyed StatusOr. A failed step fails the test and yields no events.
inline std::vector<TokenEvent> StepOk(Engine& e) {
  auto r = e.Step();
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *std::move(r) : std::vector<TokenEvent>{};
}

}  // namespace tandem::engine

#endif  // TANDEM_COMMON_ENGINE_ENGINE_TEST_UTIL_H_
