// MakeBackend: the Backend a process computes on, by device name (--device).
//   "cpu"        host memory, the batch-invariant SIMD kernels (the default)
//   "cpu-fence"  the same kernels behind the fence (cpu_backend.h): for tests
//   "cuda"       an NVIDIA GPU (cuda/cuda_backend.h), GPU `gpu`; in builds with CUDA
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
  int num_threads = 0;                 // CPU compute threads (0: every core)
  int gpu = 0;                         // CUDA device index
  bool batch_invariant = false;        // CUDA: cuda::CudaBackendOptions::batch_invariant
  CpuMath cpu_math = CpuMath::kExact;  // CPU: --cpu-math (kernels/backend.h)
};

// Whether this build has the CUDA backend.
bool CudaBuilt();

// InvalidArgument naming the device for an unknown one; for "cuda", Unimplemented in a
// build without CUDA and Unavailable where no such GPU is present.
absl::StatusOr<std::unique_ptr<Backend>> MakeBackend(const BackendOptions& options);

}  // namespace tandem::kernels

#endif  // TANDEM_KERNELS_BACKEND_FACTORY_H_
