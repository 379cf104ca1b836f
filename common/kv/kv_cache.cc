#include "common/kv/kv_cache.h"

#include "absl/status/status.h"
#include "common/util/strings.h"

namespace tandem::kv {

KvCache::KvCache(const KvLayout& layout, int32_t num_blocks)
    : layout_(layout),
      num_blocks_(num_blocks),
      data_(new float[static_cast<size_t>(num_blocks) * layout.BlockElements()]()) {}

absl::StatusOr<std::unique_ptr<KvCache>> KvCache::Create(const KvLayout& layout,
                                                         int64_t budget_bytes) {
  if (layout.n_layers <= 0 || layout.n_kv_heads <= 0 || layout.head_dim <= 0 ||
      layout.block_size <= 0) {
    return absl::InvalidArgumentError("KV layout dimensions must be positive");
  }
  const int64_t n = budget_bytes / layout.BlockBytes();
  if (n < 1) {
    return absl::InvalidArgumentError(StrCat("KV budget of ", budget_bytes,
                                             " bytes is smaller than one block (",
                                             layout.BlockBytes(), " bytes)"));
  }
  if (n > INT32_MAX) return absl::InvalidArgumentError("KV budget too large");
  return std::unique_ptr<KvCache>(new KvCache(layout, static_cast<int32_t>(n)));
}

}  // namespace tandem::kv
