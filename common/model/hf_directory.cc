#include "common/model/hf_directory.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <set>
#include <tuple>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "common/model/dequantize.h"
#include "common/model/gguf_writer.h"
#include "common/model/safetensors_file.h"
#include "common/tokenizer/pre_tokenizer.h"
#include "common/tokenizer/sentencepiece_bpe.h"
#include "common/util/status_macros.h"
#include "common/util/strings.h"
#include "common/util/utf8.h"
#include "nlohmann/json.hpp"

namespace tandem::model {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr uintmax_t kMaxJsonBytes = 100'000'000;
constexpr int64_t kMaxHeadDim = 4096;

bool Exists(const fs::path& p) {
  std::error_code ec;
  return fs::exists(p, ec);
}

absl::Status Bad(const fs::path& file, std::string_view why) {
  return absl::InvalidArgumentError(StrCat(file.filename().string(), ": ", why));
}

absl::StatusOr<json> ReadJson(const fs::path& p) {
  std::error_code ec;
  const uintmax_t size = fs::file_size(p, ec);
  if (ec) return absl::NotFoundError(StrCat(p.string(), ": ", ec.message()));
  if (size > kMaxJsonBytes) return Bad(p, "is larger than 100 MB");
  std::ifstream in(p, std::ios::binary);
  std::string text(size, '\0');
  in.read(text.data(), static_cast<std::streamsize>(size));
  if (!in) return Bad(p, "could not be read");
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Bad(p, "is not valid JSON");
  if (!j.is_object()) return Bad(p, "is not a JSON object");
  return j;
}

// config.json's numbers, checked as they are read.
class Config {
 public:
  Config(const json& j, fs::path file) : j_(j), file_(std::move(file)) {}
  bool Has(const std::string& key) const { return j_.contains(key) && !j_.at(key).is_null(); }
  absl::StatusOr<int64_t> Int(const std::string& key, std::optional<int64_t> fallback = {}) const {
    if (!Has(key)) {
      if (fallback) return *fallback;
      return Bad(file_, StrCat("'", key, "' is missing"));
    }
    const json& v = j_.at(key);
    if (!v.is_number_integer() || v.get<int64_t>() <= 0 || v.get<int64_t>() > (int64_t{1} << 40)) {
      return Bad(file_, StrCat("'", key, "' must be a positive integer"));
    }
    return v.get<int64_t>();
  }
  absl::StatusOr<double> Float(const json& obj, const std::string& key, double fallback) const {
    if (!obj.contains(key) || obj.at(key).is_null()) return fallback;
    const json& v = obj.at(key);
    if (!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() < 0) {
      return Bad(file_, StrCat("'", key, "' must be a non-negative number"));
    }
    return v.get<double>();
  }
  absl::StatusOr<double> Float(const std::string& key, double fallback) const {
    return Float(j_, key, fallback);
  }
  const json& j() const { return j_; }

