#include "common/engine/device_weights.h"

#include "absl/container/flat_hash_map.h"
#include "common/util/status_macros.h"

namespace tandem::engine {

namespace {

// One host tensor and the view it becomes.
struct Source {
  const void* data;
  model::GgmlType type;
  int64_t rows, cols;
  Tensor* view;
};

Source Matrix(const WeightMatrix& w, Tensor* view) {
  return {w.data, w.type, w.rows, w.cols, view};
}
Source Vector(const float* v, int64_t n, Tensor* view) {
  return {v, model::GgmlType::kF32, v == nullptr ? 0 : 1, n, view};
}

}  // namespace

absl::StatusOr<std::unique_ptr<DeviceWeights>> DeviceWeights::Prepare(const ModelWeights& host,
                                                                      kernels::Backend* backend) {
  std::unique_ptr<DeviceWeights> w(new DeviceWeights());
  const model::ModelConfig& c = host.config();
  const int64_t h = c.hidden_size, q_dim = c.n_heads * c.head_dim,
                kv_dim = c.n_kv_heads * c.head_dim;
  std::vector<Source> src = {Matrix(host.token_embd(), &w->token_embd_),
                             Matrix(host.output(), &w->output_),
                             Vector(host.output_norm(), h, &w->output_norm_),
                             Vector(host.rope_freq_factors(), c.rope_dim / 2, &w->rope_freqs_)};
  w->layers_.resize(host.layers().size());
  for (size_t i = 0; i < host.layers().size(); ++i) {
    const LayerWeights& L = host.layers()[i];
    DeviceLayer& D = w->layers_[i];
    src.insert(
        src.end(),
        {Vector(L.attn_norm, h, &D.attn_norm), Matrix(L.wq, &D.wq), Matrix(L.wk, &D.wk),
         Matrix(L.wv, &D.wv), Vector(L.bq, q_dim, &D.bq), Vector(L.bk, kv_dim, &D.bk),
         Vector(L.bv, kv_dim, &D.bv), Matrix(L.wo, &D.wo), Vector(L.ffn_norm, h, &D.ffn_norm),
         Matrix(L.w_gate, &D.w_gate), Matrix(L.w_up, &D.w_up), Matrix(L.w_down, &D.w_down)});
  }
  auto shape = [](const Source& s, const kernels::Buffer* buffer, int64_t offset) {
    return Tensor{buffer, offset, s.type, s.rows, s.cols};
  };

  // Zero-copy where the backend reads host memory.
  bool borrowed = true;
  for (const Source& s : src) {
    if (s.data == nullptr) continue;
    const int64_t bytes = shape(s, nullptr, 0).bytes();
    auto b = backend->BorrowHost(s.data, bytes);
    if (b.status().code() == absl::StatusCode::kFailedPrecondition) {
      borrowed = false;
      break;
    }
    RETURN_IF_ERROR(b.status());
    *s.view = shape(s, b->get(), 0);
    w->buffers_.push_back(*std::move(b));
  }
  if (borrowed) return w;

  // Otherwise one buffer, each distinct tensor copied once (tied embeddings share).
  w->buffers_.clear();
  constexpr int64_t kAlign = 256;
  absl::flat_hash_map<const void*, int64_t> offset_of;
  std::vector<const Source*> distinct;
  int64_t total = 0;
  for (const Source& s : src) {
    if (s.data == nullptr || !offset_of.try_emplace(s.data, total).second) continue;
    distinct.push_back(&s);
    total += (shape(s, nullptr, 0).bytes() + kAlign - 1) / kAlign * kAlign;
  }
  ASSIGN_OR_RETURN(std::unique_ptr<kernels::Buffer> buffer,
                   backend->Allocate(kernels::MemoryKind::kWeights, total));
  for (const Source& s : src) {
    if (s.data != nullptr) *s.view = shape(s, buffer.get(), offset_of[s.data]);
  }
  for (const Source* s : distinct) {
    backend->CopyToDevice(s->data, *buffer, s->view->offset, s->view->bytes());
  }
  RETURN_IF_ERROR(backend->Synchronize());
  w->copied_bytes_ = total;
  w->buffers_.push_back(std::move(buffer));
  return w;
}

}  // namespace tandem::engine
