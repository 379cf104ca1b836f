#include "kernels/kv_storage.h"

#include "common/util/status_macros.h"
#include "common/util/strings.h"

namespace tandem::kernels {

absl::StatusOr<std::unique_ptr<KvStorage>> KvStorage::Create(Backend* backend,
                                                             const kv::KvLayout& layout,
                                                             int64_t budget_bytes) {
  RETURN_IF_ERROR(layout.Validate());
  const int64_t n = budget_bytes / layout.BlockBytes();
  if (n < 1) {
    return absl::InvalidArgumentError(StrCat("KV budget of ", budget_bytes,
                                             " bytes is smaller than one block (",
                                             layout.BlockBytes(), " bytes)"));
  }
  if (n > INT32_MAX) return absl::InvalidArgumentError("KV budget too large");
  ASSIGN_OR_RETURN(std::unique_ptr<Buffer> buffer,
                   backend->Allocate(MemoryKind::kKv, n * layout.BlockBytes()));
  return std::unique_ptr<KvStorage>(
      new KvStorage(backend, layout, static_cast<int32_t>(n), std::move(buffer)));
}

absl::Status KvStorage::Check(std::span<const int32_t> blocks, int32_t layer) const {
  if (layer < 0 || layer >= layout_.n_layers) {
    return absl::InvalidArgumentError(
        StrCat("layer: ", layer, " outside [0, ", layout_.n_layers, ")"));
  }
  for (int32_t b : blocks) {
    if (b < 0 || b >= num_blocks_) {
      return absl::InvalidArgumentError(StrCat("block id ", b, " outside [0, ", num_blocks_, ")"));
    }
  }
  return absl::OkStatus();
}

absl::Status KvStorage::ReadLayer(std::span<const int32_t> blocks, int32_t layer,
                                  uint8_t* out) const {
  RETURN_IF_ERROR(Check(blocks, layer));
  const int64_t n = layout_.LayerBytes();
  for (size_t i = 0; i < blocks.size(); ++i) {
    RETURN_IF_ERROR(backend_->ReadNow(*buffer_, LayerOffset(blocks[i], layer), n, out + i * n));
  }
  return absl::OkStatus();
}

absl::Status KvStorage::WriteLayer(std::span<const int32_t> blocks, int32_t layer,
                                   const uint8_t* in) {
  RETURN_IF_ERROR(Check(blocks, layer));
  const int64_t n = layout_.LayerBytes();
  for (size_t i = 0; i < blocks.size(); ++i) {
    backend_->CopyToDevice(in + i * n, *buffer_, LayerOffset(blocks[i], layer), n);
  }
  return backend_->Synchronize();
}

absl::Status KvStorage::GatherLayer(std::span<const int32_t> blocks, int32_t layer,
                                    const Buffer& staging, int64_t offset) const {
  RETURN_IF_ERROR(Check(blocks, layer));
  return MoveRuns(blocks, layer, staging, offset, /*to_staging=*/true);
}

absl::Status KvStorage::ScatterLayer(std::span<const int32_t> blocks, int32_t layer,
                                     const Buffer& staging, int64_t offset) {
  RETURN_IF_ERROR(Check(blocks, layer));
  return MoveRuns(blocks, layer, staging, offset, /*to_staging=*/false);
}

absl::Status KvStorage::MoveRuns(std::span<const int32_t> blocks, int32_t layer,
                                 const Buffer& staging, int64_t offset, bool to_staging) const {
  const int64_t n = layout_.LayerBytes();
  for (size_t i = 0; i < blocks.size();) {
    size_t j = i + 1;
    while (j < blocks.size() && blocks[j] == blocks[j - 1] + 1) ++j;
    // Blocks i..j-1 are consecutive: one layer of each is `n` bytes every BlockBytes().
    Copy2D c{.width = n, .rows = static_cast<int64_t>(j - i)};
    const int64_t cache_offset = LayerOffset(blocks[i], layer);
    const int64_t staging_offset = offset + static_cast<int64_t>(i) * n;
    if (to_staging) {
      c.src = buffer_.get(), c.src_offset = cache_offset, c.src_pitch = layout_.BlockBytes();
      c.dst = &staging, c.dst_offset = staging_offset, c.dst_pitch = n;
    } else {
      c.src = &staging, c.src_offset = staging_offset, c.src_pitch = n;
      c.dst = buffer_.get(), c.dst_offset = cache_offset, c.dst_pitch = layout_.BlockBytes();
    }
    RETURN_IF_ERROR(backend_->CopyNow(c));
    i = j;
  }
  return absl::OkStatus();
}

}  // namespace tandem::kernels
