#include "common/engine/model_executor.h"

#include <cmath>

#include "common/util/strings.h"

namespace tandem::engine {

void ForwardBatch::AddSequence(std::span<const int32_t> new_tokens, int32_t len,
                               std::span<const int32_t> block_table, bool want_logits) {
  const int32_t n = static_cast<int32_t>(new_tokens.size());
  for (int32_t i = 0; i < n; ++i) {
    tokens.push_back(new_tokens[i]);
    positions.push_back(len - n + i);
  }
  q_indptr.push_back(static_cast<int32_t>(tokens.size()));
  kv_len.push_back(len);
  block_ids.insert(block_ids.end(), block_table.begin(), block_table.end());
  block_indptr.push_back(static_cast<int32_t>(block_ids.size()));
  if (want_logits && n > 0) logit_rows.push_back(static_cast<int32_t>(tokens.size()) - 1);
}

ModelExecutor::ModelExecutor(const ModelWeights& weights, kernels::Backend* backend,
                             kv::KvCache* cache)
    : w_(weights), backend_(backend), cache_(cache) {
  const auto& c = w_.config();
  rope_.head_dim = static_cast<int32_t>(c.head_dim);
  rope_.rope_dim = static_cast<int32_t>(c.rope_dim);
  rope_.theta = static_cast<float>(c.rope_theta);
  rope_.style = c.rope_halves ? kernels::RopeStyle::kHalves : kernels::RopeStyle::kAdjacent;
  rope_.freq_factors = w_.rope_freq_factors();
  if (c.rope_scaling.type == model::RopeScalingType::kLinear && c.rope_scaling.factor > 0) {
    rope_.position_scale = static_cast<float>(c.rope_scaling.factor);
  }
  attn_.n_heads = static_cast<int32_t>(c.n_heads);
  attn_.n_kv_heads = static_cast<int32_t>(c.n_kv_heads);
  attn_.head_dim = static_cast<int32_t>(c.head_dim);
  attn_.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
}

absl::Status ModelExecutor::Validate(const ForwardBatch& b) const {
  const int32_t S = static_cast<int32_t>(b.kv_len.size());
  if (b.q_indptr.size() != static_cast<size_t>(S) + 1 ||
      b.block_indptr.size() != static_cast<size_t>(S) + 1 || b.q_indptr.back() != b.num_tokens() ||
      b.positions.size() != b.tokens.size() ||
      b.block_indptr.back() != static_cast<int32_t>(b.block_ids.size())) {
    return absl::InvalidArgumentError("forward batch: inconsistent index arrays");
  }
  const int32_t vocab = static_cast<int32_t>(w_.config().vocab_size);
  for (int32_t t : b.tokens) {
    if (t < 0 || t >= vocab)
      return absl::InvalidArgumentError(StrCat("forward batch: token id ", t, " out of range"));
  }
  const int32_t bs = cache_->layout().block_size;
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
      if (b.block_ids[i] < 0 || b.block_ids[i] >= cache_->num_blocks()) {
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

absl::Status ModelExecutor::Forward(const ForwardBatch& b, std::vector<float>* logits,
                                    const LayerCallback& on_layer_kv) {
  if (absl::Status st = Validate(b); !st.ok()) return st;
  const auto& c = w_.config();
  const int64_t T = b.num_tokens(), H = c.hidden_size;
  const int64_t q_dim = c.n_heads * c.head_dim, kv_dim = c.n_kv_heads * c.head_dim, F = c.ffn_size;
  const float eps = static_cast<float>(c.rms_norm_eps);
  x_.resize(T * H);       // residual stream [T][H]
  h_.resize(T * H);       // normed input    [T][H]
  q_.resize(T * q_dim);   // [T][n_heads][head_dim]
  k_.resize(T * kv_dim);  // [T][n_kv_heads][head_dim]
  v_.resize(T * kv_dim);
  attn_out_.resize(T * q_dim);
  proj_.resize(T * H);
  gate_.resize(T * F);  // [T][F]
  up_.resize(T * F);
  const kernels::PagedBatch pb{b.q_indptr, b.kv_len, b.block_indptr, b.block_ids};

  kernels::BuildRopeTable(b.positions, rope_, &rope_table_);
  backend_->Embedding(w_.token_embd(), b.tokens, x_.data());
  for (int32_t l = 0; l < static_cast<int32_t>(c.n_layers); ++l) {
    const LayerWeights& L = w_.layers()[l];
    backend_->RmsNorm(x_.data(), L.attn_norm, T, H, eps, h_.data());
    backend_->MatMul3(h_.data(), T, L.wq, q_.data(), L.wk, k_.data(), L.wv, v_.data());
    if (L.bq != nullptr) backend_->AddBias(q_.data(), L.bq, T, q_dim);
    if (L.bk != nullptr) backend_->AddBias(k_.data(), L.bk, T, kv_dim);
    if (L.bv != nullptr) backend_->AddBias(v_.data(), L.bv, T, kv_dim);
    backend_->Rope(q_.data(), T, attn_.n_heads, rope_table_, rope_);
    backend_->Rope(k_.data(), T, attn_.n_kv_heads, rope_table_, rope_);
    backend_->WriteKv(k_.data(), v_.data(), pb, l, cache_);
    if (on_layer_kv) on_layer_kv(l);
    backend_->Attention(q_.data(), pb, attn_, l, *cache_, attn_out_.data());
    backend_->MatMul(attn_out_.data(), T, L.wo, proj_.data());
    backend_->Add(x_.data(), proj_.data(), T * H);

    backend_->RmsNorm(x_.data(), L.ffn_norm, T, H, eps, h_.data());
    backend_->MatMul2(h_.data(), T, L.w_gate, gate_.data(), L.w_up, up_.data());
    backend_->SwiGlu(gate_.data(), up_.data(), T * F, gate_.data());
    backend_->MatMul(gate_.data(), T, L.w_down, proj_.data());
    backend_->Add(x_.data(), proj_.data(), T * H);
  }

  // Final norm and logits only for the rows asked for.
  const int64_t R = static_cast<int64_t>(b.logit_rows.size());
  std::vector<float> picked(R * H);  // [R][H]
  for (int64_t r = 0; r < R; ++r) {
    std::copy_n(x_.data() + b.logit_rows[r] * H, H, picked.data() + r * H);
  }
  std::vector<float> normed(R * H);
  backend_->RmsNorm(picked.data(), w_.output_norm(), R, H, eps, normed.data());
  logits->resize(R * c.vocab_size);  // [R][vocab]
  backend_->MatMul(normed.data(), R, w_.output(), logits->data());
  return absl::OkStatus();
}

}  // namespace tandem::engine
