// ModelWeights: a Llama-family model's tensors, checked against its config and laid
// out for the CPU backend.
//
// Weights of a type MatMul handles (every common GGUF type) stay as views into the
// memory-mapped GGUF file; others are dequantized to F32 once, at load. Fused
// projections (Phi-3's attn_qkv and gate/up ffn_up) become views of their row ranges,
// and a mixture of experts' stacked tensors (ffn_gate_exps [experts][ffn][hidden], …)
// one view per expert; older Mixtral files' per-expert tensors (ffn_gate.E) load too.
// Norm vectors are float32. Immutable after Load; the GgufFile must outlive it.
#ifndef TANDEM_COMMON_ENGINE_MODEL_WEIGHTS_H_
#define TANDEM_COMMON_ENGINE_MODEL_WEIGHTS_H_

#include <functional>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "common/model/gguf_file.h"
#include "common/model/model_config.h"
#include "kernels/cpu/matmul.h"

namespace tandem::engine {

using kernels::WeightMatrix;

struct LayerWeights {
  const float* attn_norm = nullptr;  // [hidden]
  WeightMatrix wq;                   // [n_heads·head_dim][hidden]
  WeightMatrix wk;                   // [n_kv_heads·head_dim][hidden]
  WeightMatrix wv;                   // [n_kv_heads·head_dim][hidden]
  const float* bq = nullptr;         // qwen2 only: [n_heads·head_dim]
  const float* bk = nullptr;         // [n_kv_heads·head_dim]
  const float* bv = nullptr;
  const float* q_norm = nullptr;          // qwen3, gemma3: [head_dim], every query head
  const float* k_norm = nullptr;          // [head_dim], every key head
  WeightMatrix wo;                        // [hidden][n_heads·head_dim]
  const float* bo = nullptr;              // gpt-oss: [hidden]
  const float* sinks = nullptr;           // gpt-oss: [n_heads], attention sinks
  const float* post_attn_norm = nullptr;  // gemma: [hidden], of the attention output
  const float* ffn_norm = nullptr;        // [hidden]
  const float* post_ffn_norm = nullptr;   // gemma: [hidden], of the FFN output
  // The dense FFN; on a mixture-of-experts layer the shared expert's (ffn_*_shexp,
  // qwen2moe: [shared_ffn] wide) or empty.
  WeightMatrix w_gate;  // [ffn][hidden]
  WeightMatrix w_up;    // [ffn][hidden]
  WeightMatrix w_down;  // [hidden][ffn]
  // A mixture-of-experts layer (ModelConfig::LayerIsMoe; model_config.h, MoeConfig).
  WeightMatrix router;                 // ffn_gate_inp [experts][hidden]
  const float* router_bias = nullptr;  // exp_probs_b [experts], or null: added for picking only
  const float* router_logit_bias = nullptr;  // ffn_gate_inp.bias [experts] (gpt-oss), or null
  std::vector<WeightMatrix> expert_gate;     // [experts] of [expert ffn][hidden]
  std::vector<WeightMatrix> expert_up;       // [experts] of [expert ffn][hidden]
  std::vector<WeightMatrix> expert_down;     // [experts] of [hidden][expert ffn]
  // gpt-oss: the experts' biases, [experts][expert ffn] (gate, up) and [experts][hidden]
  // (down), or null.
  const float* expert_gate_bias = nullptr;
  const float* expert_up_bias = nullptr;
  const float* expert_down_bias = nullptr;
  const float* shared_gate = nullptr;  // ffn_gate_inp_shexp [hidden], with a shared expert
};

class ModelWeights {
 public:
  // `progress(done, total)` is called as tensors are prepared (may be empty).
  static absl::StatusOr<std::unique_ptr<ModelWeights>> Load(
      const model::GgufFile& file, const model::ModelConfig& config,
      const std::function<void(int, int)>& progress = {});

  // What Load would keep, without converting anything: every check Load makes (each
  // tensor present, its shape, a type tandem decodes, features it supports), and the
  // bytes the weights would take — as stored in the file, and converted to F32.
  struct Footprint {
    int64_t stored_bytes = 0;     // matrices and vectors used where they lie in the file
    int64_t converted_bytes = 0;  // F32 copies made at load
  };
  static absl::StatusOr<Footprint> Check(const model::GgufFile& file,
                                         const model::ModelConfig& config);

  // Random weights of `config`'s shape, no file (synthetic_model.h names the shapes):
  // every matrix of `type` — kF32 (values exactly representable in bf16, so a bf16
  // device reads the same numbers) or kQ8_0 (a quarter of the memory, for large
  // shapes) — uniform with the variance of the usual 0.02-std initialisation scaled
  // by 1/sqrt(fan_in / 1024); norms 1. Deterministic in `seed`; filled on every core.
  static absl::StatusOr<std::unique_ptr<ModelWeights>> Random(const model::ModelConfig& config,
                                                              model::GgmlType type, uint64_t seed);

  const model::ModelConfig& config() const { return config_; }
  const WeightMatrix& token_embd() const { return token_embd_; }  // [vocab][hidden]
  const WeightMatrix& output() const { return output_; }          // [vocab][hidden]
  const float* output_norm() const { return output_norm_; }       // [hidden]
  const float* rope_freq_factors() const { return rope_freqs_; }  // [rope_dim/2] or null
  const std::vector<LayerWeights>& layers() const { return layers_; }
  // Bytes of weights as tandem holds them (views plus converted copies).
  int64_t weight_bytes() const { return weight_bytes_; }
  // Bytes one token's forward pass reads: weight_bytes() less the experts it does not
  // pick (of a mixture of experts' layers, `used` of `experts` are read per token).
  int64_t token_read_bytes() const;
  int64_t converted_bytes() const { return converted_bytes_; }

 private:
  ModelWeights() = default;
  absl::Status LoadInto(const model::GgufFile& f, const model::ModelConfig& config,
                        const std::function<void(int, int)>& progress);
  absl::StatusOr<WeightMatrix> Matrix(const model::GgufFile& f, const std::string& name,
                                      int64_t rows, int64_t cols);
  // `t` as a [rows][cols] matrix: in place where MatMul reads it, else converted.
  absl::StatusOr<WeightMatrix> Place(const model::GgufTensorInfo& t, const std::string& name,
                                     int64_t rows, int64_t cols);
  // The `experts` matrices [rows][cols] of `base` (e.g. "blk.0.ffn_gate"): views of the
  // stacked base_exps.weight, or base.E.weight each.
  absl::StatusOr<std::vector<WeightMatrix>> Experts(const model::GgufFile& f,
                                                    const std::string& base, int64_t experts,
                                                    int64_t rows, int64_t cols);
  absl::StatusOr<const float*> Vector(const model::GgufFile& f, const std::string& name, int64_t n,
                                      bool optional = false);

  model::ModelConfig config_;
  WeightMatrix token_embd_, output_;
  const float* output_norm_ = nullptr;
  const float* rope_freqs_ = nullptr;
  std::vector<LayerWeights> layers_;
  // Converted tensors. Views point into the inner vectors' buffers, which moving the
  // outer vector does not relocate.
  std::vector<std::vector<float>> owned_;
  std::vector<std::vector<uint8_t>> owned_bytes_;  // Random's quantized matrices
  int64_t weight_bytes_ = 0;
  int64_t converted_bytes_ = 0;
  int64_t expert_bytes_ = 0;  // of weight_bytes_, the experts' matrices
  bool check_only_ = false;   // Check: account for conversions without making them
};

}  // namespace tandem::engine

#endif  // TANDEM_COMMON_ENGINE_MODEL_WEIGHTS_H_
