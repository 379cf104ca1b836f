// CUDA device discovery and a smoke kernel that proves the toolchain end to end.
//
// Every function reports CUDA errors as absl::Status (Unavailable when no device or
// driver is present), never aborts. Thread-safe.
#ifndef TANDEM_KERNELS_CUDA_CUDA_DEVICE_H_
#define TANDEM_KERNELS_CUDA_CUDA_DEVICE_H_

#include <string>

#include "absl/status/statusor.h"

namespace tandem::kernels::cuda {

// Number of usable CUDA devices; Unavailable if there is no driver or device.
absl::StatusOr<int> DeviceCount();

// "NVIDIA H200 (sm_90, 139 GiB)" for device `index`.
absl::StatusOr<std::string> DeviceName(int index);

// Runs a kernel computing y[i] = a * x[i] + y[i] over n elements on device 0 and
// checks the result on the host. OK only if every element is right.
absl::Status SmokeTest(int n);

}  // namespace tandem::kernels::cuda

#endif  // TANDEM_KERNELS_CUDA_CUDA_DEVICE_H_
