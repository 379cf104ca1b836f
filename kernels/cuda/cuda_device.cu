#include <cuda_runtime.h>

#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "kernels/cuda/cuda_device.h"
#include "kernels/cuda/cuda_status.h"

namespace tandem::kernels::cuda {

namespace {

__global__ void AxpyKernel(int n, float a, const float* x, float* y) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}

}  // namespace

absl::StatusOr<int> DeviceCount() {
  int n = 0;
  TANDEM_CUDA_OK(cudaGetDeviceCount(&n));
  if (n == 0) return absl::UnavailableError("no CUDA device");
  return n;
}

absl::StatusOr<std::string> DeviceName(int index) {
  cudaDeviceProp prop;
  TANDEM_CUDA_OK(cudaGetDeviceProperties(&prop, index));
  return absl::StrCat(prop.name, " (sm_", prop.major, prop.minor, ", ", prop.totalGlobalMem >> 30,
                      " GiB)");
}

absl::Status SmokeTest(int n) {
  std::vector<float> x(n), y(n), out(n);
  for (int i = 0; i < n; ++i) {
    x[i] = static_cast<float>(i % 97) - 48.0f;
    y[i] = static_cast<float>(i % 13);
  }
  float* dx = nullptr;
  float* dy = nullptr;
  auto run = [&]() -> absl::Status {
    const size_t bytes = n * sizeof(float);
    TANDEM_CUDA_OK(cudaMalloc(&dx, bytes));
    TANDEM_CUDA_OK(cudaMalloc(&dy, bytes));
    TANDEM_CUDA_OK(cudaMemcpy(dx, x.data(), bytes, cudaMemcpyHostToDevice));
    TANDEM_CUDA_OK(cudaMemcpy(dy, y.data(), bytes, cudaMemcpyHostToDevice));
    AxpyKernel<<<(n + 255) / 256, 256>>>(n, 2.0f, dx, dy);
    TANDEM_CUDA_OK(cudaGetLastError());
    TANDEM_CUDA_OK(cudaMemcpy(out.data(), dy, bytes, cudaMemcpyDeviceToHost));
    return absl::OkStatus();
  };
  absl::Status st = run();
  cudaFree(dx);
  cudaFree(dy);
  if (!st.ok()) return st;
  for (int i = 0; i < n; ++i) {
    if (out[i] != 2.0f * x[i] + y[i]) {
      return absl::InternalError(absl::StrCat("axpy mismatch at ", i, ": ", out[i]));
    }
  }
  return absl::OkStatus();
}

}  // namespace tandem::kernels::cuda
