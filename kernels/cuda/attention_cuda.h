// PagedAttentionCuda: kernels/cpu/attention.h's PagedAttention on a CUDA device — the
// same batch description (host spans), q / cache / out in device memory. Uploads the
// batch's row → (sequence, position) map and block tables to `scratch`, launches
// attention_kernels.cu, and reports CUDA errors as absl::Status.
//
// Not thread-safe: one DeviceScratch per stream.
#ifndef TANDEM_KERNELS_CUDA_ATTENTION_CUDA_H_
#define TANDEM_KERNELS_CUDA_ATTENTION_CUDA_H_

#include <cstdint>

#include "absl/status/status.h"
#include "common/kv/kv_layout.h"
#include "kernels/cpu/attention.h"

namespace tandem::kernels::cuda {

// Device buffers reused across calls; grown on demand, freed by the destructor.
class DeviceScratch {
 public:
  DeviceScratch() = default;
  DeviceScratch(const DeviceScratch&) = delete;
  DeviceScratch& operator=(const DeviceScratch&) = delete;
  ~DeviceScratch();
  // A device buffer of at least `bytes` for slot `i` (0..3).
  absl::StatusOr<void*> Get(int i, int64_t bytes);

 private:
  void* ptr_[4] = {};
  int64_t size_[4] = {};
};

struct AttentionTuning {
  int32_t keys_per_split = 512;  // split-K granularity for long contexts
  int32_t max_splits = 32;       // 1 turns split-K off
};

absl::Status PagedAttentionCuda(const float* q, const PagedBatch& batch,
                                const AttentionShape& shape, int32_t layer,
                                const kv::KvLayout& layout, const float* cache, float* out,
                                DeviceScratch* scratch, const AttentionTuning& tuning = {});

}  // namespace tandem::kernels::cuda

#endif  // TANDEM_KERNELS_CUDA_ATTENTION_CUDA_H_
