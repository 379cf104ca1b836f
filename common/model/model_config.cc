#include "common/model/model_config.h"

#include <algorithm>
#include <cmath>

#include "absl/status/status.h"
#include "common/util/status_macros.h"
#include "common/util/strings.h"

namespace tandem::model {

namespace {

absl::Status Invalid(std::string_view key, std::string_view why) {
  return absl::InvalidArgumentError(StrCat("model config: ", key, " ", why));
}

// An optional non-negative integer key; `fallback` when absent.
absl::StatusOr<int64_t> IntOr(const GgufFile& f, const std::string& key, int64_t fallback) {
  if (f.Find(key) == nullptr) return fallback;
  ASSIGN_OR_RETURN(uint64_t v, f.GetUint(key));
  if (v > (int64_t{1} << 40)) return Invalid(key, StrCat("= ", v, " is implausibly large"));
  return static_cast<int64_t>(v);
}

absl::StatusOr<int64_t> RequiredInt(const GgufFile& f, const std::string& key) {
  if (f.Find(key) == nullptr) return Invalid(key, "is missing");
  ASSIGN_OR_RETURN(int64_t v, IntOr(f, key, 0));
  if (v <= 0) return Invalid(key, "must be positive");
  return v;
}

absl::StatusOr<double> FloatOr(const GgufFile& f, const std::string& key, double fallback) {
  if (f.Find(key) == nullptr) return fallback;
  ASSIGN_OR_RETURN(double v, f.GetFloat(key));
  if (!std::isfinite(v)) return Invalid(key, "is not finite");
  return v;
}

absl::StatusOr<int32_t> TokenIdOr(const GgufFile& f, const std::string& key) {
  if (f.Find(key) == nullptr) return -1;
  ASSIGN_OR_RETURN(int64_t v, f.GetInt(key));
  if (v < -1 || v > INT32_MAX) return Invalid(key, StrCat("= ", v, " is not a token id"));
  return static_cast<int32_t>(v);
}

// The mixture-of-experts keys (MoeConfig), with each family's defaults where the
// file does not say (llama.cpp's: Mixtral and Qwen3-MoE renormalise the k weights,
// Qwen2-MoE and OLMoE do not).
absl::Status ReadMoe(const GgufFile& f, const std::string& p, std::string_view arch, MoeConfig* m) {
  const bool moe_arch =
      arch == "qwen3moe" || arch == "qwen2moe" || arch == "olmoe" || arch == "gpt-oss";
  if (moe_arch && f.Find(p + "expert_count") == nullptr) {
    return Invalid(p + "expert_count", StrCat("is missing (", arch, " is a mixture of experts)"));
  }
  ASSIGN_OR_RETURN(m->experts, IntOr(f, p + "expert_count", 0));
  if (m->experts == 0) {
    if (moe_arch) return Invalid(p + "expert_count", "must be positive");
    return absl::OkStatus();
  }
  if (m->experts > 4096)
    return Invalid(p + "expert_count", StrCat("= ", m->experts, " is above 4096"));
  if (f.Find(p + "expert_used_count") == nullptr) {
    return Invalid(p + "expert_used_count", "is missing (the file has experts)");
  }
  ASSIGN_OR_RETURN(m->used, IntOr(f, p + "expert_used_count", 0));
  if (m->used < 1 || m->used > m->experts) {
    return Invalid(p + "expert_used_count",
                   StrCat("= ", m->used, " must be in 1 .. expert_count = ", m->experts));
  }
  ASSIGN_OR_RETURN(m->ffn_size, IntOr(f, p + "expert_feed_forward_length", 0));
  ASSIGN_OR_RETURN(int64_t shared, IntOr(f, p + "expert_shared_count", arch == "qwen2moe" ? 1 : 0));
  if (shared > 1) {
    return absl::UnimplementedError(StrCat("model config: ", p, "expert_shared_count = ", shared,
                                           ": more than one shared expert is not supported"));
  }
  if (shared == 1) {
    ASSIGN_OR_RETURN(m->shared_ffn_size, IntOr(f, p + "expert_shared_feed_forward_length", 0));
    if (m->shared_ffn_size == 0) {
      return Invalid(p + "expert_shared_feed_forward_length",
                     "is missing or zero (a shared expert)");
    }
  }
  ASSIGN_OR_RETURN(m->leading_dense_layers, IntOr(f, p + "leading_dense_block_count", 0));
  ASSIGN_OR_RETURN(int64_t gating, IntOr(f, p + "expert_gating_func", 0));
  if (gating == 0) {  // llama.cpp's "none": the family's own
    gating = static_cast<int64_t>(arch == "gpt-oss" ? ExpertGating::kSoftmaxWeight
                                                    : ExpertGating::kSoftmax);
  }
  if (gating > 3) {
    return Invalid(p + "expert_gating_func",
                   StrCat("= ", gating,
                          " is not a gating function (1 softmax, 2 sigmoid, 3 "
                          "softmax over the picked)"));
  }
  m->gating = static_cast<ExpertGating>(gating);
  m->weights_norm = arch == "llama" || arch == "qwen3moe";
  if (f.Find(p + "expert_weights_norm") != nullptr) {
    ASSIGN_OR_RETURN(m->weights_norm, f.GetBool(p + "expert_weights_norm"));
  }
  ASSIGN_OR_RETURN(m->weights_scale, FloatOr(f, p + "expert_weights_scale", 1.0));
  if (m->weights_scale == 0) m->weights_scale = 1.0;  // 0: unscaled, as llama.cpp reads it
  return absl::OkStatus();
}

}  // namespace

double ModelConfig::RopeAttentionFactor() const {
  if (rope_scaling.type != RopeScalingType::kYarn) return 1.0;
  const double factor = rope_scaling.factor;
  return rope_scaling.attn_factor * (factor <= 1 ? 1.0 : 0.1 * std::log(factor) + 1.0);
}

ModelConfig::ParameterCount ModelConfig::Parameters() const {
  const int64_t h = hidden_size, q_dim = n_heads * head_dim, kv_dim = n_kv_heads * head_dim;
  ParameterCount n;
  const int64_t output = tied_embeddings ? 0 : vocab_size * h;
  n.total = vocab_size * h + output + h;
  n.per_token = h + (tied_embeddings ? vocab_size * h : output) + h;
  for (int64_t l = 0; l < n_layers; ++l) {
    const int64_t attention = h * (q_dim + 2 * kv_dim) + q_dim * h + 2 * h +
                              (post_norms ? 2 * h : 0) + (qkv_bias ? q_dim + 2 * kv_dim : 0) +
                              (qk_norm ? (qk_norm_full ? q_dim + kv_dim : 2 * head_dim) : 0);
    n.total += attention;
    n.per_token += attention;
    if (!LayerIsMoe(l)) {
      n.total += 3 * h * ffn_size;
      n.per_token += 3 * h * ffn_size;
      continue;
    }
    const int64_t expert = 3 * h * moe.ffn_size, shared = 3 * h * moe.shared_ffn_size;
    const int64_t router = moe.experts * h + (moe.shared_ffn_size > 0 ? h : 0);
    n.total += router + moe.experts * expert + shared;
    n.per_token += router + moe.used * expert + shared;
  }
  return n;
}

absl::StatusOr<ModelConfig> ModelConfig::FromGguf(const GgufFile& f) {
  ModelConfig c;
  ASSIGN_OR_RETURN(std::string_view arch, f.GetString("general.architecture"));
  if (arch == "deepseek2") {
    return absl::UnimplementedError(
        StrCat("model config: architecture '", arch,
               "' uses multi-head latent attention (MLA), which tandem does not support"));
  }
  if (arch != "llama" && arch != "mistral" && arch != "qwen2" && arch != "qwen3" &&
      arch != "phi3" && arch != "gemma2" && arch != "gemma3" && arch != "qwen3moe" &&
      arch != "qwen2moe" && arch != "olmoe" && arch != "gpt-oss") {
    return absl::UnimplementedError(
        StrCat("model config: architecture '", arch,
               "' is not supported (llama, mistral, qwen2, qwen3, phi3, gemma2, gemma3, qwen3moe, "
               "qwen2moe, olmoe, gpt-oss)"));
  }
  const bool gemma = arch == "gemma2" || arch == "gemma3";
  c.architecture = std::string(arch);
  if (auto name = f.GetString("general.name"); name.ok()) c.name = std::string(*name);
  const std::string p = c.architecture + ".";

  ASSIGN_OR_RETURN(c.n_layers, RequiredInt(f, p + "block_count"));
  ASSIGN_OR_RETURN(c.hidden_size, RequiredInt(f, p + "embedding_length"));
  ASSIGN_OR_RETURN(c.n_heads, RequiredInt(f, p + "attention.head_count"));
  ASSIGN_OR_RETURN(c.n_kv_heads, IntOr(f, p + "attention.head_count_kv", c.n_heads));
  RETURN_IF_ERROR(ReadMoe(f, p, arch, &c.moe));
  // A mixture of experts may give only its experts' width.
  if (c.moe.experts > 0 && f.Find(p + "feed_forward_length") == nullptr &&
      f.Find(p + "expert_feed_forward_length") != nullptr) {
    c.ffn_size = c.moe.ffn_size;
  } else {
    ASSIGN_OR_RETURN(c.ffn_size, RequiredInt(f, p + "feed_forward_length"));
  }
  if (c.moe.experts > 0 && c.moe.ffn_size == 0) c.moe.ffn_size = c.ffn_size;
  if (c.moe.leading_dense_layers > c.n_layers) {
    return Invalid(p + "leading_dense_block_count",
                   StrCat("= ", c.moe.leading_dense_layers, " exceeds block_count = ", c.n_layers));
  }
  ASSIGN_OR_RETURN(c.context_length, IntOr(f, p + "context_length", 2048));
  ASSIGN_OR_RETURN(c.sliding_window, IntOr(f, p + "attention.sliding_window", 0));
  if (c.sliding_window < 0 || c.sliding_window > INT32_MAX) {
    return Invalid(p + "attention.sliding_window", "must be in 0 .. 2^31 - 1");
  }
  if (arch == "gemma2") c.sliding_window_period = 2;   // local, global, local, ...
  if (arch == "gemma3") c.sliding_window_period = 6;   // five local layers, one global
  if (arch == "gpt-oss") c.sliding_window_period = 2;  // local, global, local, ...
  if (c.n_kv_heads <= 0 || c.n_heads % c.n_kv_heads != 0) {
    return Invalid(p + "attention.head_count_kv",
                   StrCat("= ", c.n_kv_heads, " must divide head_count = ", c.n_heads));
  }
  ASSIGN_OR_RETURN(c.head_dim, IntOr(f, p + "attention.key_length", 0));
  if (c.head_dim == 0) {
    if (c.hidden_size % c.n_heads != 0) {
      return Invalid(p + "attention.head_count",
                     StrCat("= ", c.n_heads, " must divide embedding_length = ", c.hidden_size));
    }
    c.head_dim = c.hidden_size / c.n_heads;
  }
  if (c.head_dim % 2 != 0) return Invalid(p + "attention.key_length", "head dim must be even");
  ASSIGN_OR_RETURN(c.rope_dim, IntOr(f, p + "rope.dimension_count", c.head_dim));
  if (c.rope_dim > c.head_dim || c.rope_dim % 2 != 0) {
    return Invalid(p + "rope.dimension_count", "must be even and at most the head dim");
  }
  ASSIGN_OR_RETURN(c.rms_norm_eps, FloatOr(f, p + "attention.layer_norm_rms_epsilon", 1e-5));
  if (c.rms_norm_eps <= 0)
    return Invalid(p + "attention.layer_norm_rms_epsilon", "must be positive");
  ASSIGN_OR_RETURN(c.rope_theta, FloatOr(f, p + "rope.freq_base", 10000.0));
  if (c.rope_theta <= 0) return Invalid(p + "rope.freq_base", "must be positive");

  if (f.Find(p + "rope.scaling.type") != nullptr) {
    ASSIGN_OR_RETURN(std::string_view type, f.GetString(p + "rope.scaling.type"));
    if (type == "linear") {
      c.rope_scaling.type = RopeScalingType::kLinear;
    } else if (type == "yarn") {
      c.rope_scaling.type = RopeScalingType::kYarn;
    } else if (type != "none") {
      return Invalid(p + "rope.scaling.type", StrCat("'", type, "' is not supported"));
    }
  }
  ASSIGN_OR_RETURN(c.rope_scaling.factor, FloatOr(f, p + "rope.scaling.factor", 1.0));
  ASSIGN_OR_RETURN(c.rope_scaling.original_context_length,
                   IntOr(f, p + "rope.scaling.original_context_length", 0));
  if (c.rope_scaling.type == RopeScalingType::kYarn) {
    RopeScaling& y = c.rope_scaling;
    if (y.factor <= 0) return Invalid(p + "rope.scaling.factor", "must be positive");
    if (y.original_context_length <= 0) {
      return Invalid(p + "rope.scaling.original_context_length", "is missing (YaRN needs it)");
    }
    ASSIGN_OR_RETURN(y.yarn_beta_fast, FloatOr(f, p + "rope.scaling.yarn_beta_fast", 32.0));
    ASSIGN_OR_RETURN(y.yarn_beta_slow, FloatOr(f, p + "rope.scaling.yarn_beta_slow", 1.0));
    if (y.yarn_beta_fast <= 0 || y.yarn_beta_slow <= 0) {
      return Invalid(p + "rope.scaling.yarn_beta_fast", "and yarn_beta_slow must be positive");
    }
    y.yarn_truncate = arch != "gpt-oss";  // gpt-oss's config: truncate false
    if (f.Find(p + "rope.scaling.yarn_truncate") != nullptr) {
      ASSIGN_OR_RETURN(y.yarn_truncate, f.GetBool(p + "rope.scaling.yarn_truncate"));
    }
    ASSIGN_OR_RETURN(y.attn_factor, FloatOr(f, p + "rope.scaling.attn_factor", 1.0));
    if (y.attn_factor <= 0) return Invalid(p + "rope.scaling.attn_factor", "must be positive");
    ASSIGN_OR_RETURN(double ext, FloatOr(f, p + "rope.scaling.yarn_ext_factor", -1.0));
    if (ext >= 0 && ext != 1.0) {
      return absl::UnimplementedError(StrCat("model config: ", p, "rope.scaling.yarn_ext_factor = ",
                                             ext, " is not supported (only YaRN's full ramp, 1)"));
    }
    ASSIGN_OR_RETURN(double log_mul, FloatOr(f, p + "rope.scaling.yarn_log_multiplier", 0.0));
    if (log_mul != 0) {
      return absl::UnimplementedError(
          StrCat("model config: ", p, "rope.scaling.yarn_log_multiplier is not supported"));
    }
  }
  if (f.FindTensor("rope_freqs.weight") != nullptr) {
    c.rope_scaling.type = RopeScalingType::kLlama3;
    c.rope_scaling.has_freq_factors_tensor = true;
  }

  const GgufValue* tokens = f.Find("tokenizer.ggml.tokens");
  int64_t n_tokens = tokens ? static_cast<int64_t>(std::get<GgufArray>(*tokens).count) : 0;
  ASSIGN_OR_RETURN(c.vocab_size, IntOr(f, p + "vocab_size", n_tokens));
  if (c.vocab_size <= 0) return Invalid(p + "vocab_size", "is missing and there is no token list");

  // Gemma: attention scores scaled by query_pre_attn_scalar^-1/2, which GGUF does not
  // store: head_dim, except the 27B models' hidden / heads (46 and 62 layers).
  if (gemma) {
    const bool big =
        (arch == "gemma2" && c.n_layers == 46) || (arch == "gemma3" && c.n_layers == 62);
    // tandem's own key (written for Hugging Face directories, whose config says) first.
    ASSIGN_OR_RETURN(int64_t scalar, IntOr(f, p + "attention.query_pre_attn_scalar",
                                           big ? c.hidden_size / c.n_heads : c.head_dim));
    if (scalar <= 0) return Invalid(p + "attention.query_pre_attn_scalar", "must be positive");
    c.attention_scale = 1.0 / std::sqrt(static_cast<double>(scalar));
    c.embedding_scale = std::sqrt(static_cast<double>(c.hidden_size));
    c.ffn_activation = FfnActivation::kGeluTanh;
    c.post_norms = true;
    ASSIGN_OR_RETURN(c.attn_softcap, FloatOr(f, p + "attn_logit_softcapping", 0.0));
    ASSIGN_OR_RETURN(c.final_softcap, FloatOr(f, p + "final_logit_softcapping", 0.0));
    if (c.attn_softcap < 0 || c.final_softcap < 0) {
      return Invalid(p + "attn_logit_softcapping",
                     "and final_logit_softcapping must not be negative");
    }
  }
  if (arch == "gemma3") c.rope_theta_local = 10000.0;  // GGUF's freq_base is the global one
  if (arch == "phi3") {
    c.fused_qkv = f.FindTensor("blk.0.attn_qkv.weight") != nullptr;
    c.fused_gate_up = f.FindTensor("blk.0.ffn_gate.weight") == nullptr;
    if (f.FindTensor("rope_factors_long.weight") != nullptr) {
      return absl::UnimplementedError(
          "model config: Phi-3's LongRoPE (rope_factors_long / rope_factors_short) is not "
          "supported yet");
    }
  }

  c.tied_embeddings = f.FindTensor("output.weight") == nullptr;
  c.qkv_bias = f.FindTensor("blk.0.attn_q.bias") != nullptr;
  // NeoX-style RoPE: llama.cpp's converter permutes Q/K for adjacent pairs only for
  // llama and mistral.
  c.rope_halves = arch == "qwen2" || arch == "qwen3" || arch == "phi3" || gemma ||
                  arch == "qwen3moe" || arch == "qwen2moe" || arch == "olmoe" || arch == "gpt-oss";
  if (arch == "gpt-oss") {
    // OpenAI's clamped SwiGLU, biases on the attention output, attention sinks.
    c.ffn_activation = FfnActivation::kSwigluOai;
    c.attn_sinks = true;
  }
  // Qwen3 and Gemma 3 always have it (loading then requires the tensors); others where
  // the file does.
  c.qk_norm = arch == "qwen3" || arch == "gemma3" || arch == "qwen3moe" || arch == "olmoe" ||
              f.FindTensor("blk.0.attn_q_norm.weight") != nullptr;
  c.qk_norm_full = arch == "olmoe";
  if (arch == "olmoe" && f.Find(p + "attention.clamp_kqv") != nullptr) {
    return absl::UnimplementedError(
        StrCat("model config: ", p, "attention.clamp_kqv (OLMoE's clip_qkv) is not supported"));
  }

  ASSIGN_OR_RETURN(c.bos_token_id, TokenIdOr(f, "tokenizer.ggml.bos_token_id"));
  ASSIGN_OR_RETURN(c.eos_token_id, TokenIdOr(f, "tokenizer.ggml.eos_token_id"));
  ASSIGN_OR_RETURN(c.pad_token_id, TokenIdOr(f, "tokenizer.ggml.padding_token_id"));
  ASSIGN_OR_RETURN(c.unk_token_id, TokenIdOr(f, "tokenizer.ggml.unknown_token_id"));
  for (auto [key, id] :
       {std::pair{"bos", c.bos_token_id}, std::pair{"eos", c.eos_token_id},
        std::pair{"padding", c.pad_token_id}, std::pair{"unknown", c.unk_token_id}}) {
    if (id >= c.vocab_size) {
      return Invalid(StrCat("tokenizer.ggml.", key, "_token_id"),
                     StrCat("= ", id, " is outside the vocabulary of ", c.vocab_size));
    }
  }
  if (auto t = f.GetString("tokenizer.chat_template"); t.ok()) c.chat_template = std::string(*t);
  return c;
}

}  // namespace tandem::model
