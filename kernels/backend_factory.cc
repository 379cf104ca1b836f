#include "kernels/backend_factory.h"

#include "common/util/strings.h"
#include "kernels/cpu/cpu_backend.h"

namespace tandem::kernels {

absl::StatusOr<std::unique_ptr<Backend>> MakeBackend(const BackendOptions& o) {
  if (o.device == "cpu" || o.device == "cpu-fence") {
    return std::unique_ptr<Backend>(
        new CpuBackend({.num_threads = o.num_threads, .fence = o.device == "cpu-fence"}));
  }
  if (o.device == "cuda") {
    return absl::UnimplementedError("device: the CUDA backend is not built yet; use --device cpu");
  }
  return absl::InvalidArgumentError(
      StrCat("device: '", o.device, "' is not one of cpu, cpu-fence, cuda"));
}

}  // namespace tandem::kernels
