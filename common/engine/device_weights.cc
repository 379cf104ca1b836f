#include "common/engine/device_weights.h"

#include <algorithm>
#include <thread>

#include "absl/container/flat_hash_map.h"
#include "common/model/dequantize.h"
#include "common/util/half.h"
#include "common/util/status_macros.h"
#include "common/util/strings.h"
#include "kernels/cpu/thread_pool.h"

namespace tandem::engine {

namespace {

// One host tensor and the view it becomes.
struct Source {
  const void* data;
  model::GgmlType type;
  int64_t rows, cols;
  Tensor* view;
  bool matrix;  // a weight matrix (converted to the backend's WeightType); else a vector
};

Source Matrix(const WeightMatrix& w, Tensor* view) {
  return {w.data, w.type, w.rows, w.cols, view, true};
}
Source Vector(const float* v, int64_t n, Tensor* view) {
  return {v, model::GgmlType::kF32, v == nullptr ? 0 : 1, n, view, false};
}
// float32 rows that are not a weight matrix (never converted), e.g. per-expert biases.
Source Rows(const float* v, int64_t rows, int64_t cols, Tensor* view) {
  return {v, model::GgmlType::kF32, v == nullptr ? 0 : rows, cols, view, false};
}

// Rows of `s` decoded and rounded to bf16 into `out` [rows][cols], on `pool`.
absl::Status ToBf16(const Source& s, kernels::ThreadPool* pool, std::vector<uint16_t>* out) {
  const int64_t row_bytes = Tensor{nullptr, 0, s.type, 1, s.cols}.RowBytes();
  out->resize(static_cast<size_t>(s.rows * s.cols));
  std::vector<absl::Status> status(static_cast<size_t>(pool->num_threads()));
  pool->ParallelFor(s.rows, [&](int64_t begin, int64_t end, int thread) {
    std::vector<float> row(static_cast<size_t>(s.cols));
    for (int64_t r = begin; r < end && status[thread].ok(); ++r) {
      const auto* src = static_cast<const uint8_t*>(s.data) + r * row_bytes;
      status[thread] = model::Dequantize(s.type, {src, static_cast<size_t>(row_bytes)}, row);
      for (int64_t c = 0; c < s.cols; ++c) (*out)[r * s.cols + c] = FloatToBf16(row[c]);
    }
  });
  for (const absl::Status& st : status) RETURN_IF_ERROR(st);
  return absl::OkStatus();
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
    src.insert(src.end(),
               {Vector(L.attn_norm, h, &D.attn_norm),
                Matrix(L.wq, &D.wq),
                Matrix(L.wk, &D.wk),
                Matrix(L.wv, &D.wv),
                Vector(L.bq, q_dim, &D.bq),
                Vector(L.bk, kv_dim, &D.bk),
                Vector(L.bv, kv_dim, &D.bv),
                Vector(L.q_norm, c.qk_norm_full ? q_dim : c.head_dim, &D.q_norm),
                Vector(L.k_norm, c.qk_norm_full ? kv_dim : c.head_dim, &D.k_norm),
                Matrix(L.wo, &D.wo),
                Vector(L.post_attn_norm, h, &D.post_attn_norm),
                Vector(L.ffn_norm, h, &D.ffn_norm),
                Vector(L.post_ffn_norm, h, &D.post_ffn_norm),
                Matrix(L.w_gate, &D.w_gate),
                Matrix(L.w_up, &D.w_up),
                Matrix(L.w_down, &D.w_down),
                Matrix(L.router, &D.router),
                Vector(L.router_bias, c.moe.experts, &D.router_bias),
                Vector(L.shared_gate, h, &D.shared_gate),
                Vector(L.bo, h, &D.bo),
                Vector(L.sinks, c.n_heads, &D.sinks),
                Vector(L.router_logit_bias, c.moe.experts, &D.router_logit_bias),
                Rows(L.expert_gate_bias, c.moe.experts, c.moe.ffn_size, &D.expert_gate_bias),
                Rows(L.expert_up_bias, c.moe.experts, c.moe.ffn_size, &D.expert_up_bias),
                Rows(L.expert_down_bias, c.moe.experts, h, &D.expert_down_bias)});
    const size_t experts = L.expert_gate.size();
    D.expert_gate.resize(experts);
    D.expert_up.resize(experts);
    D.expert_down.resize(experts);
    for (size_t e = 0; e < experts; ++e) {
      src.insert(src.end(), {Matrix(L.expert_gate[e], &D.expert_gate[e]),
                             Matrix(L.expert_up[e], &D.expert_up[e]),
                             Matrix(L.expert_down[e], &D.expert_down[e])});
    }
  }
  // The type each tensor takes in backend memory.
  const std::optional<model::GgmlType> want = backend->WeightType();
  auto type_of = [&](const Source& s) { return s.matrix && want ? *want : s.type; };
  if (want && c.moe.experts > 0) {
    return absl::UnimplementedError(
        StrCat("weights: the ", backend->name(),
               " backend does not run mixtures of experts yet (the CPU backend does)"));
  }
  if (want && *want != model::GgmlType::kBF16) {
    return absl::UnimplementedError(
        StrCat("weights: no conversion to ", model::Traits(*want).name));
  }
  auto shape = [&](const Source& s, const kernels::Buffer* buffer, int64_t offset) {
    return Tensor{buffer, offset, type_of(s), s.rows, s.cols};
  };

  // Zero-copy where the backend reads host memory as it is.
  bool borrowed = !want;
  for (const Source& s : src) {
    if (s.data == nullptr || !borrowed) continue;
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

  // Otherwise one buffer, each distinct tensor copied once (tied embeddings share),
  // matrices converted first where the backend asks for it.
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
  std::vector<uint16_t> converted;  // one tensor at a time: copied before the next
  std::unique_ptr<kernels::ThreadPool> pool;
  for (const Source* s : distinct) {
    if (type_of(*s) == s->type) {
      backend->CopyToDevice(s->data, *buffer, s->view->offset, s->view->bytes());
      continue;
    }
    if (pool == nullptr) {
      pool = std::make_unique<kernels::ThreadPool>(
          static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
    }
    RETURN_IF_ERROR(ToBf16(*s, pool.get(), &converted));
    backend->CopyToDevice(converted.data(), *buffer, s->view->offset, s->view->bytes());
    RETURN_IF_ERROR(backend->Synchronize());
  }
  RETURN_IF_ERROR(backend->Synchronize());
  w->copied_bytes_ = total;
  w->buffers_.push_back(std::move(buffer));
  return w;
}

}  // namespace tandem::engine
