// REQUIRE_GPU(): the first line of every GPU test — skips it, saying why, where no CUDA
// device is present (CI), so GPU tests build and skip cleanly there.
#ifndef TANDEM_KERNELS_CUDA_REQUIRE_GPU_H_
#define TANDEM_KERNELS_CUDA_REQUIRE_GPU_H_

#include "gtest/gtest.h"
#include "kernels/cuda/cuda_device.h"

#define REQUIRE_GPU()                                                                         \
  do {                                                                                        \
    if (auto n = ::tandem::kernels::cuda::DeviceCount(); !n.ok()) GTEST_SKIP() << n.status(); \
  } while (0)

#endif  // TANDEM_KERNELS_CUDA_REQUIRE_GPU_H_
