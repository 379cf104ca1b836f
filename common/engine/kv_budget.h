// KvBudgetBytes: how many bytes the KV pool gets under --gpu-memory-utilization, with
// vLLM's meaning — the fraction of the device's total memory this process may hold,
// weights, activations and KV together — so that several workers can share one GPU
// (a prefill and a decode worker of 0.45 each) without one's memory shrinking the
// other's share.
//
//   budget = utilization × total − own − reserved
//     own       what this process's backend holds already (weights, buffers, scratch;
//               DeviceMemory::own_bytes), whatever other processes hold
//     reserved  what it will still allocate besides the pool (executor workspaces)
//
// The CUDA context itself (a few hundred MiB per process) is outside the fraction, as
// with vLLM: leave headroom for it. Pure; thread-safe.
#ifndef TANDEM_COMMON_ENGINE_KV_BUDGET_H_
#define TANDEM_COMMON_ENGINE_KV_BUDGET_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "kernels/backend.h"

namespace tandem::engine {

// InvalidArgument for a fraction outside (0, 1]; ResourceExhausted when the fraction
// leaves nothing for the pool, or when the device has not got that much free (other
// processes hold it), with the figures in the message.
absl::StatusOr<int64_t> KvBudgetBytes(const kernels::DeviceMemory& memory, double utilization,
                                      int64_t reserved);

}  // namespace tandem::engine

#endif  // TANDEM_COMMON_ENGINE_KV_BUDGET_H_
