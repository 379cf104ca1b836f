// Where tests find the default model and committed test data.
#ifndef TANDEM_TESTS_TEST_PATHS_H_
#define TANDEM_TESTS_TEST_PATHS_H_

#include <cstdlib>
#include <string>

namespace tandem::testing {

// $TANDEM_MODEL, else models/smollm2-135m-instruct-q4_1.gguf in the source tree
// (scripts/fetch-model.sh puts it there; tests fail, not skip, without it).
inline std::string DefaultModelPath() {
  if (const char* m = std::getenv("TANDEM_MODEL")) return m;
  return std::string(TANDEM_SOURCE_DIR) + "/models/smollm2-135m-instruct-q4_1.gguf";
}

// The backend the engine and cluster tests compute on: $TANDEM_TEST_DEVICE, else
// "cpu". CTest runs the engine and cluster suites a second time on "cpu-fence".
inline std::string TestDevice() {
  if (const char* d = std::getenv("TANDEM_TEST_DEVICE")) return d;
  return "cpu";
}

inline std::string TestDataPath(const std::string& name) {
  return std::string(TANDEM_SOURCE_DIR) + "/tests/data/" + name;
}

}  // namespace tandem::testing

#endif  // TANDEM_TESTS_TEST_PATHS_H_
