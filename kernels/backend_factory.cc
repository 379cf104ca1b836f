#include "kernels/backend_factory.h"

#include "common/util/strings.h"
#include "kernels/cpu/cpu_backend.h"

namespace tandem::kernels {

std::vector<std::string> DeviceNames() { return {"cpu", "cpu-fence", "cuda"}; }

absl::StatusOr<std::unique_ptr<Backend>> MakeBackend(const BackendOptions& o) {
  if (o.device == "cpu" || o.device == "cpu-fence") {
    return std::unique_ptr<Backend>(
        new CpuBackend({.num_threads = o.num_threads, .fence = o.device == "cpu-fence"}));
  }
  if (o.device == "cuda") {
    return absl::UnimplementedError("device: the CUDA backend is not built yet; use --device cpu");
  }
  return absl::InvalidArgumentError(
      StrCat("device: '", o.device, "' is not one of ", Join(DeviceNames(), ", ")));
}

}  // namespace tandem::kernels
