// KvStorage: the bytes of the paged KV cache, in one buffer of the backend's KV
// memory, laid out as kv::KvLayout says (element type and order included).
//
// Who touches it:
//   - the backend's WriteKv / Attention ops (the engine thread's stream);
//   - WriteLayer: the engine thread only, filling blocks reserved for a prompt whose
//     K/V a prefill worker computed (the decode worker hands received payloads to its
//     engine thread);
//   - ReadLayer: any thread (a transport sending a prefill worker's finished blocks),
//     for blocks no op in flight writes;
//   - GatherLayer / ScatterLayer: device to device, between the cache and a staging
//     buffer of the same backend (a peer transport: NCCL, CUDA IPC); Gather from any
//     thread like ReadLayer, Scatter on the engine thread between steps like WriteLayer;
//   - Extent: a device address and length per block, for transports that move bytes
//     between devices (NCCL, CUDA IPC).
// Sized by a byte budget; it does not know which sequence uses which block
// (BlockManager does).
#ifndef TANDEM_KERNELS_KV_STORAGE_H_
#define TANDEM_KERNELS_KV_STORAGE_H_

#include <cstdint>
#include <memory>
#include <span>

#include "absl/status/statusor.h"
#include "common/kv/kv_layout.h"
#include "kernels/backend.h"

namespace tandem::kernels {

class KvStorage {
 public:
  // As many blocks as fit in `budget_bytes` (at least one, else InvalidArgument).
  static absl::StatusOr<std::unique_ptr<KvStorage>> Create(Backend* backend,
                                                           const kv::KvLayout& layout,
                                                           int64_t budget_bytes);

  const kv::KvLayout& layout() const { return layout_; }
  int32_t num_blocks() const { return num_blocks_; }
  int64_t bytes() const { return buffer_->bytes(); }
  const Buffer& buffer() const { return *buffer_; }
  // Byte offset in buffer() of `layer`'s K part (V follows it) in `block`.
  int64_t LayerOffset(int32_t block, int32_t layer) const {
    return block * layout_.BlockBytes() + layer * layout_.LayerBytes();
  }

  // out / in: blocks.size() × LayerBytes(), one layer (K then V) of each block in order.
  // InvalidArgument for a block id or layer out of range.
  absl::Status ReadLayer(std::span<const int32_t> blocks, int32_t layer, uint8_t* out) const;
  absl::Status WriteLayer(std::span<const int32_t> blocks, int32_t layer, const uint8_t* in);
  // The same packing in `staging` (a buffer of this storage's backend) from byte
  // `offset`: each run of consecutive block ids moves as one strided copy
  // (Backend::CopyNow). InvalidArgument as above; OutOfRange when `staging` is short.
  absl::Status GatherLayer(std::span<const int32_t> blocks, int32_t layer, const Buffer& staging,
                           int64_t offset) const;
  absl::Status ScatterLayer(std::span<const int32_t> blocks, int32_t layer, const Buffer& staging,
                            int64_t offset);

  // A staging buffer of this storage's backend for GatherLayer / ScatterLayer. Before
  // serving (or on the engine thread): allocation runs on the backend's stream.
  // Returns once the buffer's zero fill has finished (other streams use it next).
  absl::StatusOr<std::unique_ptr<Buffer>> AllocateStaging(int64_t bytes) const {
    absl::StatusOr<std::unique_ptr<Buffer>> b = backend_->Allocate(MemoryKind::kStaging, bytes);
    if (b.ok()) {
      if (absl::Status st = backend_->Synchronize(); !st.ok()) return st;
    }
    return b;
  }
  // The first `bytes` of a staging buffer into host memory (any thread, like ReadLayer).
  absl::Status ReadStaging(const Buffer& staging, int64_t bytes, uint8_t* out) const {
    return backend_->ReadNow(staging, 0, bytes, out);
  }

  struct Extent {
    const Buffer* buffer;
    int64_t offset;
    int64_t bytes;
  };
  Extent BlockExtent(int32_t block) const {
    return {buffer_.get(), block * layout_.BlockBytes(), layout_.BlockBytes()};
  }

 private:
  KvStorage(Backend* backend, const kv::KvLayout& layout, int32_t num_blocks,
            std::unique_ptr<Buffer> buffer)
      : backend_(backend), layout_(layout), num_blocks_(num_blocks), buffer_(std::move(buffer)) {}
  absl::Status Check(std::span<const int32_t> blocks, int32_t layer) const;
  // GatherLayer (to_staging) or ScatterLayer, after Check.
  absl::Status MoveRuns(std::span<const int32_t> blocks, int32_t layer, const Buffer& staging,
                        int64_t offset, bool to_staging) const;

  Backend* const backend_;
  const kv::KvLayout layout_;
  const int32_t num_blocks_;
  const std::unique_ptr<Buffer> buffer_;  // [num_blocks][BlockBytes()]
};

}  // namespace tandem::kernels

#endif  // TANDEM_KERNELS_KV_STORAGE_H_