 private:
  const json& j_;
  fs::path file_;
};

struct Arch {
  std::string_view hf, gguf;
};
constexpr Arch kArchs[] = {
    {"LlamaForCausalLM", "llama"},       {"MistralForCausalLM", "mistral"},
    {"Qwen2ForCausalLM", "qwen2"},       {"Qwen3ForCausalLM", "qwen3"},
    {"Phi3ForCausalLM", "phi3"},         {"Gemma2ForCausalLM", "gemma2"},
    {"Gemma3ForCausalLM", "gemma3"},     {"Qwen3MoeForCausalLM", "qwen3moe"},
    {"MixtralForCausalLM", "llama"},     {"OlmoeForCausalLM", "olmoe"},
    {"Qwen2MoeForCausalLM", "qwen2moe"}, {"GptOssForCausalLM", "gpt-oss"},
};

// A mixture of experts' config.json keys → the expert_* metadata (model_config.h's
// MoeConfig). Qwen's decoder_sparse_step / mlp_only_layers (dense layers between the
// sparse ones) and OLMoE's clip_qkv are refused.
absl::Status MoeMetadata(const Config& c, std::string_view hf_arch, const fs::path& file,
                         GgufWriter* w, const std::string& p) {
  // transformers 5 writes num_local_experts for every family; older configs
  // num_experts (Qwen, OLMoE).
  const std::string count_key = c.Has("num_local_experts") ? "num_local_experts" : "num_experts";
  ASSIGN_OR_RETURN(int64_t experts, c.Int(count_key));
  ASSIGN_OR_RETURN(int64_t used, c.Int("num_experts_per_tok"));
  if (experts < 1 || experts > 4096 || used < 1 || used > experts) {
    return Bad(file, StrCat("'num_experts_per_tok' = ", used, " must be in 1 .. '", count_key,
                            "' = ", experts));
  }
  w->Uint32(p + "expert_count", static_cast<uint32_t>(experts))
      .Uint32(p + "expert_used_count", static_cast<uint32_t>(used));
  if (c.Has("moe_intermediate_size")) {
    ASSIGN_OR_RETURN(int64_t f, c.Int("moe_intermediate_size"));
    w->Uint32(p + "expert_feed_forward_length", static_cast<uint32_t>(f));
  }
  if (c.Has("norm_topk_prob")) {
    if (!c.j().at("norm_topk_prob").is_boolean()) {
      return Bad(file, "'norm_topk_prob' must be true or false");
    }
    w->Bool(p + "expert_weights_norm", c.j().at("norm_topk_prob").get<bool>());
  }
  if (c.Has("shared_expert_intermediate_size")) {
    ASSIGN_OR_RETURN(int64_t f, c.Int("shared_expert_intermediate_size"));
    w->Uint32(p + "expert_shared_count", 1)
        .Uint32(p + "expert_shared_feed_forward_length", static_cast<uint32_t>(f));
  }
  ASSIGN_OR_RETURN(int64_t step, c.Int("decoder_sparse_step", 1));
  if (step != 1 || (c.Has("mlp_only_layers") && !c.j().at("mlp_only_layers").empty())) {
    return absl::UnimplementedError(
        "config.json: dense layers between the sparse ones (decoder_sparse_step, "
        "mlp_only_layers) are not supported");
  }
  if (c.Has("clip_qkv")) {
    return absl::UnimplementedError("config.json: OLMoE's clip_qkv is not supported");
  }
  return absl::OkStatus();
}

// The RoPE section (transformers 5's rope_parameters, or the older rope_theta and
// rope_scaling) → rope.* metadata. Gemma 3's holds one entry per layer kind; the
// global layers' is the file's.
// Llama 3.1's frequency factors (rope_type "llama3"), one per rotated pair, as
// llama.cpp's converter stores them in rope_freqs.weight: 1 for wavelengths shorter than
// original_context / high_freq_factor, `factor` for those longer than original_context /
// low_freq_factor, and a smooth blend between.
absl::StatusOr<std::vector<float>> Llama3Factors(const Config& c, const json& params, double theta,
                                                 int64_t head_dim, const fs::path& file) {
  ASSIGN_OR_RETURN(double factor, c.Float(params, "factor", 8.0));
  ASSIGN_OR_RETURN(double low, c.Float(params, "low_freq_factor", 1.0));
  ASSIGN_OR_RETURN(double high, c.Float(params, "high_freq_factor", 4.0));
  ASSIGN_OR_RETURN(double original, c.Float(params, "original_max_position_embeddings", 8192));
  if (factor <= 0 || low <= 0 || high <= low || original <= 0) {
    return Bad(file,
               "llama3 RoPE scaling needs factor > 0 and 0 < low_freq_factor < high_freq_factor");
  }
  std::vector<float> factors;
  for (int64_t i = 0; i < head_dim; i += 2) {
    const double freq =
        1.0 / std::pow(theta, static_cast<double>(i) / static_cast<double>(head_dim));
    const double wavelen = 2 * M_PI / freq;
    if (wavelen < original / high) {
      factors.push_back(1.0f);
    } else if (wavelen > original / low) {
      factors.push_back(static_cast<float>(factor));
    } else {
      const double smooth = (original / wavelen - low) / (high - low);
      factors.push_back(static_cast<float>(1.0 / ((1 - smooth) / factor + smooth)));
    }
  }
  return factors;
}

absl::Status RopeMetadata(const Config& c, std::string_view arch, const fs::path& file,
                          GgufWriter* w, const std::string& p, int64_t head_dim,
                          std::vector<float>* llama3_factors) {
  const json* params = nullptr;
  if (c.Has("rope_parameters")) {
    params = &c.j().at("rope_parameters");
    if (arch == "gemma3" && params->contains("full_attention"))
      params = &params->at("full_attention");
  } else if (c.Has("rope_scaling")) {
    params = &c.j().at("rope_scaling");
  }
  if (params != nullptr && !params->is_object())
    return Bad(file, "'rope_parameters' must be an object");
  double theta = 10000.0;
  ASSIGN_OR_RETURN(theta, c.Float("rope_theta", theta));
  if (params != nullptr) {
    ASSIGN_OR_RETURN(theta, c.Float(*params, "rope_theta", theta));
  }
  if (theta <= 0) return Bad(file, "'rope_theta' must be positive");
  w->Float32(p + "rope.freq_base", static_cast<float>(theta));
  std::string type = "default";
  if (params != nullptr) {
    for (const char* key : {"rope_type", "type"}) {
      if (params->contains(key) && params->at(key).is_string()) type = params->at(key);
    }
  }
  if (type == "linear") {
    ASSIGN_OR_RETURN(double factor, c.Float(*params, "factor", 1.0));
    w->String(p + "rope.scaling.type", "linear").Float32(p + "rope.scaling.factor", factor);
  } else if (type == "yarn") {
    // transformers' _compute_yarn_parameters: the factor (or max_position_embeddings /
    // original_max_position_embeddings), the ramp's betas and truncation, and an
    // attention factor given outright or by mscale / mscale_all_dim — stored as
    // rope.scaling.attn_factor, the multiple of YaRN's own 1 + 0.1 · ln(factor).
    ASSIGN_OR_RETURN(int64_t context, c.Int("max_position_embeddings", 2048));
    ASSIGN_OR_RETURN(double original, c.Float(*params, "original_max_position_embeddings",
                                              static_cast<double>(context)));
    if (original <= 0) return Bad(file, "'original_max_position_embeddings' must be positive");
    ASSIGN_OR_RETURN(double factor, c.Float(*params, "factor", context / original));
    if (factor <= 0) return Bad(file, "the YaRN 'factor' must be positive");
    ASSIGN_OR_RETURN(double beta_fast, c.Float(*params, "beta_fast", 32.0));
    ASSIGN_OR_RETURN(double beta_slow, c.Float(*params, "beta_slow", 1.0));
    bool truncate = true;
    if (params->contains("truncate") && !params->at("truncate").is_null()) {
      if (!params->at("truncate").is_boolean())
        return Bad(file, "'truncate' must be true or false");
      truncate = params->at("truncate").get<bool>();
    }
    auto mscale = [](double scale, double m) {
      return scale <= 1 ? 1.0 : 0.1 * m * std::log(scale) + 1.0;
    };
    double attention = mscale(factor, 1.0);
    ASSIGN_OR_RETURN(double ms, c.Float(*params, "mscale", 0.0));
    ASSIGN_OR_RETURN(double ms_all, c.Float(*params, "mscale_all_dim", 0.0));
    if (ms != 0 && ms_all != 0) attention = mscale(factor, ms) / mscale(factor, ms_all);
    ASSIGN_OR_RETURN(attention, c.Float(*params, "attention_factor", attention));
    if (attention <= 0) return Bad(file, "'attention_factor' must be positive");
    w->String(p + "rope.scaling.type", "yarn")
        .Float32(p + "rope.scaling.factor", static_cast<float>(factor))
        .Uint32(p + "rope.scaling.original_context_length", static_cast<uint32_t>(original))
        .Float32(p + "rope.scaling.yarn_beta_fast", static_cast<float>(beta_fast))
        .Float32(p + "rope.scaling.yarn_beta_slow", static_cast<float>(beta_slow))
        .Bool(p + "rope.scaling.yarn_truncate", truncate)
        .Float32(p + "rope.scaling.attn_factor",
                 static_cast<float>(attention / mscale(factor, 1.0)));
  } else if (type == "llama3" && (arch == "llama" || arch == "mistral")) {
    ASSIGN_OR_RETURN(*llama3_factors, Llama3Factors(c, *params, theta, head_dim, file));
  } else if (type != "default") {
    return absl::UnimplementedError(StrCat(file.filename().string(), ": RoPE scaling '", type,
                                           "' is not supported from a Hugging Face directory "
                                           "yet (use a GGUF of the model)"));
  }
  return absl::OkStatus();
}

// Which layers slide, as transformers' layer_types says: tandem's rule for the
// architecture must agree.
absl::Status CheckLayerTypes(const Config& c, std::string_view arch, int64_t layers,
                             const fs::path& file) {
  if (!c.Has("layer_types")) return absl::OkStatus();
  const json& types = c.j().at("layer_types");
  if (!types.is_array() || static_cast<int64_t>(types.size()) != layers) {
    return Bad(file, "'layer_types' must list every layer");
  }
  const int64_t period = arch == "gemma2" || arch == "gpt-oss" ? 2 : arch == "gemma3" ? 6 : 0;
  for (int64_t l = 0; l < layers; ++l) {
    const bool local = period == 0 || l % period != period - 1;
    const json& t = types.at(l);
    if (!t.is_string() || (t == "sliding_attention") != local) {
      return absl::UnimplementedError(StrCat(file.filename().string(), ": layer_types[", l,
                                             "] differs from ", arch,
                                             "'s pattern of sliding and full attention layers"));
    }
  }
  return absl::OkStatus();
}

// What the tensor conversion needs from config.json, as checked.
struct Shape {
  int64_t heads = 0, kv_heads = 0;
  bool tied = false;
};

absl::Status ConfigMetadata(const fs::path& dir, std::string* arch_out, GgufWriter* w,
                            json* config_out, std::vector<float>* llama3_factors, Shape* shape) {
  const fs::path file = dir / "config.json";
  ASSIGN_OR_RETURN(*config_out, ReadJson(file));
  const Config c(*config_out, file);
  if (!c.Has("architectures") || !c.j().at("architectures").is_array() ||
      c.j().at("architectures").empty() || !c.j().at("architectures")[0].is_string()) {
    return Bad(file, "'architectures' must name the model class");
  }
  const std::string hf_arch = c.j().at("architectures")[0];
  std::string_view arch;
  for (const Arch& a : kArchs) {
    if (a.hf == hf_arch) arch = a.gguf;
  }
  if (arch.empty()) {
    return absl::UnimplementedError(
        StrCat("config.json: architecture '", hf_arch,
               "' is not supported (LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, "
               "Qwen3ForCausalLM, Phi3ForCausalLM, Gemma2ForCausalLM, Gemma3ForCausalLM, "
               "Qwen3MoeForCausalLM, MixtralForCausalLM, OlmoeForCausalLM, "
               "Qwen2MoeForCausalLM, GptOssForCausalLM)"));
  }
  *arch_out = std::string(arch);
  const std::string p = *arch_out + ".";
  w->String("general.architecture", arch).String("general.name", dir.filename().string());
  ASSIGN_OR_RETURN(int64_t layers, c.Int("num_hidden_layers"));
  ASSIGN_OR_RETURN(int64_t hidden, c.Int("hidden_size"));
  ASSIGN_OR_RETURN(int64_t heads, c.Int("num_attention_heads"));
  ASSIGN_OR_RETURN(int64_t kv_heads, c.Int("num_key_value_heads", heads));
  ASSIGN_OR_RETURN(int64_t ffn, c.Int("intermediate_size"));
  ASSIGN_OR_RETURN(int64_t context, c.Int("max_position_embeddings", 2048));
  ASSIGN_OR_RETURN(int64_t vocab, c.Int("vocab_size"));
  ASSIGN_OR_RETURN(int64_t head_dim, c.Int("head_dim", hidden / heads));
  if (head_dim > kMaxHeadDim || head_dim % 2 != 0 || heads > hidden || kv_heads > heads) {
    return Bad(file,
               StrCat("head_dim ", head_dim, " (even, at most ", kMaxHeadDim, "), ", heads,
                      " heads and ", kv_heads, " KV heads do not fit a hidden size of ", hidden));
  }
  shape->heads = heads;
  shape->kv_heads = kv_heads;
  shape->tied = arch == "gemma2" || arch == "gemma3";
  if (c.Has("tie_word_embeddings")) {
    if (!c.j().at("tie_word_embeddings").is_boolean()) {
      return Bad(file, "'tie_word_embeddings' must be true or false");
    }
    shape->tied = c.j().at("tie_word_embeddings").get<bool>();
  }
  ASSIGN_OR_RETURN(double eps, c.Float("rms_norm_eps", 1e-6));
  const auto u32 = [](int64_t v) {
    return static_cast<uint32_t>(std::min<int64_t>(v, UINT32_MAX));
  };
  w->Uint32(p + "block_count", u32(layers))
      .Uint32(p + "embedding_length", u32(hidden))
      .Uint32(p + "attention.head_count", u32(heads))
      .Uint32(p + "attention.head_count_kv", u32(kv_heads))
      .Uint32(p + "feed_forward_length", u32(ffn))
      .Uint32(p + "context_length", u32(context))
      .Uint32(p + "vocab_size", u32(vocab))
      .Uint32(p + "attention.key_length", u32(head_dim))
      .Uint32(p + "attention.value_length", u32(head_dim))
      .Float32(p + "attention.layer_norm_rms_epsilon", static_cast<float>(eps));
  RETURN_IF_ERROR(RopeMetadata(c, arch, file, w, p, head_dim, llama3_factors));
  if (arch == "qwen3moe" || arch == "qwen2moe" || arch == "olmoe" || arch == "gpt-oss" ||
      hf_arch == "MixtralForCausalLM") {
    RETURN_IF_ERROR(MoeMetadata(c, hf_arch, file, w, p));
  }
  if (arch == "gpt-oss") {  // tandem's SwiGLU is gpt-oss's published one
    ASSIGN_OR_RETURN(double limit, c.Float("swiglu_limit", 7.0));
    ASSIGN_OR_RETURN(double alpha, c.Float("swiglu_alpha", 1.702));
    if (limit != 7.0 || std::fabs(alpha - 1.702) > 1e-9) {
      return absl::UnimplementedError(
          "config.json: gpt-oss with a swiglu_limit other than 7 or an alpha other than 1.702 "
          "is not supported");
    }
  }
  if ((arch == "qwen2" || arch == "qwen3" || arch == "qwen3moe" || arch == "qwen2moe") &&
      c.Has("use_sliding_window") && c.j().at("use_sliding_window") == true) {
    return absl::UnimplementedError(
        "config.json: Qwen's use_sliding_window (windows on some layers) is not supported");
  }
  if (c.Has("partial_rotary_factor") && c.j().at("partial_rotary_factor") != 1.0) {
    return absl::UnimplementedError(
        "config.json: a partial_rotary_factor other than 1 is not supported");
  }
  if (arch == "gemma2" || arch == "gemma3") {
    // tandem's Gemma: local layers in a fixed pattern, Gemma 3's at RoPE base 10,000.
    const int64_t period = arch == "gemma2" ? 2 : 6;
    if (c.Has("sliding_window_pattern") && c.j().at("sliding_window_pattern") != period) {
      return absl::UnimplementedError(StrCat("config.json: a sliding_window_pattern other than ",
                                             period, " is not supported for ", arch));
    }
    double local_theta = 10000.0;
    ASSIGN_OR_RETURN(local_theta, c.Float("rope_local_base_freq", local_theta));
    if (c.Has("rope_parameters") && c.j().at("rope_parameters").contains("sliding_attention")) {
      ASSIGN_OR_RETURN(local_theta, c.Float(c.j().at("rope_parameters").at("sliding_attention"),
                                            "rope_theta", local_theta));
    }
    if (arch == "gemma3" && local_theta != 10000.0) {
      return absl::UnimplementedError(
          "config.json: Gemma 3 local layers at a RoPE base other "
          "than 10000 are not supported");
    }
    if (!c.Has("sliding_window")) {
      return Bad(file, StrCat("'sliding_window' is missing (", arch, " has local layers)"));
    }
  }
  const bool windowed = arch == "mistral" || arch == "phi3" || arch == "gemma2" ||
                        arch == "gemma3" || arch == "gpt-oss";
  if (windowed && c.Has("sliding_window")) {
    ASSIGN_OR_RETURN(int64_t window, c.Int("sliding_window"));
    w->Uint32(p + "attention.sliding_window", u32(window));
    RETURN_IF_ERROR(CheckLayerTypes(c, arch, layers, file));
  }
  if (arch == "gemma2" || arch == "gemma3") {
    ASSIGN_OR_RETURN(double attn_cap, c.Float("attn_logit_softcapping", 0.0));
    ASSIGN_OR_RETURN(double final_cap, c.Float("final_logit_softcapping", 0.0));
    if (attn_cap > 0) w->Float32(p + "attn_logit_softcapping", static_cast<float>(attn_cap));
    if (final_cap > 0) w->Float32(p + "final_logit_softcapping", static_cast<float>(final_cap));
    ASSIGN_OR_RETURN(int64_t scalar, c.Int("query_pre_attn_scalar", head_dim));
    w->Uint32(p + "attention.query_pre_attn_scalar", u32(scalar));
  }
  return absl::OkStatus();
}

// The GGUF name of a transformers tensor; "" to drop it; nullopt if unknown.
std::optional<std::string> GgufName(std::string_view arch, std::string_view name, bool tied) {
  if (name == "model.embed_tokens.weight") return "token_embd.weight";
  if (name == "lm_head.weight") return tied ? "" : "output.weight";
  if (name == "model.norm.weight") return "output_norm.weight";
  if (name.ends_with(".rotary_emb.inv_freq")) return "";  // recomputed, not a weight
  constexpr std::string_view kLayers = "model.layers.";
  if (!name.starts_with(kLayers)) return std::nullopt;
  std::string_view rest = name.substr(kLayers.size());
  const size_t dot = rest.find('.');
  if (dot == 0 || dot == std::string_view::npos) return std::nullopt;
  const std::string_view index = rest.substr(0, dot);
  if (!std::all_of(index.begin(), index.end(), [](char ch) { return ch >= '0' && ch <= '9'; }) ||
      index.size() > 6) {
    return std::nullopt;
  }
  rest = rest.substr(dot + 1);
  if (rest == "self_attn.sinks") return StrCat("blk.", index, ".attn_sinks.weight");
  // gpt-oss's fused experts: transformed by GptOssExperts below, under these names.
  if (rest == "mlp.experts.gate_up_proj") return StrCat("blk.", index, ".ffn_gate_up_exps");
  if (rest == "mlp.experts.gate_up_proj_bias") {
    return StrCat("blk.", index, ".ffn_gate_up_exps.bias");
  }
  if (rest == "mlp.experts.down_proj") return StrCat("blk.", index, ".ffn_down_exps.weight");
  if (rest == "mlp.experts.down_proj_bias") return StrCat("blk.", index, ".ffn_down_exps.bias");
  std::string_view suffix;
  for (std::string_view s : {".weight", ".bias"}) {
    if (rest.ends_with(s)) suffix = s;
  }
  if (suffix.empty()) return std::nullopt;
  rest.remove_suffix(suffix.size());
  const bool gemma = arch == "gemma2" || arch == "gemma3";
  static const std::pair<std::string_view, std::string_view> kLayer[] = {
      {"self_attn.q_proj", "attn_q"},
      {"self_attn.k_proj", "attn_k"},
      {"self_attn.v_proj", "attn_v"},
      {"self_attn.o_proj", "attn_output"},
      {"self_attn.qkv_proj", "attn_qkv"},
      {"self_attn.q_norm", "attn_q_norm"},
      {"self_attn.k_norm", "attn_k_norm"},
      {"mlp.gate_proj", "ffn_gate"},
      {"mlp.up_proj", "ffn_up"},
      {"mlp.down_proj", "ffn_down"},
      {"mlp.gate_up_proj", "ffn_up"},
      {"input_layernorm", "attn_norm"},
      {"pre_feedforward_layernorm", "ffn_norm"},
      {"post_feedforward_layernorm", "post_ffw_norm"},
      {"mlp.gate", "ffn_gate_inp"},
      {"mlp.router", "ffn_gate_inp"},
      {"block_sparse_moe.gate", "ffn_gate_inp"},
      {"mlp.shared_expert.gate_proj", "ffn_gate_shexp"},
      {"mlp.shared_expert.up_proj", "ffn_up_shexp"},
      {"mlp.shared_expert.down_proj", "ffn_down_shexp"},
      {"mlp.shared_expert_gate", "ffn_gate_inp_shexp"},
  };
  // Experts, one tensor each (transformers saves its fused experts so, and Mixtral as
  // w1 / w3 / w2): llama.cpp's names of older Mixtral files, ffn_gate.E and so on.
  for (std::string_view prefix : {"mlp.experts.", "block_sparse_moe.experts."}) {
    if (!rest.starts_with(prefix) || suffix != ".weight") continue;
    std::string_view e = rest.substr(prefix.size());
    const size_t at = e.find('.');
    if (at == 0 || at == std::string_view::npos || at > 5) return std::nullopt;
    const std::string_view id = e.substr(0, at), what = e.substr(at + 1);
    if (!std::all_of(id.begin(), id.end(), [](char ch) { return ch >= '0' && ch <= '9'; })) {
      return std::nullopt;
    }
    std::string_view kind;
    if (what == "gate_proj" || what == "w1") kind = "ffn_gate";
    if (what == "up_proj" || what == "w3") kind = "ffn_up";
    if (what == "down_proj" || what == "w2") kind = "ffn_down";
    if (kind.empty()) return std::nullopt;
    return StrCat("blk.", index, ".", kind, ".", id, ".weight");
  }
  std::string_view g;
  if (rest == "post_attention_layernorm") {
    g = gemma || arch == "gpt-oss" ? "post_attention_norm" : "ffn_norm";
  } else {
    for (const auto& [hf, gguf] : kLayer) {
      if (rest == hf) g = gguf;
    }
  }
  if (g.empty()) return std::nullopt;
  return StrCat("blk.", index, ".", g, suffix);
}

// Everything the assembled file's tensors point into.
struct Storage {
  std::vector<std::unique_ptr<SafetensorsFile>> files;
  std::vector<std::vector<uint8_t>> buffers;
};

// gpt-oss's fused experts as llama.cpp's converter writes them, in float32:
// gate_up_proj [E][H][2F] (gate and up interleaved) → ffn_gate_exps and ffn_up_exps
// [E][F][H]; its bias [E][2F] → their biases [E][F]; down_proj [E][F][H] →
// ffn_down_exps [E][H][F]; down_proj_bias [E][H] as it is.
absl::Status GptOssExperts(const SafetensorsTensor& t, const std::string& name, GgmlType type,
                           const fs::path& path, Storage* storage, GgufWriter* w,
                           std::vector<std::span<const uint8_t>>* data) {
  const bool bias = name.ends_with(".bias");
  const size_t dims = bias ? 2 : 3;
  if (t.shape.size() != dims ||
      std::any_of(t.shape.begin(), t.shape.end(), [](int64_t d) { return d <= 0; })) {
    return Bad(path, StrCat("tensor '", t.name.substr(0, 200), "' must have ", dims,
                            " non-zero dimensions"));
  }
  std::vector<float> v(static_cast<size_t>(t.n_elements()));
  RETURN_IF_ERROR(Dequantize(type, t.data, v));
  auto emit = [&](const std::string& out_name, std::vector<int64_t> ne,
                  const std::function<float(int64_t)>& at) {
    int64_t n = 1;
    for (int64_t d : ne) n *= d;
    std::vector<uint8_t>& out = storage->buffers.emplace_back(static_cast<size_t>(n) * 4);
    float* f = reinterpret_cast<float*>(out.data());
    for (int64_t i = 0; i < n; ++i) f[i] = at(i);
    w->Tensor(out_name, GgmlType::kF32, ne);
    data->push_back(out);
  };
  const std::string blk = name.substr(0, name.find(".ffn_") + 1);
  const int64_t E = t.shape[0];
  if (name.ends_with("ffn_down_exps.bias")) {
    emit(name, {t.shape[1], E}, [&](int64_t i) { return v[i]; });
  } else if (name.ends_with("ffn_down_exps.weight")) {  // [E][F][H] → [E][H][F]
    const int64_t F = t.shape[1], H = t.shape[2];
    emit(name, {F, H, E}, [&](int64_t i) {
      const int64_t e = i / (H * F), h = i / F % H, f = i % F;
      return v[(e * F + f) * H + h];
    });
  } else if (bias) {  // [E][2F], gate and up interleaved
    if (t.shape[1] % 2 != 0) return Bad(path, StrCat("tensor '", t.name, "' has an odd width"));
    const int64_t F = t.shape[1] / 2;
    for (int parity : {0, 1}) {
      emit(blk + (parity == 0 ? "ffn_gate_exps.bias" : "ffn_up_exps.bias"), {F, E},
           [&, parity](int64_t i) { return v[i / F * 2 * F + 2 * (i % F) + parity]; });
    }
  } else {  // gate_up_proj [E][H][2F] → [E][F][H] each
    if (t.shape[2] % 2 != 0) return Bad(path, StrCat("tensor '", t.name, "' has an odd width"));
    const int64_t H = t.shape[1], F = t.shape[2] / 2;
    for (int parity : {0, 1}) {
      emit(blk + (parity == 0 ? "ffn_gate_exps.weight" : "ffn_up_exps.weight"), {H, F, E},
           [&, parity](int64_t i) {
             const int64_t e = i / (F * H), f = i / H % F, h = i % H;
             return v[(e * H + h) * 2 * F + 2 * f + parity];
           });
    }
  }
  return absl::OkStatus();
}

// The safetensors of the directory: one file, or the shards its index names.
absl::StatusOr<std::vector<fs::path>> WeightFiles(const fs::path& dir) {
  const fs::path index = dir / "model.safetensors.index.json";
  if (Exists(index)) {
    ASSIGN_OR_RETURN(json j, ReadJson(index));
    if (!j.contains("weight_map") || !j.at("weight_map").is_object()) {
      return Bad(index, "'weight_map' must be an object");
    }
    std::set<std::string> shards;
    for (const auto& [name, shard] : j.at("weight_map").items()) {
      if (!shard.is_string())
        return Bad(index, StrCat("the shard of '", name, "' is not a string"));
      const std::string s = shard;
      // A shard is a file of this directory, never a path out of it.
      if (s.empty() || s.find('/') != std::string::npos || s == "." || s == "..") {
        return Bad(index, StrCat("shard '", s, "' is not a file name"));
      }
      shards.insert(s);
    }
    if (shards.empty()) return Bad(index, "names no shard");
    std::vector<fs::path> files;
    for (const std::string& s : shards) files.push_back(dir / s);
    return files;
  }
  if (Exists(dir / "model.safetensors")) return std::vector<fs::path>{dir / "model.safetensors"};
  return absl::NotFoundError(StrCat(dir.string(),
                                    ": no model.safetensors or model.safetensors.index.json "
                                    "(PyTorch .bin checkpoints are not read)"));
}

// A special token named in tokenizer_config.json: a string or {"content": ...}.
std::optional<std::string> TokenText(const json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v.at("content").is_string()) {
    return v.at("content").get<std::string>();
  }
  return std::nullopt;
}

