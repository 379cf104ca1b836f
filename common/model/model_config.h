// ModelConfig: the hyper-parameters of a Llama-family model, read from GGUF metadata.
//
// Covers `general.architecture` = llama, mistral, qwen2 and qwen3 (the same decoder
// math; qwen2 adds biases to the Q/K/V projections, qwen3 an RMSNorm of each head's
// query and key before RoPE, and a head dim of its own). A plain value type; FromGguf checks
// that the numbers are consistent (heads divide the hidden size, KV heads divide
// heads, ...) and returns InvalidArgument naming the key otherwise.
#ifndef TANDEM_COMMON_MODEL_MODEL_CONFIG_H_
#define TANDEM_COMMON_MODEL_MODEL_CONFIG_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "common/model/gguf_file.h"

namespace tandem::model {

enum class RopeScalingType { kNone, kLinear, kYarn, kLlama3 };

struct RopeScaling {
  RopeScalingType type = RopeScalingType::kNone;
  double factor = 1.0;
  int64_t original_context_length = 0;
  // Llama 3 style: per-frequency factors are stored as the tensor `rope_freqs.weight`.
  bool has_freq_factors_tensor = false;
};

struct ModelConfig {
  std::string architecture;  // general.architecture
  std::string name;          // general.name, may be empty
  int64_t n_layers = 0;
  int64_t hidden_size = 0;  // embedding_length
  int64_t n_heads = 0;
  int64_t n_kv_heads = 0;  // GQA: n_heads / n_kv_heads queries share a KV head
  int64_t head_dim = 0;
  int64_t ffn_size = 0;  // feed_forward_length
  int64_t vocab_size = 0;
  // The context tandem serves: the file's context_length, or the attention's sliding
  // window where the file has a smaller one (Mistral 7B v0.1: 4,096 of 32,768). tandem
  // attends to every earlier token, which equals sliding-window attention only while a
  // sequence fits the window, so it serves no more than that.
  int64_t context_length = 0;
  int64_t sliding_window = 0;  // attention.sliding_window; 0: none
  int64_t rope_dim = 0;        // rotated dims per head (usually head_dim)
  double rms_norm_eps = 1e-5;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  bool tied_embeddings = false;  // no output.weight: logits reuse token_embd.weight
  bool qkv_bias = false;
  // RoPE pairs (i, i + rope_dim/2) as NeoX does (qwen2); llama/mistral GGUF files store
  // Q/K permuted for adjacent pairs (2i, 2i+1).
  bool rope_halves = false;
  // Each head's query and key RMS-normalised (weights attn_q_norm / attn_k_norm, one
  // per head dim) after the projection, before RoPE (qwen3).
  bool qk_norm = false;

  int32_t bos_token_id = -1;  // -1: none
  int32_t eos_token_id = -1;
  int32_t pad_token_id = -1;
  int32_t unk_token_id = -1;
  std::string chat_template;  // may be empty

  // 2 × layers × kv_heads × head_dim: float elements of K and V per token.
  int64_t KvElementsPerToken() const { return 2 * n_layers * n_kv_heads * head_dim; }

  static absl::StatusOr<ModelConfig> FromGguf(const GgufFile& file);
};

}  // namespace tandem::model

#endif  // TANDEM_COMMON_MODEL_MODEL_CONFIG_H_
