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

}  // namespace

absl::StatusOr<ModelConfig> ModelConfig::FromGguf(const GgufFile& f) {
  ModelConfig c;
  ASSIGN_OR_RETURN(std::string_view arch, f.GetString("general.architecture"));
  if (arch != "llama" && arch != "mistral" && arch != "qwen2" && arch != "qwen3" &&
      arch != "phi3" && arch != "gemma2" && arch != "gemma3") {
    return absl::UnimplementedError(
        StrCat("model config: architecture '", arch,
               "' is not supported (llama, mistral, qwen2, qwen3, phi3, gemma2, gemma3)"));
  }
  const bool gemma = arch == "gemma2" || arch == "gemma3";
  c.architecture = std::string(arch);
  if (auto name = f.GetString("general.name"); name.ok()) c.name = std::string(*name);
  const std::string p = c.architecture + ".";

  ASSIGN_OR_RETURN(c.n_layers, RequiredInt(f, p + "block_count"));
  ASSIGN_OR_RETURN(c.hidden_size, RequiredInt(f, p + "embedding_length"));
  ASSIGN_OR_RETURN(c.n_heads, RequiredInt(f, p + "attention.head_count"));
  ASSIGN_OR_RETURN(c.n_kv_heads, IntOr(f, p + "attention.head_count_kv", c.n_heads));
  ASSIGN_OR_RETURN(c.ffn_size, RequiredInt(f, p + "feed_forward_length"));
  ASSIGN_OR_RETURN(c.context_length, IntOr(f, p + "context_length", 2048));
  ASSIGN_OR_RETURN(c.sliding_window, IntOr(f, p + "attention.sliding_window", 0));
  if (c.sliding_window < 0 || c.sliding_window > INT32_MAX) {
    return Invalid(p + "attention.sliding_window", "must be in 0 .. 2^31 - 1");
  }
  if (arch == "gemma2") c.sliding_window_period = 2;  // local, global, local, ...
  if (arch == "gemma3") c.sliding_window_period = 6;  // five local layers, one global
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
  c.rope_halves = arch == "qwen2" || arch == "qwen3" || arch == "phi3" || gemma;
  // Qwen3 and Gemma 3 always have it (loading then requires the tensors); others where
  // the file does.
  c.qk_norm =
      arch == "qwen3" || arch == "gemma3" || f.FindTensor("blk.0.attn_q_norm.weight") != nullptr;

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
