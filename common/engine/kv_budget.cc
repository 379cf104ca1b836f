#include "common/engine/kv_budget.h"

#include "common/util/strings.h"

namespace tandem::engine {

namespace {

std::string MiB(int64_t bytes) { return StrCat(bytes >> 20, " MiB"); }

}  // namespace

absl::StatusOr<int64_t> KvBudgetBytes(const kernels::DeviceMemory& m, double utilization,
                                      int64_t reserved) {
  if (!(utilization > 0 && utilization <= 1)) {
    return absl::InvalidArgumentError("gpu_memory_utilization: must be in (0, 1]");
  }
  const int64_t allowed = static_cast<int64_t>(utilization * static_cast<double>(m.total_bytes));
  const int64_t budget = allowed - m.own_bytes - reserved;
  if (budget <= 0) {
    return absl::ResourceExhaustedError(StrCat(
        "gpu_memory_utilization: ", utilization, " of ", MiB(m.total_bytes), " is ", MiB(allowed),
        ", which this process's ", MiB(m.own_bytes), " (weights, buffers) and ", MiB(reserved),
        " of workspace leave no room for a KV cache"));
  }
  // What this process is still to take must be free now.
  if (budget + reserved > m.free_bytes) {
    return absl::ResourceExhaustedError(
        StrCat("gpu_memory_utilization: ", utilization, " of ", MiB(m.total_bytes),
               " leaves this process ", MiB(budget + reserved), " more to take, but only ",
               MiB(m.free_bytes), " is free (", MiB(m.total_bytes - m.free_bytes - m.own_bytes),
               " is held by other processes and the CUDA context); lower it"));
  }
  return budget;
}

}  // namespace tandem::engine
