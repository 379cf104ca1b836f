// MakeBackend: the Backend a process computes on, by device name (--device).
//   "cpu"        host memory, the batch-invariant SIMD kernels (the default)
//   "cpu-fence"  the same kernels behind the fence (cpu_backend.h): for tests
//   "cuda"       an NVIDIA GPU: not built yet (the CUDA backend issue)
#ifndef TANDEM_KERNELS_BACKEND_FACTORY_H_
#define TANDEM_KERNELS_BACKEND_FACTORY_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/backend.h"

namespace tandem::kernels {

// Every name MakeBackend knows, for flags and messages.
std::vector<std::string> DeviceNames();

struct BackendOptions {
  std::string device = "cpu";
  int num_threads = 0;  // CPU compute threads (0: every core)
};

// InvalidArgument naming the device for an unknown one; Unimplemented for "cuda".
absl::StatusOr<std::unique_ptr<Backend>> MakeBackend(const BackendOptions& options);

}  // namespace tandem::kernels

#endif  // TANDEM_KERNELS_BACKEND_FACTORY_H_
