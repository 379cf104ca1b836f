#include "kernels/cuda/attention_cuda.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <vector>

#include "common/util/strings.h"
#include "kernels/cuda/attention_kernels.h"

namespace tandem::kernels::cuda {

namespace {

absl::Status Check(cudaError_t e, std::string_view what) {
  if (e == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(StrCat(what, ": ", cudaGetErrorString(e)));
}

}  // namespace

DeviceScratch::~DeviceScratch() {
  for (void* p : ptr_) {
    if (p != nullptr) cudaFree(p);
  }
}

absl::StatusOr<void*> DeviceScratch::Get(int i, int64_t bytes) {
  if (size_[i] >= bytes && ptr_[i] != nullptr) return ptr_[i];
  if (ptr_[i] != nullptr) cudaFree(ptr_[i]);
  ptr_[i] = nullptr;
  size_[i] = 0;
  if (absl::Status st = Check(cudaMalloc(&ptr_[i], static_cast<size_t>(bytes)), "cudaMalloc");
      !st.ok()) {
    return st;
  }
  size_[i] = bytes;
  return ptr_[i];
}

absl::Status PagedAttentionCuda(const float* q, const PagedBatch& batch,
                                const AttentionShape& shape, int32_t layer,
                                const kv::KvLayout& layout, const float* cache, float* out,
                                DeviceScratch* scratch, const AttentionTuning& tuning) {
  const int32_t rows = batch.q_indptr.empty() ? 0 : batch.q_indptr.back();
  if (rows == 0) return absl::OkStatus();
  if (layout.dtype != kv::KvDtype::kF32) {
    return absl::InvalidArgumentError("paged attention (CUDA): only a float32 cache so far");
  }
  if (shape.head_dim > 256) {
    return absl::InvalidArgumentError(StrCat("head_dim ", shape.head_dim, " > 256"));
  }
  // Host side: each row's sequence and position, then one upload.
  std::vector<int32_t> meta(2 * static_cast<size_t>(rows));  // [row_seq | row_pos]
  for (int32_t s = 0; s < batch.num_seqs(); ++s) {
    const int32_t q_len = batch.q_indptr[s + 1] - batch.q_indptr[s];
    for (int32_t r = 0; r < q_len; ++r) {
      meta[batch.q_indptr[s] + r] = s;
      meta[rows + batch.q_indptr[s] + r] = batch.kv_len[s] - q_len + r;
    }
  }
  const int64_t meta_bytes = static_cast<int64_t>(meta.size() * sizeof(int32_t));
  const int64_t indptr_bytes = static_cast<int64_t>(batch.block_indptr.size() * sizeof(int32_t));
  const int64_t ids_bytes =
      static_cast<int64_t>(std::max<size_t>(1, batch.block_ids.size()) * sizeof(int32_t));
  const int32_t splits = std::max(1, tuning.max_splits);
  const int64_t ws_bytes = AttentionWorkspaceFloats(rows, shape.n_heads, splits, shape.head_dim) *
                           static_cast<int64_t>(sizeof(float));
  auto d_meta = scratch->Get(0, meta_bytes);
  if (!d_meta.ok()) return d_meta.status();
  auto d_indptr = scratch->Get(1, indptr_bytes);
  if (!d_indptr.ok()) return d_indptr.status();
  auto d_ids = scratch->Get(2, ids_bytes);
  if (!d_ids.ok()) return d_ids.status();
  auto d_ws = scratch->Get(3, ws_bytes);
  if (!d_ws.ok()) return d_ws.status();
  auto up = [](void* dst, const void* src, int64_t bytes) {
    return Check(cudaMemcpy(dst, src, static_cast<size_t>(bytes), cudaMemcpyHostToDevice),
                 "upload");
  };
  if (auto st = up(*d_meta, meta.data(), meta_bytes); !st.ok()) return st;
  if (auto st = up(*d_indptr, batch.block_indptr.data(), indptr_bytes); !st.ok()) return st;
  if (!batch.block_ids.empty()) {
    if (auto st = up(*d_ids, batch.block_ids.data(),
                     static_cast<int64_t>(batch.block_ids.size() * sizeof(int32_t)));
        !st.ok()) {
      return st;
    }
  }
  AttentionLaunch a;
  a.q = q;
  a.cache = cache;
  a.geometry = {layout.BlockElements(), layout.LayerStride(), layout.PartStride(),
                layout.block_size,      layout.n_kv_heads,    layout.head_dim};
  a.layer = layer;
  a.row_seq = static_cast<const int32_t*>(*d_meta);
  a.row_pos = static_cast<const int32_t*>(*d_meta) + rows;
  a.block_indptr = static_cast<const int32_t*>(*d_indptr);
  a.block_ids = static_cast<const int32_t*>(*d_ids);
  a.rows = rows;
  a.n_heads = shape.n_heads;
  a.n_kv_heads = shape.n_kv_heads;
  a.head_dim = shape.head_dim;
  a.scale = shape.scale;
  a.keys_per_split = tuning.keys_per_split;
  a.max_splits = splits;
  a.workspace = static_cast<float*>(*d_ws);
  a.out = out;
  return Check(static_cast<cudaError_t>(LaunchPagedAttention(a)), "paged attention launch");
}

}  // namespace tandem::kernels::cuda
