// ModelConfig: the hyper-parameters of a Llama-family decoder, read from GGUF metadata.
//
// Covers `general.architecture` = llama, mistral, qwen2, qwen3, phi3, gemma2, gemma3 and
// the mixtures of experts qwen3moe, qwen2moe, olmoe and llama with experts (Mixtral):
// one decoder (RMSNorm, RoPE attention with GQA, a gated FFN) whose variations are the
// fields below — qwen2's Q/K/V biases; qwen3's and gemma3's per-head QK-norm, olmoe's
// over the whole projection; phi3's fused QKV and gate/up projections; Gemma's GeGLU,
// embedding scale, norms after attention and after the FFN, soft-capping (gemma2), and
// sliding-window layers interleaved with global ones, each kind with its own RoPE base
// (gemma3); a routed FFN of experts (MoeConfig), with a shared expert (qwen2moe). A plain
// value type; FromGguf checks that the numbers are consistent (heads divide the hidden
// size, KV heads divide heads, ...) and returns InvalidArgument naming the key
// otherwise.
#ifndef TANDEM_COMMON_MODEL_MODEL_CONFIG_H_
#define TANDEM_COMMON_MODEL_MODEL_CONFIG_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "common/model/gguf_file.h"

namespace tandem::model {

enum class RopeScalingType { kNone, kLinear, kYarn, kLlama3 };

// The gate's activation in the FFN: down(act(gate(x)) × up(x)).
enum class FfnActivation {
  kSilu,      // SwiGLU (Llama, Qwen, Phi-3)
  kGeluTanh,  // GeGLU, GELU's tanh approximation (Gemma)
  // gpt-oss: gate clamped to ≤ 7, up to [−7, 7]; (up + 1) × gate × sigmoid(1.702 gate).
  kSwigluOai,
};

// How a token's router logits become its experts' weights (GGUF expert_gating_func,
// llama.cpp's numbering).
enum class ExpertGating {
  kSoftmax = 1,        // softmax over every expert, the top k picked (Mixtral, Qwen, OLMoE)
  kSigmoid = 2,        // sigmoid of each logit, the top k picked (DeepSeek V3, GLM-4.5)
  kSoftmaxWeight = 3,  // the top k logits picked, softmax over those k (gpt-oss)
};

// A mixture-of-experts FFN (llama.cpp's GGUF: ffn_gate_inp, ffn_{gate,up,down}_exps).
// Each token's router logits (ffn_gate_inp · x) pick `used` of `experts` experts —
// the k largest gating values, the lower index first on ties — whose weights are the
// gating values of those k, renormalised to sum to 1 when `weights_norm`, times
// `weights_scale`; the FFN's output is Σ weight × expert(x) over the k, plus
// sigmoid(ffn_gate_inp_shexp · x) × the shared expert(x) where there is one (qwen2moe).
struct MoeConfig {
  int64_t experts = 0;               // expert_count; 0: every layer's FFN is dense
  int64_t used = 0;                  // expert_used_count (k)
  int64_t ffn_size = 0;              // expert_feed_forward_length (feed_forward_length when absent)
  int64_t shared_ffn_size = 0;       // the shared expert's (qwen2moe); 0: none
  int64_t leading_dense_layers = 0;  // leading_dense_block_count: dense FFN below this
  ExpertGating gating = ExpertGating::kSoftmax;
  bool weights_norm = false;
  double weights_scale = 1.0;
};

struct RopeScaling {
  RopeScalingType type = RopeScalingType::kNone;
  double factor = 1.0;
  int64_t original_context_length = 0;
  // Llama 3 style: per-frequency factors are stored as the tensor `rope_freqs.weight`.
  bool has_freq_factors_tensor = false;
  // YaRN (kernels/cpu/ops.h, YarnFreqFactors): rope.scaling.yarn_beta_fast / _slow;
  // whether the ramp's bounds are rounded (transformers' `truncate`; llama.cpp always
  // rounds; tandem's key rope.scaling.yarn_truncate for configs that do not); and
  // rope.scaling.attn_factor, which multiplies YaRN's own 1 + 0.1 · ln(factor).
  double yarn_beta_fast = 32.0;
  double yarn_beta_slow = 1.0;
  bool yarn_truncate = true;
  double attn_factor = 1.0;
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
  int64_t context_length = 0;
  // attention.sliding_window; 0: none. A local layer's query at position p sees keys
  // p − sliding_window + 1 .. p; which layers are local: LayerIsLocal.
  int64_t sliding_window = 0;
  // 0: every layer is local (Mistral, Phi-3); n: layer l is global when l % n == n − 1
  // and local otherwise (Gemma 2: 2, Gemma 3: 6).
  int32_t sliding_window_period = 0;
  int64_t rope_dim = 0;  // rotated dims per head (usually head_dim)
  double rms_norm_eps = 1e-5;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  // Local layers' RoPE base, without scaling (Gemma 3: 10,000 beside its global
  // 1,000,000); 0: local layers rotate as global ones do.
  double rope_theta_local = 0;
  // Attention scores are q·k × attention_scale (1/sqrt(head_dim) unless the model says,
  // e.g. Gemma's query_pre_attn_scalar).
  double attention_scale = 0;
  double attn_softcap = 0;     // > 0: scores soft-capped (Gemma 2: 50)
  double final_softcap = 0;    // > 0: logits soft-capped (Gemma 2: 30)
  double embedding_scale = 0;  // > 0: embeddings multiplied by it (Gemma: sqrt(hidden))
  FfnActivation ffn_activation = FfnActivation::kSilu;
  // RMSNorm of the attention output and of the FFN output before each joins the
  // residual stream (Gemma 2 and 3: post_attention_norm, post_ffw_norm).
  bool post_norms = false;
  // Phi-3: Q, K and V are one matrix (attn_qkv) and gate and up another (ffn_up, gate
  // first), each used as row ranges of the fused tensor.
  bool fused_qkv = false;
  bool fused_gate_up = false;
  bool tied_embeddings = false;  // no output.weight: logits reuse token_embd.weight
  bool qkv_bias = false;
  // RoPE pairs (i, i + rope_dim/2) as NeoX does (qwen2); llama/mistral GGUF files store
  // Q/K permuted for adjacent pairs (2i, 2i+1).
  bool rope_halves = false;
  // Each head's query and key RMS-normalised (weights attn_q_norm / attn_k_norm, one
  // per head dim) after the projection, before RoPE (qwen3).
  bool qk_norm = false;
  // olmoe: the QK-norm spans the whole projection (weights [n_heads·head_dim] and
  // [n_kv_heads·head_dim]), not each head.
  bool qk_norm_full = false;
  // gpt-oss: a learned logit per query head in each attention softmax's normaliser
  // (attn_sinks), and the FFN's input norm stored as post_attention_norm.
  bool attn_sinks = false;
  MoeConfig moe;

