#include "kernels/cuda/cuda_device.h"

#include "gtest/gtest.h"

namespace tandem::kernels::cuda {
namespace {

TEST(CudaDevice, AxpyKernelMatchesHost) {
  auto n = DeviceCount();
  if (!n.ok()) GTEST_SKIP() << "no CUDA device: " << n.status();
  auto name = DeviceName(0);
  ASSERT_TRUE(name.ok()) << name.status();
  std::printf("device 0: %s\n", name->c_str());
  for (int size : {1, 17, 1000, 1 << 20}) {
    EXPECT_TRUE(SmokeTest(size).ok()) << "n=" << size;
  }
}

}  // namespace
}  // namespace tandem::kernels::cuda
