#include "common/engine/model_weights.h"

#include <cstdint>

#include "absl/status/status.h"
#include "common/model/dequantize.h"
#include "common/util/status_macros.h"
#include "common/util/strings.h"
#include "kernels/cpu/ops.h"

namespace tandem::engine {

using model::GgmlType;
using model::GgufFile;

absl::StatusOr<WeightMatrix> ModelWeights::Matrix(const GgufFile& f, const std::string& name,
                                                  int64_t rows, int64_t cols) {
  const model::GgufTensorInfo* t = f.FindTensor(name);
  if (t == nullptr)
    return absl::InvalidArgumentError(StrCat("model: tensor '", name, "' is missing"));
  if (t->n_dims != 2 || t->ne[0] != cols || t->ne[1] != rows) {
    return absl::InvalidArgumentError(StrCat("model: tensor '", name, "' has shape [", t->ne[0],
                                             ", ", t->ne[1], "], expected [", cols, ", ", rows,
                                             "]"));
  }
  return Place(*t, name, rows, cols);
}

absl::StatusOr<WeightMatrix> ModelWeights::Place(const model::GgufTensorInfo& t,
                                                 const std::string& name, int64_t rows,
                                                 int64_t cols) {
  WeightMatrix w{t.type, rows, cols, t.data.data()};
  // Used in place where MatMul reads it; a float32 tensor must also be float-aligned (a
  // safetensors file need not align it).
  const bool aligned =
      t.type != GgmlType::kF32 || reinterpret_cast<uintptr_t>(t.data.data()) % alignof(float) == 0;
  if (kernels::MatMulSupports(t.type) && cols % 32 == 0 && aligned) {
    weight_bytes_ += static_cast<int64_t>(t.n_bytes);
    return w;
  }
  if (!model::Traits(t.type).can_dequantize) {
    return absl::UnimplementedError(
        StrCat("model: tensor '", name, "' has unsupported type ", model::GgmlTypeName(t.type)));
  }
  weight_bytes_ += rows * cols * 4;
  converted_bytes_ += rows * cols * 4;
  w.type = GgmlType::kF32;
  if (check_only_) return w;
  ASSIGN_OR_RETURN(std::vector<float> values, model::DequantizeTensor(t));
  owned_.push_back(std::move(values));
  w.data = reinterpret_cast<const uint8_t*>(owned_.back().data());
  return w;
}

namespace {

// Rows first .. first + n of `w`, in place.
WeightMatrix Rows(const WeightMatrix& w, int64_t first, int64_t n) {
  WeightMatrix r = w;
  r.rows = n;
  if (w.data != nullptr) r.data = w.data + first * static_cast<int64_t>(w.RowBytes());
  return r;
}

}  // namespace

absl::StatusOr<std::vector<WeightMatrix>> ModelWeights::Experts(const GgufFile& f,
                                                                const std::string& base,
                                                                int64_t experts, int64_t rows,
                                                                int64_t cols) {
  std::vector<WeightMatrix> out;
  const int64_t before = weight_bytes_;
  const std::string stacked = base + "_exps.weight";
  if (const model::GgufTensorInfo* t = f.FindTensor(stacked); t != nullptr) {
    if (t->n_dims != 3 || t->ne[0] != cols || t->ne[1] != rows || t->ne[2] != experts) {
      return absl::InvalidArgumentError(
          StrCat("model: tensor '", stacked, "' has shape [", t->ne[0], ", ", t->ne[1], ", ",
                 t->ne[2], "], expected [", cols, ", ", rows, ", ", experts, "]"));
    }
    ASSIGN_OR_RETURN(WeightMatrix all, Place(*t, stacked, experts * rows, cols));
    for (int64_t e = 0; e < experts; ++e) out.push_back(Rows(all, e * rows, rows));
    expert_bytes_ += weight_bytes_ - before;
    return out;
  }
  if (f.FindTensor(StrCat(base, ".0.weight")) == nullptr) {
    return absl::InvalidArgumentError(StrCat("model: tensor '", stacked,
                                             "' is missing (nor are there per-expert tensors '",
                                             base, ".0.weight', ...)"));
  }
  for (int64_t e = 0; e < experts; ++e) {
    ASSIGN_OR_RETURN(WeightMatrix m, Matrix(f, StrCat(base, ".", e, ".weight"), rows, cols));
    out.push_back(m);
  }
  expert_bytes_ += weight_bytes_ - before;
  return out;
}

absl::StatusOr<const float*> ModelWeights::Vector(const GgufFile& f, const std::string& name,
                                                  int64_t n, bool optional) {
  const model::GgufTensorInfo* t = f.FindTensor(name);
  if (t == nullptr) {
    if (optional) return nullptr;
    return absl::InvalidArgumentError(StrCat("model: tensor '", name, "' is missing"));
  }
  if (static_cast<int64_t>(t->n_elements) != n) {
    return absl::InvalidArgumentError(
        StrCat("model: tensor '", name, "' has ", t->n_elements, " elements, expected ", n));
  }
  weight_bytes_ += n * 4;
  if (t->type == GgmlType::kF32 &&
      reinterpret_cast<uintptr_t>(t->data.data()) % alignof(float) == 0) {
    return reinterpret_cast<const float*>(t->data.data());
  }
  if (!model::Traits(t->type).can_dequantize) {
    return absl::UnimplementedError(
        StrCat("model: tensor '", name, "' has unsupported type ", model::GgmlTypeName(t->type)));
  }
  converted_bytes_ += n * 4;
  if (check_only_) return nullptr;
  ASSIGN_OR_RETURN(std::vector<float> values, model::DequantizeTensor(*t));
  owned_.push_back(std::move(values));
  return owned_.back().data();
}

int64_t ModelWeights::token_read_bytes() const {
  const model::MoeConfig& m = config_.moe;
  if (m.experts == 0) return weight_bytes_;
  return weight_bytes_ - expert_bytes_ + expert_bytes_ * m.used / m.experts;
}

absl::StatusOr<ModelWeights::Footprint> ModelWeights::Check(const GgufFile& f,
                                                            const model::ModelConfig& c) {
  std::unique_ptr<ModelWeights> w(new ModelWeights());
  w->check_only_ = true;
  RETURN_IF_ERROR(w->LoadInto(f, c, {}));
  return Footprint{w->weight_bytes_ - w->converted_bytes_, w->converted_bytes_};
}

absl::StatusOr<std::unique_ptr<ModelWeights>> ModelWeights::Load(
    const GgufFile& f, const model::ModelConfig& c, const std::function<void(int, int)>& progress) {
  std::unique_ptr<ModelWeights> w(new ModelWeights());
  RETURN_IF_ERROR(w->LoadInto(f, c, progress));
  return w;
}

absl::Status ModelWeights::LoadInto(const GgufFile& f, const model::ModelConfig& c,
                                    const std::function<void(int, int)>& progress) {
  ModelWeights* w = this;
  w->config_ = c;
  const int64_t h = c.hidden_size, q_dim = c.n_heads * c.head_dim,
                kv_dim = c.n_kv_heads * c.head_dim;
  ASSIGN_OR_RETURN(w->token_embd_, w->Matrix(f, "token_embd.weight", c.vocab_size, h));
  if (c.tied_embeddings) {
    w->output_ = w->token_embd_;
  } else {
    ASSIGN_OR_RETURN(w->output_, w->Matrix(f, "output.weight", c.vocab_size, h));
  }
  ASSIGN_OR_RETURN(w->output_norm_, w->Vector(f, "output_norm.weight", h));
  if (c.rope_scaling.has_freq_factors_tensor) {
    ASSIGN_OR_RETURN(w->rope_freqs_, w->Vector(f, "rope_freqs.weight", c.rope_dim / 2));
  } else if (c.rope_scaling.type == model::RopeScalingType::kYarn) {
    const model::RopeScaling& y = c.rope_scaling;
    w->owned_.push_back(kernels::YarnFreqFactors(
        {y.factor, static_cast<double>(y.original_context_length), y.yarn_beta_fast,
         y.yarn_beta_slow, y.yarn_truncate},
        static_cast<float>(c.rope_theta), static_cast<int32_t>(c.rope_dim)));
    w->rope_freqs_ = w->owned_.back().data();
    w->weight_bytes_ += c.rope_dim / 2 * 4;
  }
  const int total = static_cast<int>(c.n_layers);
  for (int64_t i = 0; i < c.n_layers; ++i) {
    const std::string p = StrCat("blk.", i, ".");
    LayerWeights L;
    ASSIGN_OR_RETURN(L.attn_norm, w->Vector(f, p + "attn_norm.weight", h));
    if (c.fused_qkv) {
      ASSIGN_OR_RETURN(WeightMatrix qkv,
                       w->Matrix(f, p + "attn_qkv.weight", q_dim + 2 * kv_dim, h));
      L.wq = Rows(qkv, 0, q_dim);
      L.wk = Rows(qkv, q_dim, kv_dim);
      L.wv = Rows(qkv, q_dim + kv_dim, kv_dim);
    } else {
      ASSIGN_OR_RETURN(L.wq, w->Matrix(f, p + "attn_q.weight", q_dim, h));
      ASSIGN_OR_RETURN(L.wk, w->Matrix(f, p + "attn_k.weight", kv_dim, h));
      ASSIGN_OR_RETURN(L.wv, w->Matrix(f, p + "attn_v.weight", kv_dim, h));
    }
    ASSIGN_OR_RETURN(L.bq, w->Vector(f, p + "attn_q.bias", q_dim, /*optional=*/true));
    ASSIGN_OR_RETURN(L.bk, w->Vector(f, p + "attn_k.bias", kv_dim, true));
    ASSIGN_OR_RETURN(L.bv, w->Vector(f, p + "attn_v.bias", kv_dim, true));
    if (c.qk_norm) {
      ASSIGN_OR_RETURN(L.q_norm,
                       w->Vector(f, p + "attn_q_norm.weight", c.qk_norm_full ? q_dim : c.head_dim));
      ASSIGN_OR_RETURN(
          L.k_norm, w->Vector(f, p + "attn_k_norm.weight", c.qk_norm_full ? kv_dim : c.head_dim));
    }
    ASSIGN_OR_RETURN(L.wo, w->Matrix(f, p + "attn_output.weight", h, q_dim));
    ASSIGN_OR_RETURN(L.bo, w->Vector(f, p + "attn_output.bias", h, /*optional=*/true));
    if (c.attn_sinks) {
      ASSIGN_OR_RETURN(L.sinks, w->Vector(f, p + "attn_sinks.weight", c.n_heads));
    }
    // gpt-oss stores the FFN's input norm as post_attention_norm.
    ASSIGN_OR_RETURN(
        L.ffn_norm,
        w->Vector(f, p + (c.attn_sinks ? "post_attention_norm" : "ffn_norm") + ".weight", h));
    if (c.post_norms) {
      ASSIGN_OR_RETURN(L.post_attn_norm, w->Vector(f, p + "post_attention_norm.weight", h));
      ASSIGN_OR_RETURN(L.post_ffn_norm, w->Vector(f, p + "post_ffw_norm.weight", h));
    }
    if (c.LayerIsMoe(i)) {
      const model::MoeConfig& m = c.moe;
      ASSIGN_OR_RETURN(L.router, w->Matrix(f, p + "ffn_gate_inp.weight", m.experts, h));
      ASSIGN_OR_RETURN(L.router_bias,
                       w->Vector(f, p + "exp_probs_b.bias", m.experts, /*optional=*/true));
      ASSIGN_OR_RETURN(L.router_logit_bias,
                       w->Vector(f, p + "ffn_gate_inp.bias", m.experts, /*optional=*/true));
      ASSIGN_OR_RETURN(L.expert_gate_bias, w->Vector(f, p + "ffn_gate_exps.bias",
                                                     m.experts * m.ffn_size, /*optional=*/true));
      ASSIGN_OR_RETURN(L.expert_up_bias, w->Vector(f, p + "ffn_up_exps.bias",
                                                   m.experts * m.ffn_size, /*optional=*/true));
      ASSIGN_OR_RETURN(L.expert_down_bias,
                       w->Vector(f, p + "ffn_down_exps.bias", m.experts * h, /*optional=*/true));
      ASSIGN_OR_RETURN(L.expert_gate, w->Experts(f, p + "ffn_gate", m.experts, m.ffn_size, h));
      ASSIGN_OR_RETURN(L.expert_up, w->Experts(f, p + "ffn_up", m.experts, m.ffn_size, h));
      ASSIGN_OR_RETURN(L.expert_down, w->Experts(f, p + "ffn_down", m.experts, h, m.ffn_size));
      if (m.shared_ffn_size > 0) {
        ASSIGN_OR_RETURN(L.shared_gate, w->Vector(f, p + "ffn_gate_inp_shexp.weight", h));
        ASSIGN_OR_RETURN(L.w_gate, w->Matrix(f, p + "ffn_gate_shexp.weight", m.shared_ffn_size, h));
        ASSIGN_OR_RETURN(L.w_up, w->Matrix(f, p + "ffn_up_shexp.weight", m.shared_ffn_size, h));
        ASSIGN_OR_RETURN(L.w_down, w->Matrix(f, p + "ffn_down_shexp.weight", h, m.shared_ffn_size));
      }
      w->layers_.push_back(std::move(L));
      if (progress) progress(static_cast<int>(i + 1), total);
      continue;
    }
    if (c.fused_gate_up) {
      ASSIGN_OR_RETURN(WeightMatrix gate_up, w->Matrix(f, p + "ffn_up.weight", 2 * c.ffn_size, h));
      L.w_gate = Rows(gate_up, 0, c.ffn_size);
      L.w_up = Rows(gate_up, c.ffn_size, c.ffn_size);
    } else {
      ASSIGN_OR_RETURN(L.w_gate, w->Matrix(f, p + "ffn_gate.weight", c.ffn_size, h));
      ASSIGN_OR_RETURN(L.w_up, w->Matrix(f, p + "ffn_up.weight", c.ffn_size, h));
    }
    ASSIGN_OR_RETURN(L.w_down, w->Matrix(f, p + "ffn_down.weight", h, c.ffn_size));
    w->layers_.push_back(L);
    if (progress) progress(static_cast<int>(i + 1), total);
  }
  return absl::OkStatus();
}

}  // namespace tandem::engine