// A byte-level BPE tokenizer.json (GPT-2, Llama 3, Qwen, ...): its pre-tokenizer must be
// one of the families tandem implements.
absl::Status ByteLevelVocab(const json& j, const std::vector<std::string>& tokens,
                            const std::vector<int32_t>& types,
                            const std::vector<std::pair<std::string, std::string>>& merges,
                            GgufWriter* w) {
  const json& m = j.at("model");
  // The pre-tokenizer's steps, as tandem's families are written.
  std::vector<std::string> steps;
  auto add_step = [&](const json& s) -> absl::Status {
    const std::string type = s.is_object() ? s.value("type", "") : "";
    if (type == "ByteLevel") {
      if (s.value("use_regex", true)) steps.emplace_back(tokenizer::PreTokenizer::kByteLevel);
      if (s.value("add_prefix_space", false)) {
        return absl::UnimplementedError(
            "tokenizer.json: ByteLevel add_prefix_space is not supported");
      }
    } else if (type == "Split" && s.contains("pattern") && s.at("pattern").is_object() &&
               s.at("pattern").contains("Regex") && s.at("pattern").at("Regex").is_string() &&
               s.value("behavior", "") == "Isolated" && !s.value("invert", false)) {
      steps.push_back(s.at("pattern").at("Regex").get<std::string>());
    } else if (type == "Digits" && s.value("individual_digits", false)) {
      steps.emplace_back(tokenizer::PreTokenizer::kDigits);
    } else {
      return absl::UnimplementedError(StrCat("tokenizer.json: pre-tokenizer step '", type,
                                             "' (as configured) is not supported"));
    }
    return absl::OkStatus();
  };
  const json pre = j.value("pre_tokenizer", json());
  if (pre.is_object() && pre.value("type", "") == "Sequence" && pre.contains("pretokenizers") &&
      pre.at("pretokenizers").is_array()) {
    for (const json& s : pre.at("pretokenizers")) RETURN_IF_ERROR(add_step(s));
  } else {
    RETURN_IF_ERROR(add_step(pre));
  }
  std::string family(tokenizer::PreTokenizer::FamilyOf(steps));
  // NFC, alone or as a one-step Sequence (Qwen2 … Qwen3.5, GPT-NeoX); no other.
  json norm = j.value("normalizer", json());
  if (norm.is_object() && norm.value("type", "") == "Sequence" && norm.contains("normalizers") &&
      norm.at("normalizers").is_array() && norm.at("normalizers").size() <= 1) {
    norm = norm.at("normalizers").empty() ? json() : norm.at("normalizers")[0];
  }
  const bool nfc = norm.is_object() && norm.value("type", "") == "NFC";
  if (!norm.is_null() && !nfc) {
    return absl::UnimplementedError(StrCat("tokenizer.json: normalizer '",
                                           norm.is_object() ? norm.value("type", "?") : "?",
                                           "' is not supported (NFC is)"));
  }
  // GPT-NeoX's tokenizer (NFC, then GPT-2 splitting) is llama.cpp's "mpt".
  if (nfc && family == "gpt2") family = "mpt";
  if (family.empty()) {
    return absl::UnimplementedError(StrCat("tokenizer.json: the pre-tokenizer (", steps.size(),
                                           " steps) is none of the families tandem implements"));
  }
  std::vector<std::string> joined;
  joined.reserve(merges.size());
  for (const auto& [left, right] : merges) joined.push_back(StrCat(left, " ", right));
  w->String("tokenizer.ggml.model", "gpt2")
      .String("tokenizer.ggml.pre", family)
      .StringArray("tokenizer.ggml.tokens", tokens)
      .Int32Array("tokenizer.ggml.token_type", types)
      .StringArray("tokenizer.ggml.merges", joined)
      .Bool("tokenizer.ggml.ignore_merges", m.value("ignore_merges", false));
  if (nfc) w->String("tandem.tokenizer.normalizer", "NFC");
  return absl::OkStatus();
}

