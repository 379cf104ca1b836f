// A backend factory for tests that inject faults: it builds the CPU backend (fenced
// when the suite runs on "cpu-fence") and leaves its address in *backend, so the test
// can call InjectFault on the backend an engine owns.
#ifndef TANDEM_KERNELS_TESTING_FAULTABLE_BACKEND_H_
#define TANDEM_KERNELS_TESTING_FAULTABLE_BACKEND_H_

#include <functional>
#include <memory>

#include "absl/status/statusor.h"
#include "kernels/cpu/cpu_backend.h"
#include "tests/test_paths.h"

namespace tandem::kernels::testing {

inline std::function<absl::StatusOr<std::unique_ptr<Backend>>()> FaultableBackend(
    CpuBackend** backend, int num_threads) {
  return [backend, num_threads]() -> absl::StatusOr<std::unique_ptr<Backend>> {
    auto b = std::make_unique<CpuBackend>(CpuBackendOptions{
        .num_threads = num_threads, .fence = ::tandem::testing::TestDevice() == "cpu-fence"});
    *backend = b.get();
    return std::unique_ptr<Backend>(std::move(b));
  };
}

}  // namespace tandem::kernels::testing

#endif  // TANDEM_KERNELS_TESTING_FAULTABLE_BACKEND_H_
