// KvLayout: the shape, element type and element order of one paged-KV-cache block.
// Both halves of a disaggregated pair must agree on all of it (the layout fingerprint
// exchanged at the KV handshake carries every field).
//
// One block is contiguous, so a block travels as one piece:
//   [layer][K|V] where, in KvOrder::kKTransposed (the only order so far),
//     K: [n_kv_heads][head_dim][block_size]   (transposed: a key dimension of 16
//                                              slots is one vector for attention)
//     V: [block_size][n_kv_heads][head_dim]
//   elements of `dtype`; block b starts at b × BlockBytes() in its storage.
// Bytes per token = 2 × layers × kv_heads × head_dim × ElementBytes().
//
// A plain value: who owns the bytes is kernels::KvStorage's business.
#ifndef TANDEM_COMMON_KV_KV_LAYOUT_H_
#define TANDEM_COMMON_KV_KV_LAYOUT_H_

#include <cstdint>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace tandem::kv {

enum class KvDtype { kF32, kBF16, kF16 };
enum class KvOrder { kKTransposed };

// "f32", "bf16", "f16".
std::string_view KvDtypeName(KvDtype dtype);
absl::StatusOr<KvDtype> ParseKvDtype(std::string_view name);
std::string_view KvOrderName(KvOrder order);

struct KvLayout {
  int32_t n_layers = 0;
  int32_t n_kv_heads = 0;
  int32_t head_dim = 0;
  int32_t block_size = 16;
  KvDtype dtype = KvDtype::kF32;
  KvOrder order = KvOrder::kKTransposed;

  int64_t ElementBytes() const { return dtype == KvDtype::kF32 ? 4 : 2; }
  int64_t TokenElements() const { return int64_t{2} * n_layers * n_kv_heads * head_dim; }
  int64_t BytesPerToken() const { return TokenElements() * ElementBytes(); }
  int64_t BlockElements() const { return TokenElements() * block_size; }
  int64_t BlockBytes() const { return BlockElements() * ElementBytes(); }
  // Elements from one layer's K (or V) part to the next part.
  int64_t PartStride() const { return int64_t{block_size} * n_kv_heads * head_dim; }
  // Elements from one layer of a block to the next; one layer (K then V) of one
  // block is LayerBytes() contiguous bytes, the unit the host transport moves.
  int64_t LayerStride() const { return 2 * PartStride(); }
  int64_t LayerBytes() const { return LayerStride() * ElementBytes(); }

  // InvalidArgument unless every dimension is positive.
  absl::Status Validate() const;
};

}  // namespace tandem::kv

#endif  // TANDEM_COMMON_KV_KV_LAYOUT_H_
