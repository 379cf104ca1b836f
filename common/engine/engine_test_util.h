// Test helpers shared by the engine tests.
#ifndef TANDEM_COMMON_ENGINE_ENGINE_TEST_UTIL_H_
#define TANDEM_COMMON_ENGINE_ENGINE_TEST_UTIL_H_

#include <vector>

#include "common/engine/engine.h"
#include "gtest/gtest.h"

namespace tandem::engine {

// One step's events; an event carrying an error (a failed pass) fails the test.
inline std::vector<TokenEvent> StepOk(Engine& e) {
  std::vector<TokenEvent> events = e.Step();
  for (const TokenEvent& ev : events) EXPECT_TRUE(ev.error.ok()) << ev.error;
  return events;
}

}  // namespace tandem::engine

#endif  // TANDEM_COMMON_ENGINE_ENGINE_TEST_UTIL_H_
