#include "kernels/backend_factory.h"

#include "common/util/strings.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/vec_math.h"
#if TANDEM_HAVE_CUDA
#include "kernels/cuda/cuda_backend.h"
#endif

namespace tandem::kernels {

std::vector<std::string> DeviceNames() { return {"cpu", "cpu-fence", "cuda"}; }

CpuMath DefaultCpuMath() { return HaveAvx2Fma() ? CpuMath::kFast : CpuMath::kExact; }

bool CudaBuilt() { return TANDEM_HAVE_CUDA != 0; }

absl::StatusOr<std::unique_ptr<Backend>> MakeBackend(const BackendOptions& o) {
  if (o.device == "cpu" || o.device == "cpu-fence") {
    return std::unique_ptr<Backend>(new CpuBackend(
        {.num_threads = o.num_threads, .fence = o.device == "cpu-fence", .math = o.cpu_math}));
  }
  if (o.device == "cuda") {
#if TANDEM_HAVE_CUDA
    auto b = cuda::CudaBackend::Create({.gpu = o.gpu, .batch_invariant = o.batch_invariant});
    if (!b.ok()) return b.status();
    return std::unique_ptr<Backend>(*std::move(b));
#else
    return absl::UnimplementedError(
        "device: this build has no CUDA backend (nvcc was not found when it was configured); use "
        "--device cpu");
#endif
  }
  return absl::InvalidArgumentError(
      StrCat("device: '", o.device, "' is not one of ", Join(DeviceNames(), ", ")));
}

}  // namespace tandem::kernels
