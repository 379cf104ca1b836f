#include "common/engine/model_executor.h"

#include <algorithm>
#include <cmath>

#include "common/util/status_macros.h"
#include "common/util/strings.h"

namespace tandem::engine {

void ForwardBatch::AddSequence(std::span<const int32_t> new_tokens, int32_t len,
                               std::span<const int32_t> block_table, bool want_logits,
                               int32_t logit_count) {
  const int32_t n = static_cast<int32_t>(new_tokens.size());
  for (int32_t i = 0; i < n; ++i) {
    tokens.push_back(new_tokens[i]);
    positions.push_back(len - n + i);
  }
  q_indptr.push_back(static_cast<int32_t>(tokens.size()));
  kv_len.push_back(len);
  block_ids.insert(block_ids.end(), block_table.begin(), block_table.end());
  block_indptr.push_back(static_cast<int32_t>(block_ids.size()));
  if (want_logits) {
    const int32_t end = static_cast<int32_t>(tokens.size());
    for (int32_t r = end - std::min(n, logit_count); r < end; ++r) logit_rows.push_back(r);
  }
}

namespace {

constexpr int64_t kAlign = 256;
int64_t Aligned(int64_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

// Where each activation lives in the workspace, for capacities (T, S, B).
struct Regions {
  int64_t x, h, q, k, v, attn, proj, gate, up, router, expert_ids, expert_w, rope, picked, normed,
      logits, ids, plan, end;
  Regions(const model::ModelConfig& c, int64_t T, int64_t S, int64_t B) {
    const int64_t H = c.hidden_size, qd = c.n_heads * c.head_dim, kvd = c.n_kv_heads * c.head_dim;
    // Each region starts a few cache lines further into its page than the last, so
    // the first rows of all of them (a decode step's whole working set) do not
    // share L1 sets.
    int64_t at = 0, stagger = 0;
    auto next = [&](int64_t floats) {
      const int64_t here = at + stagger;
      at += Aligned(floats * 4) + 4096;
      stagger = (stagger + 5 * 64) % 4096;
      return here;
    };
    x = next(T * H);
    h = next(T * H);
    q = next(T * qd);
    k = next(T * kvd);
    v = next(T * kvd);
    attn = next(T * qd);
    proj = next(T * H);
    gate = next(T * c.ffn_size);
    up = next(T * c.ffn_size);
    router = next(T * c.moe.experts);   // a mixture of experts' router logits
    expert_ids = next(T * c.moe.used);  // int32, its picks
    expert_w = next(T * c.moe.used);    // and their weights
    rope = next(2 * T * c.rope_dim);    // global layers' table, then local layers'
    picked = next(S * H);
    normed = next(S * H);
    logits = next(S * c.vocab_size);
    ids = next(S);                       // int32
    plan = next(3 * T + 4 * S + 2 + B);  // int32
    end = at;
  }
};

// Table entries of block ids the workspace holds for `limits` (every sequence at
// full context).
int64_t TableEntries(const model::ModelConfig& c, const ExecutorLimits& limits, int64_t bs) {
  return int64_t{limits.max_seqs} * ((c.context_length + bs - 1) / bs);
}

kernels::ScratchSize Scratch(const model::ModelConfig& c, int64_t tokens) {
  const int64_t widest =
      std::max({c.hidden_size, c.n_heads * c.head_dim, c.ffn_size, c.n_kv_heads * c.head_dim});
  return {tokens, widest, c.n_heads * (c.head_dim + 2)};
}

}  // namespace

int64_t ModelExecutor::DeviceBytes(const model::ModelConfig& c, const ExecutorLimits& limits,
                                   int32_t block_size, const kernels::Backend& backend) {
  return Regions(c, limits.max_tokens, limits.max_seqs, TableEntries(c, limits, block_size)).end +
         backend.ScratchBytes(Scratch(c, limits.max_tokens));
}

absl::StatusOr<std::unique_ptr<ModelExecutor>> ModelExecutor::Create(
    const model::ModelConfig& config, const DeviceWeights& weights, kernels::Backend* backend,
    kernels::KvStorage* kv, const ExecutorLimits& limits) {
  std::unique_ptr<ModelExecutor> e(new ModelExecutor(config, weights, backend, kv));
  e->use_graphs_ = limits.graphs;
  RETURN_IF_ERROR(e->Reserve(limits.max_tokens, limits.max_seqs,
                             TableEntries(config, limits, kv->layout().block_size)));
  return e;
}

ModelExecutor::ModelExecutor(const model::ModelConfig& c, const DeviceWeights& weights,
                             kernels::Backend* backend, kernels::KvStorage* kv)
    : config_(c), w_(weights), backend_(backend), kv_(kv) {
  rope_.head_dim = static_cast<int32_t>(c.head_dim);
  rope_.rope_dim = static_cast<int32_t>(c.rope_dim);
  rope_.theta = static_cast<float>(c.rope_theta);
  rope_.style = c.rope_halves ? kernels::RopeStyle::kHalves : kernels::RopeStyle::kAdjacent;
  if (c.rope_scaling.type == model::RopeScalingType::kLinear && c.rope_scaling.factor > 0) {
    rope_.position_scale = static_cast<float>(c.rope_scaling.factor);
  }
  rope_.attention_factor = static_cast<float>(c.RopeAttentionFactor());
  rope_local_ = rope_;
  if (c.rope_theta_local > 0) {
    local_rope_ = true;
    rope_local_.theta = static_cast<float>(c.rope_theta_local);
    rope_local_.position_scale = 1.0f;  // scaling applies to the global layers only
    rope_local_.attention_factor = 1.0f;
  }
  attn_.n_heads = static_cast<int32_t>(c.n_heads);
  attn_.n_kv_heads = static_cast<int32_t>(c.n_kv_heads);
  attn_.head_dim = static_cast<int32_t>(c.head_dim);
  attn_.scale = c.attention_scale > 0 ? static_cast<float>(c.attention_scale)
                                      : 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  attn_.softcap = static_cast<float>(c.attn_softcap);
  routing_.experts = static_cast<int32_t>(c.moe.experts);
  routing_.used = static_cast<int32_t>(c.moe.used);
  routing_.gating = c.moe.gating == model::ExpertGating::kSigmoid ? kernels::MoeGating::kSigmoid
                    : c.moe.gating == model::ExpertGating::kSoftmaxWeight
                        ? kernels::MoeGating::kSoftmaxWeight
                        : kernels::MoeGating::kSoftmax;
  routing_.normalize = c.moe.weights_norm;
  routing_.scale = static_cast<float>(c.moe.weights_scale);
}

absl::Status ModelExecutor::Reserve(int64_t tokens, int64_t seqs, int64_t table_entries) {
  if (tokens <= cap_tokens_ && seqs <= cap_seqs_ && table_entries <= cap_table_) {
    return absl::OkStatus();
  }
  const int64_t T = std::max(tokens, cap_tokens_), S = std::max(seqs, cap_seqs_),
                B = std::max(table_entries, cap_table_);
  graphs_.clear();  // they point into the old workspace
  warm_.clear();
  workspace_.reset();                        // the old one first: never hold both
  cap_tokens_ = cap_seqs_ = cap_table_ = 0;  // until the new one exists
  ASSIGN_OR_RETURN(workspace_, backend_->Allocate(kernels::MemoryKind::kActivations,
                                                  Regions(config_, T, S, B).end));
  RETURN_IF_ERROR(backend_->ReserveScratch(Scratch(config_, T)));
  scratch_epoch_ = backend_->ScratchEpoch();
  cap_tokens_ = T;
  cap_seqs_ = S;
  cap_table_ = B;
  return absl::OkStatus();
}

kernels::Tensor ModelExecutor::IdsScratch() const {
  const Regions at(config_, cap_tokens_, cap_seqs_, cap_table_);
  return {workspace_.get(), at.ids, model::GgmlType::kI32, 1, cap_seqs_};
}

absl::Status ModelExecutor::Validate(const ForwardBatch& b) const {
  const int32_t S = static_cast<int32_t>(b.kv_len.size());
  if (b.q_indptr.size() != static_cast<size_t>(S) + 1 ||
      b.block_indptr.size() != static_cast<size_t>(S) + 1 || b.q_indptr.back() != b.num_tokens() ||
      b.positions.size() != b.tokens.size() ||
      b.block_indptr.back() != static_cast<int32_t>(b.block_ids.size())) {
    return absl::InvalidArgumentError("forward batch: inconsistent index arrays");
  }
  if (b.q_indptr[0] != 0 || b.block_indptr[0] != 0) {
    return absl::InvalidArgumentError("forward batch: index arrays must start at 0");
  }
  for (int32_t s = 0; s < S; ++s) {
    if (b.q_indptr[s + 1] < b.q_indptr[s] || b.block_indptr[s + 1] < b.block_indptr[s]) {
      return absl::InvalidArgumentError("forward batch: index arrays must not decrease");
    }
  }
  const int32_t vocab = static_cast<int32_t>(config_.vocab_size);
  for (int32_t t : b.tokens) {
    if (t < 0 || t >= vocab)
      return absl::InvalidArgumentError(StrCat("forward batch: token id ", t, " out of range"));
  }
  const int32_t bs = kv_->layout().block_size;
  for (int32_t s = 0; s < S; ++s) {
    const int32_t n = b.q_indptr[s + 1] - b.q_indptr[s];
    if (n < 0 || b.kv_len[s] < n)
      return absl::InvalidArgumentError("forward batch: kv_len shorter than new tokens");
    if (static_cast<int64_t>(b.block_indptr[s + 1] - b.block_indptr[s]) * bs < b.kv_len[s]) {
      return absl::InvalidArgumentError(StrCat("forward batch: sequence ", s, " needs ",
                                               b.kv_len[s],
                                               " cache slots, its block table is too short"));
    }
    for (int32_t i = b.block_indptr[s]; i < b.block_indptr[s + 1]; ++i) {
      if (b.block_ids[i] < 0 || b.block_ids[i] >= kv_->num_blocks()) {
        return absl::InvalidArgumentError(
            StrCat("forward batch: block id ", b.block_ids[i], " out of range"));
      }
    }
  }
  for (int32_t r : b.logit_rows) {
    if (r < 0 || r >= b.num_tokens())
      return absl::InvalidArgumentError("forward batch: logit row out of range");
  }
  return absl::OkStatus();
}

absl::StatusOr<kernels::Tensor> ModelExecutor::Forward(const ForwardBatch& b,
                                                       const LayerCallback& on_layer_kv) {
  RETURN_IF_ERROR(Validate(b));
  const model::ModelConfig& c = config_;
  const int64_t T = b.num_tokens(), S = static_cast<int64_t>(b.kv_len.size()),
                R = static_cast<int64_t>(b.logit_rows.size()),
                B = static_cast<int64_t>(b.block_ids.size());
  RETURN_IF_ERROR(Reserve(T, std::max(S, R), B));
  // Another executor on this backend (a draft model's) may have moved the scratch the
  // captured graphs point into.
  if (backend_->ScratchEpoch() != scratch_epoch_) {
    graphs_.clear();
    scratch_epoch_ = backend_->ScratchEpoch();
  }
  const Regions at(c, cap_tokens_, cap_seqs_, cap_table_);
  const kernels::Buffer* ws = workspace_.get();
  auto f32 = [&](int64_t offset, int64_t rows, int64_t cols) {
    return kernels::Tensor{ws, offset, model::GgmlType::kF32, rows, cols};
  };
  // The step plan: built here, uploaded in one copy, read by every layer.
  plan_.resize(static_cast<size_t>(3 * T + 3 * S + 2 + B + R));
  int64_t used = 0;
  auto part = [&](int64_t n) {  // the next n ints of the plan
    const kernels::Tensor t{ws, at.plan + used * 4, model::GgmlType::kI32, 1, n};
    used += n;
    return t;
  };
  auto copy = [&](std::span<const int32_t> values) {
    std::copy(values.begin(), values.end(), plan_.begin() + used);
    return part(static_cast<int64_t>(values.size()));
  };
  kernels::StepView step;
  for (int64_t s = 0; s < S; ++s) {
    step.max_new_tokens = std::max(step.max_new_tokens, b.q_indptr[s + 1] - b.q_indptr[s]);
  }
  step.tokens = copy(b.tokens);
  step.positions = copy(b.positions);
  kernels::SlotMapping(b.q_indptr, b.kv_len, b.block_indptr, b.block_ids, kv_->layout().block_size,
                       plan_.data() + used);
  step.slot_mapping = part(T);
  step.q_indptr = copy(b.q_indptr);
  step.kv_len = copy(b.kv_len);
  step.block_indptr = copy(b.block_indptr);
  const kernels::Tensor logit_rows = copy(b.logit_rows);
  step.block_ids = copy(b.block_ids);  // last: every other part's place depends on T, S, R
  backend_->CopyToDevice(plan_.data(), *ws, at.plan, static_cast<int64_t>(plan_.size()) * 4);

  // A decode step (one new token and its logits per sequence, no layer callback) is
  // replayed from the graph captured at this batch size's second step; the plan just
  // uploaded is what it reads.
  const bool graphable =
      use_graphs_ && !on_layer_kv && T == S && R == S && step.max_new_tokens == 1;
  const kernels::Tensor logits = f32(at.logits, R, c.vocab_size);  // [R][vocab]
  if (graphable) {
    auto it = graphs_.find(S);
    // The first step of a batch size runs eagerly (modules load, plans are chosen, as
    // outside any capture); the second is captured.
    if (it == graphs_.end() && !warm_.insert(S).second) {
      if (!backend_->BeginCapture()) {
        use_graphs_ = false;  // the backend cannot record: eager from now on
      } else {
        EnqueuePass(b, step, logit_rows, on_layer_kv);
        absl::StatusOr<std::unique_ptr<kernels::Graph>> g = backend_->EndCapture();
        if (g.ok()) {
          it = graphs_.emplace(S, *std::move(g)).first;
        } else {
          use_graphs_ = false;  // this pass cannot be captured: eager from now on
        }
      }
    }
    if (it != graphs_.end()) {
      backend_->Replay(*it->second);
      RETURN_IF_ERROR(backend_->Synchronize());
      return logits;
    }
  }
  EnqueuePass(b, step, logit_rows, on_layer_kv);
  RETURN_IF_ERROR(backend_->Synchronize());
  return logits;
}

void ModelExecutor::EnqueuePass(const ForwardBatch& b, const kernels::StepView& step,
                                const kernels::Tensor& logit_rows,
                                const LayerCallback& on_layer_kv) {
  const model::ModelConfig& c = config_;
  const int64_t T = b.num_tokens(), R = static_cast<int64_t>(b.logit_rows.size());
  const Regions at(c, cap_tokens_, cap_seqs_, cap_table_);
  const kernels::Buffer* ws = workspace_.get();
  auto f32 = [&](int64_t offset, int64_t rows, int64_t cols) {
    return kernels::Tensor{ws, offset, model::GgmlType::kF32, rows, cols};
  };
  const int64_t H = c.hidden_size, q_dim = c.n_heads * c.head_dim,
                kv_dim = c.n_kv_heads * c.head_dim, F = c.ffn_size;
  const kernels::Tensor x = f32(at.x, T, H);       // residual stream
  const kernels::Tensor h = f32(at.h, T, H);       // normed input
  const kernels::Tensor q = f32(at.q, T, q_dim);   // [T][n_heads][head_dim]
  const kernels::Tensor k = f32(at.k, T, kv_dim);  // [T][n_kv_heads][head_dim]
  const kernels::Tensor v = f32(at.v, T, kv_dim);
  const kernels::Tensor attn_out = f32(at.attn, T, q_dim);
  const kernels::Tensor proj = f32(at.proj, T, H);
  const kernels::Tensor gate = f32(at.gate, T, F);
  const kernels::Tensor up = f32(at.up, T, F);
  const kernels::Tensor rope_table = f32(at.rope, T, c.rope_dim);  // cos | sin
  const kernels::Tensor rope_table_local =
      local_rope_ ? f32(at.rope + T * c.rope_dim * 4, T, c.rope_dim) : rope_table;

  const float eps = static_cast<float>(c.rms_norm_eps);
  backend_->RopeTable(step.positions, w_.rope_freqs(), rope_, rope_table);
  if (local_rope_) backend_->RopeTable(step.positions, {}, rope_local_, rope_table_local);
  backend_->Embedding(w_.token_embd(), step.tokens, x);
  if (c.embedding_scale > 0) backend_->Scale(x, static_cast<float>(c.embedding_scale));
  const int32_t n_layers = static_cast<int32_t>(c.n_layers);
  backend_->RmsNorm(x, w_.layers()[0].attn_norm, eps, h);
  for (int32_t l = 0; l < n_layers; ++l) {
    const DeviceLayer& L = w_.layers()[l];
    const bool local = c.LayerIsLocal(l);
    kernels::AttentionShape shape = attn_;
    if (local) shape.window = static_cast<int32_t>(c.sliding_window);
    const kernels::RopeParams& rope = local && local_rope_ ? rope_local_ : rope_;
    const kernels::Tensor& table = local && local_rope_ ? rope_table_local : rope_table;
    shape.sinks = L.sinks;
    backend_->MatMul3(h, L.wq, q, L.wk, k, L.wv, v);
    if (!L.bq.empty()) backend_->AddBias(q, L.bq);
    if (!L.bk.empty()) backend_->AddBias(k, L.bk);
    if (!L.bv.empty()) backend_->AddBias(v, L.bv);
    if (!L.q_norm.empty() && c.qk_norm_full) {  // over the whole projection, in place
      backend_->RmsNorm(q, L.q_norm, eps, q);
      backend_->RmsNorm(k, L.k_norm, eps, k);
    } else if (!L.q_norm.empty()) {  // per head: [T·heads][head_dim] rows, in place
      backend_->RmsNorm(f32(at.q, T * c.n_heads, c.head_dim), L.q_norm, eps,
                        f32(at.q, T * c.n_heads, c.head_dim));
      backend_->RmsNorm(f32(at.k, T * c.n_kv_heads, c.head_dim), L.k_norm, eps,
                        f32(at.k, T * c.n_kv_heads, c.head_dim));
    }
    backend_->Rope(q, attn_.n_heads, table, rope);
    backend_->Rope(k, attn_.n_kv_heads, table, rope);
    backend_->WriteKv(k, v, step, l, kv_);
    if (on_layer_kv) on_layer_kv(l, backend_->RecordEvent());
    backend_->Attention(q, step, shape, l, *kv_, attn_out);
    backend_->MatMul(attn_out, L.wo, proj);
    if (!L.bo.empty()) backend_->AddBias(proj, L.bo);
    if (!L.post_attn_norm.empty()) backend_->RmsNorm(proj, L.post_attn_norm, eps, proj);
    backend_->AddRmsNorm(x, proj, L.ffn_norm, eps, h);  // residual, then the FFN's norm

    if (c.LayerIsMoe(l)) {
      const kernels::Tensor router = f32(at.router, T, c.moe.experts);
      const kernels::Tensor ids{ws, at.expert_ids, model::GgmlType::kI32, T, c.moe.used};
      const kernels::Tensor weights = f32(at.expert_w, T, c.moe.used);
      backend_->MatMul(h, L.router, router);
      if (!L.router_logit_bias.empty()) backend_->AddBias(router, L.router_logit_bias);
      backend_->MoeRoute(router, L.router_bias, routing_, ids, weights);
      kernels::ExpertWeights experts;
      experts.gate = L.expert_gate;
      experts.up = L.expert_up;
      experts.down = L.expert_down;
      experts.gate_bias = L.expert_gate_bias;
      experts.up_bias = L.expert_up_bias;
      experts.down_bias = L.expert_down_bias;
      experts.shared_gate = L.shared_gate;
      experts.shared_w_gate = L.w_gate;
      experts.shared_w_up = L.w_up;
      experts.shared_w_down = L.w_down;
      const kernels::GatedActivation act = c.ffn_activation == model::FfnActivation::kGeluTanh
                                               ? kernels::GatedActivation::kGeluTanh
                                           : c.ffn_activation == model::FfnActivation::kSwigluOai
                                               ? kernels::GatedActivation::kSwigluOai
                                               : kernels::GatedActivation::kSilu;
      backend_->MoeFfn(h, ids, weights, experts, act, proj);
    } else {
      backend_->MatMul2(h, L.w_gate, gate, L.w_up, up);
      if (c.ffn_activation == model::FfnActivation::kGeluTanh) {
        backend_->GeGlu(gate, up, gate);
      } else {
        backend_->SwiGlu(gate, up, gate);
      }
      backend_->MatMul(gate, L.w_down, proj);
    }
    if (!L.post_ffn_norm.empty()) backend_->RmsNorm(proj, L.post_ffn_norm, eps, proj);
    if (l + 1 < n_layers) {
      backend_->AddRmsNorm(x, proj, w_.layers()[l + 1].attn_norm, eps, h);  // and the next norm
    } else {
      backend_->Add(x, proj);
    }
  }

  // Final norm and logits only for the rows asked for.
  const kernels::Tensor picked = f32(at.picked, R, H), normed = f32(at.normed, R, H);
  backend_->GatherRows(x, logit_rows, picked);
  backend_->RmsNorm(picked, w_.output_norm(), eps, normed);
  backend_->MatMul(normed, w_.output(), f32(at.logits, R, c.vocab_size));
  if (c.final_softcap > 0) {
    backend_->SoftCap(f32(at.logits, R, c.vocab_size), static_cast<float>(c.final_softcap));
  }
}

}  // namespace tandem::engine