// Every split of the normal token `t` into two normal tokens, given to `f(left, right)`
// until it returns false; false then.
template <typename F>
bool ForEachSplit(std::string_view t, const absl::flat_hash_map<std::string_view, int32_t>& id_of,
                  const std::vector<int32_t>& types, F f) {
  for (size_t k = std::max<size_t>(1, utf8::SequenceLength(t)); k < t.size();
       k += std::max<size_t>(1, utf8::SequenceLength(t.substr(k)))) {
    auto l = id_of.find(t.substr(0, k));
    auto r = id_of.find(t.substr(k));
    if (l != id_of.end() && r != id_of.end() && types[l->second] == 1 && types[r->second] == 1 &&
        !f(t.substr(0, k), t.substr(k))) {
      return false;
    }
  }
  return true;
}

// A SentencePiece-style tokenizer.json: BPE with byte fallback over text whose spaces
// are "▁", as Llama 2, Mistral, Gemma and Phi-3 publish theirs. It becomes the "llama"
// vocabulary a GGUF of the same model holds, with scores made from the merge ranks.
// Hugging Face merges the adjacent pair of lowest rank; SentencePiece (and tandem) the
// adjacent pair whose concatenation scores highest. The two agree when the merges are
// every split of a piece into two pieces ranked by the piece, which is how these files
// are made from SentencePiece models, so a token scores minus the rank of its first
// merge, and merges that leave out a split are refused. (llama.cpp's converter gives
// every token of such a file the same score, so its merges run left to right.)
absl::Status SentencePieceVocab(const fs::path& file, const json& j,
                                const std::vector<std::string>& tokens, std::vector<int32_t> types,
                                const std::vector<std::pair<std::string, std::string>>& merges,
                                GgufWriter* w) {
  const json& m = j.at("model");
  if (!m.value("byte_fallback", false)) {
    return absl::UnimplementedError(
        "tokenizer.json: a SentencePiece-style BPE without byte_fallback is not supported");
  }
  // Where the "▁" prefix goes: the legacy Prepend normalizer (every stretch between
  // added tokens), the Metaspace pre-tokenizer (its prepend_scheme), or nowhere.
  bool escaped = false;
  bool prepend = false;
  std::string metaspace;
  auto step_error = [](std::string_view what, const json& s) {
    return absl::UnimplementedError(
        StrCat("tokenizer.json: ", what, " step '", s.is_object() ? s.value("type", "?") : "?",
               "' (as configured) is not supported for a SentencePiece-style BPE"));
  };
  auto steps_of = [](const json& v, const char* list) {
    if (v.is_object() && v.value("type", "") == "Sequence" && v.contains(list) &&
        v.at(list).is_array()) {
      return std::vector<json>(v.at(list).begin(), v.at(list).end());
    }
    return v.is_null() ? std::vector<json>{} : std::vector<json>{v};
  };
  auto has = [](const json& s, const char* key, std::string_view value) {
    return s.is_object() && s.contains(key) && s.at(key).is_string() &&
           s.at(key).get_ref<const std::string&>() == value;
  };
  for (const json& n : steps_of(j.value("normalizer", json()), "normalizers")) {
    const std::string type = n.is_object() ? n.value("type", "") : "";
    if (type == "Prepend" && has(n, "prepend", tokenizer::kSpaceMarker)) {
      prepend = true;
    } else if (type == "Replace" && n.contains("pattern") && has(n.at("pattern"), "String", " ") &&
               has(n, "content", tokenizer::kSpaceMarker)) {
      escaped = true;
    } else {
      return step_error("normalizer", n);
    }
  }
  for (const json& p : steps_of(j.value("pre_tokenizer", json()), "pretokenizers")) {
    const std::string type = p.is_object() ? p.value("type", "") : "";
    if (type == "Metaspace" && has(p, "replacement", tokenizer::kSpaceMarker) &&
        !p.value("split", true) && !escaped) {
      escaped = true;
      if (p.contains("prepend_scheme")) {
        metaspace =
            p.at("prepend_scheme").is_string() ? p.at("prepend_scheme").get<std::string>() : "?";
      } else {  // files from before prepend_scheme say add_prefix_space
        metaspace = p.value("add_prefix_space", true) ? "always" : "never";
      }
      if (metaspace != "always" && metaspace != "first" && metaspace != "never") {
        return Bad(file, StrCat("Metaspace prepend_scheme '", metaspace, "' is unknown"));
      }
    } else if (type == "Split" && escaped && p.contains("pattern") &&
               has(p.at("pattern"), "String", " ")) {
      // Gemma's: it splits at spaces after they became "▁", so it finds none.
    } else {
      return step_error("pre-tokenizer", p);
    }
  }
  if (!escaped) {
    return absl::UnimplementedError(
        "tokenizer.json: a byte-fallback BPE that does not write spaces as \"▁\" is not "
        "supported");
  }
  if (prepend && !metaspace.empty()) {
    return absl::UnimplementedError(
        "tokenizer.json: both a Prepend normalizer and a Metaspace pre-tokenizer");
  }

  // Byte tokens and the unknown token typed as a GGUF has them.
  const int32_t n = static_cast<int32_t>(tokens.size());
  const std::string unk = m.contains("unk_token") && m.at("unk_token").is_string()
                              ? m.at("unk_token").get<std::string>()
                              : "";
  auto hex = [](char c) { return std::isxdigit(static_cast<unsigned char>(c)) != 0; };
  for (int32_t i = 0; i < n; ++i) {
    const std::string& t = tokens[i];
    if (types[i] != 1) continue;
    if (t.size() == 6 && t.starts_with("<0x") && t[5] == '>' && hex(t[3]) && hex(t[4])) {
      types[i] = 6;  // BYTE
    } else if (t == unk) {
      types[i] = 2;  // UNKNOWN
    }
  }
  // Scores from the merge ranks; then every split of a normal token into two normal
  // tokens must be a merge.
  absl::flat_hash_map<std::string_view, int32_t> id_of;
  for (int32_t i = 0; i < n; ++i) id_of.try_emplace(tokens[i], i);
  std::vector<float> scores(n, -static_cast<float>(merges.size()) - 1.0f);
  std::vector<bool> made(n, false);
  absl::flat_hash_set<std::pair<std::string_view, std::string_view>> pairs;
  pairs.reserve(merges.size());
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& [left, right] = merges[rank];
    pairs.emplace(left, right);
    auto it = id_of.find(StrCat(left, right));
    if (it != id_of.end() && !made[it->second]) {
      made[it->second] = true;
      scores[it->second] = -static_cast<float>(rank);
    }
  }
  for (int32_t i = 0; i < n; ++i) {
    if (types[i] != 1) continue;
    std::string_view missing_left, missing_right;
    const bool complete =
        ForEachSplit(tokens[i], id_of, types, [&](std::string_view l, std::string_view r) {
          if (pairs.contains({l, r})) return true;
          missing_left = l;
          missing_right = r;
          return false;
        });
    if (!complete) {
      return absl::UnimplementedError(
          StrCat("tokenizer.json: the merges are not a SentencePiece model's: \"", tokens[i],
                 "\" is \"", missing_left, "\" + \"", missing_right, "\" but no merge says so"));
    }
  }
  const bool add_space_prefix = prepend || metaspace == "always" || metaspace == "first";
  w->String("tokenizer.ggml.model", "llama")
      .String("tokenizer.ggml.pre", "default")
      .StringArray("tokenizer.ggml.tokens", tokens)
      .Float32Array("tokenizer.ggml.scores", scores)
      .Int32Array("tokenizer.ggml.token_type", types)
      .Bool("tokenizer.ggml.add_space_prefix", add_space_prefix)
      .Bool("tokenizer.ggml.ignore_merges", m.value("ignore_merges", false));
  if (add_space_prefix && !prepend) w->String("tandem.tokenizer.metaspace", metaspace);
  return absl::OkStatus();
}

