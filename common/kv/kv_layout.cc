#include "common/kv/kv_layout.h"

#include "common/util/strings.h"

namespace tandem::kv {

std::string_view KvDtypeName(KvDtype dtype) {
  switch (dtype) {
    case KvDtype::kF32:
      return "f32";
    case KvDtype::kBF16:
      return "bf16";
    case KvDtype::kF16:
      return "f16";
  }
  return "?";
}

absl::StatusOr<KvDtype> ParseKvDtype(std::string_view name) {
  for (KvDtype d : {KvDtype::kF32, KvDtype::kBF16, KvDtype::kF16}) {
    if (name == KvDtypeName(d)) return d;
  }
  return absl::InvalidArgumentError(StrCat("kv-dtype: '", name, "' is not one of f32, bf16, f16"));
}

std::string_view KvOrderName(KvOrder order) {
  switch (order) {
    case KvOrder::kKTransposed:
      return "k_transposed";
  }
  return "?";
}

absl::Status KvLayout::Validate() const {
  if (n_layers <= 0 || n_kv_heads <= 0 || head_dim <= 0 || block_size <= 0) {
    return absl::InvalidArgumentError("KV layout dimensions must be positive");
  }
  return absl::OkStatus();
}

}  // namespace tandem::kv
