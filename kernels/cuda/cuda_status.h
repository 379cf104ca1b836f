// A failed CUDA runtime call as an absl::Status, for every host file of the CUDA
// backend (cuda_device.cu, cuda_backend.cc) and the GPU KV transports
// (common/transport/gpu_transports_cuda.cc): Unavailable when there is no driver or
// device, ResourceExhausted for an allocation, Internal otherwise. Making the status
// also clears the thread's last-error slot, so a failure that is not a launch never
// resurfaces as the next launch's error.
#ifndef TANDEM_KERNELS_CUDA_CUDA_STATUS_H_
#define TANDEM_KERNELS_CUDA_CUDA_STATUS_H_

#include <cuda_runtime.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace tandem::kernels::cuda {

inline absl::Status CudaError(cudaError_t e, const char* what) {
  cudaGetLastError();
  const std::string msg = absl::StrCat("cuda: ", what, ": ", cudaGetErrorString(e));
  if (e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver || e == cudaErrorInvalidDevice) {
    return absl::UnavailableError(msg);
  }
  if (e == cudaErrorMemoryAllocation) return absl::ResourceExhaustedError(msg);
  return absl::InternalError(msg);
}

}  // namespace tandem::kernels::cuda

// Returns the CudaError of `expr` from the enclosing function when it fails.
#define TANDEM_CUDA_OK(expr)                                        \
  do {                                                              \
    if (cudaError_t tandem_e_ = (expr); tandem_e_ != cudaSuccess) { \
      return ::tandem::kernels::cuda::CudaError(tandem_e_, #expr);  \
    }                                                               \
  } while (0)

#endif  // TANDEM_KERNELS_CUDA_CUDA_STATUS_H_