  int32_t bos_token_id = -1;  // -1: none
  int32_t eos_token_id = -1;
  int32_t pad_token_id = -1;
  int32_t unk_token_id = -1;
  std::string chat_template;  // may be empty

  bool LayerIsLocal(int64_t layer) const {
    return sliding_window > 0 && (sliding_window_period == 0 ||
                                  layer % sliding_window_period != sliding_window_period - 1);
  }

  // What RoPE's cos and sin are multiplied by: YaRN's attention factor, else 1.
  double RopeAttentionFactor() const;

  // Whether layer `layer`'s FFN is the mixture of experts (else the dense one).
  bool LayerIsMoe(int64_t layer) const {
    return moe.experts > 0 && layer >= moe.leading_dense_layers;
  }

  // Weights of the model: every matrix and norm, and those one token's forward pass
  // reads (of a mixture-of-experts layer its router, its `used` picked experts and the
  // shared one, not the others; one row of the embedding table).
  struct ParameterCount {
    int64_t total = 0;
    int64_t per_token = 0;
  };
  ParameterCount Parameters() const;

  // 2 × layers × kv_heads × head_dim: float elements of K and V per token.
  int64_t KvElementsPerToken() const { return 2 * n_layers * n_kv_heads * head_dim; }

  static absl::StatusOr<ModelConfig> FromGguf(const GgufFile& file);
};

}  // namespace tandem::model

#endif  // TANDEM_COMMON_MODEL_MODEL_CONFIG_H_