absl::Status TokenizerMetadata(const fs::path& dir, const json& config, GgufWriter* w) {
  const fs::path file = dir / "tokenizer.json";
  if (!Exists(file)) return absl::OkStatus();  // no tokenizer, as a GGUF may have none
  ASSIGN_OR_RETURN(json j, ReadJson(file));
  if (!j.contains("model") || !j.at("model").is_object()) return Bad(file, "'model' is missing");
  const json& m = j.at("model");
  if (m.value("type", "") != "BPE") {
    return absl::UnimplementedError(StrCat("tokenizer.json: model type '", m.value("type", "?"),
                                           "' is not supported (byte-level BPE)"));
  }
  // Empty is as good as absent (Qwen's published files, and transformers, write "").
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (m.contains(key) && !m.at(key).is_null() &&
        !(m.at(key).is_string() && m.at(key).get<std::string>().empty())) {
      return absl::UnimplementedError(StrCat("tokenizer.json: BPE '", key, "' is not supported"));
    }
  }
  // Byte-level BPE (GPT-2's byte spelling) or SentencePiece-style (byte fallback over
  // "▁"-escaped text: Llama 2, Mistral, Gemma, Phi-3).
  const bool sentencepiece = m.value("byte_fallback", false) || !j.contains("decoder") ||
                             !j.at("decoder").is_object() ||
                             j.at("decoder").value("type", "") != "ByteLevel";
  if (!m.contains("vocab") || !m.at("vocab").is_object())
    return Bad(file, "'model.vocab' must be an object");
  std::vector<std::string> tokens;
  std::vector<int32_t> types;
  auto place = [&](int64_t id, const std::string& text, int32_t type) -> absl::Status {
    if (id < 0 || id >= (int64_t{1} << 24))
      return Bad(file, StrCat("token id ", id, " is out of range"));
    if (id >= static_cast<int64_t>(tokens.size())) {
      tokens.resize(id + 1);
      types.resize(id + 1, 0);
    }
    // Within the vocabulary an id has one text; an added token takes its id over.
    if (types[id] == 1 && type == 1 && tokens[id] != text) {
      return Bad(file, StrCat("token id ", id, " is given to two texts"));
    }
    tokens[id] = text;
    types[id] = type;
    return absl::OkStatus();
  };
  for (const auto& [text, id] : m.at("vocab").items()) {
    if (!id.is_number_integer()) return Bad(file, "a vocabulary id is not an integer");
    RETURN_IF_ERROR(place(id.get<int64_t>(), text, 1));  // NORMAL
  }
  if (j.contains("added_tokens") && j.at("added_tokens").is_array()) {
    for (const json& t : j.at("added_tokens")) {
      if (!t.is_object() || !t.contains("id") || !t.at("id").is_number_integer() ||
          !t.contains("content") || !t.at("content").is_string()) {
        return Bad(file, "an added token lacks an integer 'id' or a string 'content'");
      }
      RETURN_IF_ERROR(place(t.at("id").get<int64_t>(), t.at("content").get<std::string>(),
                            t.value("special", false) ? 3 : 4));  // CONTROL : USER_DEFINED
    }
  }
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (types[i] == 0) {  // a hole in the ids: a placeholder no text produces
      tokens[i] = StrCat("[PAD", i, "]");
      types[i] = 5;  // UNUSED
    }
  }
  std::vector<std::pair<std::string, std::string>> merges;
  if (m.contains("merges") && m.at("merges").is_array()) {
    for (const json& mg : m.at("merges")) {
      if (mg.is_string() && mg.get_ref<const std::string&>().find(' ') != std::string::npos) {
        const std::string& text = mg.get_ref<const std::string&>();
        const size_t space = text.find(' ');
        merges.emplace_back(text.substr(0, space), text.substr(space + 1));
      } else if (mg.is_array() && mg.size() == 2 && mg[0].is_string() && mg[1].is_string()) {
        merges.emplace_back(mg[0].get<std::string>(), mg[1].get<std::string>());
      } else {
        return Bad(file, "a merge is neither \"a b\" nor [\"a\", \"b\"]");
      }
    }
  }
  if (sentencepiece) {
    RETURN_IF_ERROR(SentencePieceVocab(file, j, tokens, types, merges, w));
  } else {
    RETURN_IF_ERROR(ByteLevelVocab(j, tokens, types, merges, w));
  }

  // Special tokens and the chat template.
  json tc = json::object();
  if (Exists(dir / "tokenizer_config.json")) {
    ASSIGN_OR_RETURN(tc, ReadJson(dir / "tokenizer_config.json"));
  }
  auto id_of = [&](const std::string& text) -> int64_t {
    for (size_t i = tokens.size(); i-- > 0;) {
      if (tokens[i] == text) return static_cast<int64_t>(i);
    }
    return -1;
  };
  bool has_bos = false;
  for (auto [key, gguf_key, config_key] :
       {std::tuple{"bos_token", "tokenizer.ggml.bos_token_id", "bos_token_id"},
        std::tuple{"eos_token", "tokenizer.ggml.eos_token_id", "eos_token_id"},
        std::tuple{"pad_token", "tokenizer.ggml.padding_token_id", "pad_token_id"},
        std::tuple{"unk_token", "tokenizer.ggml.unknown_token_id", ""}}) {
    int64_t id = -1;
    if (tc.contains(key)) {
      if (std::optional<std::string> text = TokenText(tc.at(key))) {
        id = id_of(*text);
        if (id < 0) return Bad(dir / "tokenizer_config.json", StrCat("'", key, "' is not a token"));
      }
    } else if (std::string_view(key) == "unk_token" && m.contains("unk_token") &&
               m.at("unk_token").is_string()) {
      id = id_of(m.at("unk_token").get<std::string>());
    } else if (*config_key && config.contains(config_key)) {
      const json& v = config.at(config_key);
      const json& first = v.is_array() && !v.empty() ? v[0] : v;
      if (first.is_number_integer()) id = first.get<int64_t>();
    }
    if (id >= 0 && id < static_cast<int64_t>(tokens.size())) {
      w->Uint32(gguf_key, static_cast<uint32_t>(id));
      if (std::string_view(key) == "bos_token") has_bos = true;
    }
  }
  // BOS: tokenizer_config.json's add_bos_token where it says, else what tokenizer.json's
  // post-processor prepends (Llama 3's TemplateProcessing: a special token, then $A).
  bool add_bos = false;
  const json post = j.value("post_processor", json());
  const json* template_processing = nullptr;
  if (post.is_object() && post.value("type", "") == "TemplateProcessing")
    template_processing = &post;
  if (post.is_object() && post.value("type", "") == "Sequence" && post.contains("processors") &&
      post.at("processors").is_array()) {
    for (const json& p : post.at("processors")) {
      if (p.is_object() && p.value("type", "") == "TemplateProcessing") template_processing = &p;
    }
  }
  if (template_processing != nullptr && template_processing->contains("single") &&
      template_processing->at("single").is_array() && !template_processing->at("single").empty()) {
    const json& first = template_processing->at("single")[0];
    add_bos = first.is_object() && first.contains("SpecialToken");
    if (add_bos && !has_bos) {  // the token it prepends is the BOS
      const json& special = first.at("SpecialToken");
      const int64_t id =
          special.is_object() && special.contains("id") && special.at("id").is_string()
              ? id_of(special.at("id").get<std::string>())
              : -1;
      if (id < 0)
        return Bad(file, "the post-processor prepends a token that is not in the vocabulary");
      w->Uint32("tokenizer.ggml.bos_token_id", static_cast<uint32_t>(id));
    }
  }
  if (tc.contains("add_bos_token") && tc.at("add_bos_token").is_boolean()) {
    add_bos = tc.at("add_bos_token").get<bool>();
  }
  w->Bool("tokenizer.ggml.add_bos_token", add_bos);
  if (tc.contains("add_eos_token") && tc.at("add_eos_token").is_boolean()) {
    w->Bool("tokenizer.ggml.add_eos_token", tc.at("add_eos_token").get<bool>());
  }
  std::string chat_template;
  if (tc.contains("chat_template")) {
    const json& t = tc.at("chat_template");
    if (t.is_string()) {
      chat_template = t;
    } else if (t.is_array()) {  // named templates: the default one
      for (const json& named : t) {
        if (named.is_object() && named.value("name", "") == "default" &&
            named.contains("template") && named.at("template").is_string()) {
          chat_template = named.at("template");
        }
      }
    }
  }
  const fs::path jinja = dir / "chat_template.jinja";
  if (Exists(jinja)) {
    std::error_code ec;
    const uintmax_t size = fs::file_size(jinja, ec);
    if (ec || size > kMaxJsonBytes) return Bad(jinja, "cannot be read or is larger than 100 MB");
    std::ifstream in(jinja, std::ios::binary);
    chat_template.assign(size, '\0');
    in.read(chat_template.data(), static_cast<std::streamsize>(size));
    if (!in) return Bad(jinja, "could not be read");
  }
  if (!chat_template.empty()) w->String("tokenizer.chat_template", chat_template);
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<GgufFile>> ReadDirectory(const std::string& dir_name) {
  const fs::path dir(dir_name);
  GgufWriter w;
  std::string arch;
  json config;
  if (!Exists(dir / "config.json") && Exists(dir / "tokenizer.json")) {
    // Tokenizer files alone: a vocabulary-only "file", as llama.cpp's vocab GGUFs.
    RETURN_IF_ERROR(TokenizerMetadata(dir, json::object(), &w));
    return GgufFile::Assemble(w.Header(), {}, nullptr, dir_name);
  }
  std::vector<float> llama3_factors;
  Shape shape;
  RETURN_IF_ERROR(ConfigMetadata(dir, &arch, &w, &config, &llama3_factors, &shape));
  RETURN_IF_ERROR(TokenizerMetadata(dir, config, &w));
  const bool tied = shape.tied;
  const int64_t heads = shape.heads, kv_heads = shape.kv_heads;
  const bool permute = arch == "llama" || arch == "mistral";
  const bool gemma = arch == "gemma2" || arch == "gemma3";

  auto storage = std::make_shared<Storage>();
  ASSIGN_OR_RETURN(std::vector<fs::path> files, WeightFiles(dir));
  std::vector<std::span<const uint8_t>> data;
  std::set<std::string> seen;
  for (const fs::path& path : files) {
    ASSIGN_OR_RETURN(auto st, SafetensorsFile::Open(path.string()));
    for (const SafetensorsTensor& t : st->tensors()) {
      const std::optional<std::string> name = GgufName(arch, t.name, tied);
      if (!name) {
        return absl::UnimplementedError(StrCat(path.filename().string(), ": tensor '",
                                               t.name.substr(0, 200), "' is not one ", arch,
                                               " uses"));
      }
      if (name->empty()) continue;
      if (!seen.insert(*name).second) {
        return Bad(path, StrCat("tensor '", t.name.substr(0, 200), "' appears twice"));
      }
      const std::optional<GgmlType> type = GgmlTypeOf(t.dtype);
      if (!type) {
        return absl::UnimplementedError(StrCat(path.filename().string(), ": tensor '", t.name,
                                               "' has dtype ", SafetensorsDtypeName(t.dtype),
                                               " (F32, F16 and BF16 are read)"));
      }
      if (arch == "gpt-oss" && name->find("_exps") != std::string::npos) {
        RETURN_IF_ERROR(GptOssExperts(t, *name, *type, path, storage.get(), &w, &data));
        continue;
      }
      if (t.shape.empty() || t.shape.size() > 2 ||
          std::any_of(t.shape.begin(), t.shape.end(), [](int64_t d) { return d <= 0; })) {
        return Bad(path, StrCat("tensor '", t.name.substr(0, 200),
                                "' must have one or two non-zero dimensions"));
      }
      std::vector<int64_t> ne(t.shape.rbegin(), t.shape.rend());
      std::span<const uint8_t> bytes = t.data;
      GgmlType out_type = *type;
      const bool is_q = name->ends_with("attn_q.weight"), is_k = name->ends_with("attn_k.weight");
      if (permute && (is_q || is_k) && t.shape.size() == 2) {
        // Rows (head, j, i) ← (head, i, j): llama.cpp's order for adjacent-pair RoPE.
        const int64_t n_head = is_q ? heads : kv_heads, rows = t.shape[0];
        if (n_head <= 0 || rows % (2 * n_head) != 0) {
          return Bad(path,
                     StrCat("tensor '", t.name, "' rows do not split into ", n_head, " heads"));
        }
        const int64_t half = rows / n_head / 2;
        const size_t row_bytes = bytes.size() / static_cast<size_t>(rows);
        std::vector<uint8_t>& out = storage->buffers.emplace_back(bytes.size());
        for (int64_t h = 0; h < n_head; ++h) {
          for (int64_t i = 0; i < half; ++i) {
            for (int64_t jj = 0; jj < 2; ++jj) {
              const int64_t to = h * 2 * half + 2 * i + jj, from = h * 2 * half + jj * half + i;
              std::memcpy(out.data() + to * row_bytes, bytes.data() + from * row_bytes, row_bytes);
            }
          }
        }
        bytes = out;
      } else if (gemma && name->ends_with("norm.weight")) {
        // Gemma's RMSNorm multiplies by 1 + w: stored as one float32 weight.
        std::vector<float> values(static_cast<size_t>(t.n_elements()));
        RETURN_IF_ERROR(Dequantize(*type, bytes, values));
        for (float& v : values) v += 1.0f;
        std::vector<uint8_t>& out = storage->buffers.emplace_back(values.size() * 4);
        std::memcpy(out.data(), values.data(), out.size());
        bytes = out;
        out_type = GgmlType::kF32;
      }
      w.Tensor(*name, out_type, ne);
      data.push_back(bytes);
    }
    storage->files.push_back(std::move(st));
  }
  if (!llama3_factors.empty()) {
    std::vector<uint8_t>& out = storage->buffers.emplace_back(llama3_factors.size() * 4);
    std::memcpy(out.data(), llama3_factors.data(), out.size());
    const int64_t n = static_cast<int64_t>(llama3_factors.size());
    w.Tensor("rope_freqs.weight", GgmlType::kF32, std::span<const int64_t>(&n, 1));
    data.push_back(out);
  }
  return GgufFile::Assemble(w.Header(), std::move(data), std::move(storage), dir_name);
}

}  // namespace

absl::StatusOr<std::unique_ptr<GgufFile>> OpenHfDirectory(const std::string& dir_name) {
  // The readers above check what they use; a JSON value of an unexpected type that a
  // nlohmann accessor meets, or a file system error, still ends here as an error.
  try {
    return ReadDirectory(dir_name);
  } catch (const json::exception& e) {
    return absl::InvalidArgumentError(
        StrCat(dir_name, ": a JSON value has the wrong type (", e.what(), ")"));
  } catch (const fs::filesystem_error& e) {
    return absl::InvalidArgumentError(StrCat(dir_name, ": ", e.what()));
  }
}

absl::StatusOr<std::unique_ptr<GgufFile>> OpenModel(const std::string& path,
                                                    FileResidence residence) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) return OpenHfDirectory(path);
  return GgufFile::Open(path, residence);
}

}  // namespace tandem::model
