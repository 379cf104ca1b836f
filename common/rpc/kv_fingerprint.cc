#include "common/rpc/kv_fingerprint.h"

#include <string>
#include <string_view>

#include "common/util/strings.h"

namespace tandem::rpc {

absl::Status CheckFingerprint(const v1::KvLayoutFingerprint& ours,
                              const v1::KvLayoutFingerprint& theirs, std::string_view here,
                              std::string_view there) {
  auto differ = [&](std::string_view field, const auto& a, const auto& b) {
    return absl::FailedPreconditionError(
        StrCat("KV layout mismatch: ", field, " is ", a, " ", here, " and ", b, " ", there));
  };
  if (ours.model_hash() != theirs.model_hash())
    return differ("model_hash", ours.model_hash(), theirs.model_hash());
  if (ours.dtype() != theirs.dtype())
    return differ("dtype", v1::KvDtype_Name(ours.dtype()), v1::KvDtype_Name(theirs.dtype()));
  if (ours.element_order() != theirs.element_order()) {
    return differ("element_order", v1::KvElementOrder_Name(ours.element_order()),
                  v1::KvElementOrder_Name(theirs.element_order()));
  }
  if (ours.block_size() != theirs.block_size())
    return differ("block_size", ours.block_size(), theirs.block_size());
  if (ours.num_layers() != theirs.num_layers())
    return differ("num_layers", ours.num_layers(), theirs.num_layers());
  if (ours.num_kv_heads() != theirs.num_kv_heads())
    return differ("num_kv_heads", ours.num_kv_heads(), theirs.num_kv_heads());
  if (ours.head_dim() != theirs.head_dim())
    return differ("head_dim", ours.head_dim(), theirs.head_dim());
  auto math = [](const v1::KvLayoutFingerprint& f) {
    return f.cpu_math().empty() ? std::string("exact") : f.cpu_math();
  };
  if (math(ours) != math(theirs)) return differ("cpu_math", math(ours), math(theirs));
  return absl::OkStatus();
}

}  // namespace tandem::rpc
