// DeviceWeights: a model's weights as one backend holds them, prepared once at load.
//
// ModelWeights (host, checked against the config) is the source. A backend that can
// read host memory (the CPU) borrows each tensor in place — zero-copy views of the
// mapped GGUF file, quantized types kept. Any other backend (the CPU fence, a GPU)
// gets them copied into one weights buffer of its own; a device backend is where
// conversion (to bf16) and fusion (Q|K|V, gate|up) belong. Immutable after Prepare;
// `host` must outlive it while tensors are borrowed.
#ifndef TANDEM_COMMON_ENGINE_DEVICE_WEIGHTS_H_
#define TANDEM_COMMON_ENGINE_DEVICE_WEIGHTS_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "common/engine/model_weights.h"
#include "kernels/backend.h"

namespace tandem::engine {

using kernels::Tensor;

struct DeviceLayer {
  Tensor attn_norm;             // [1][hidden] f32
  Tensor wq, wk, wv;            // [n_heads·head_dim | n_kv_heads·head_dim][hidden]
  Tensor bq, bk, bv;            // [1][…] f32, or empty
  Tensor q_norm, k_norm;        // [1][head_dim] f32, or empty
  Tensor wo;                    // [hidden][n_heads·head_dim]
  Tensor bo;                    // [1][hidden] f32, or empty (gpt-oss)
  Tensor sinks;                 // [1][n_heads] f32, or empty (gpt-oss)
  Tensor post_attn_norm;        // [1][hidden] f32, or empty (gemma)
  Tensor ffn_norm;              // [1][hidden] f32
  Tensor post_ffn_norm;         // [1][hidden] f32, or empty (gemma)
  Tensor w_gate, w_up, w_down;  // [ffn][hidden], [ffn][hidden], [hidden][ffn]; shared expert
  // A mixture-of-experts layer (LayerWeights says what each is); else empty.
  Tensor router;             // [experts][hidden]
  Tensor router_bias;        // [1][experts] f32, or empty
  Tensor router_logit_bias;  // [1][experts] f32, or empty
  // [experts][expert ffn] (gate, up) and [experts][hidden] (down) f32, or empty.
  Tensor expert_gate_bias, expert_up_bias, expert_down_bias;
  std::vector<Tensor> expert_gate, expert_up, expert_down;  // one per expert
  Tensor shared_gate;                                       // [1][hidden] f32, or empty
};

class DeviceWeights {
 public:
  static absl::StatusOr<std::unique_ptr<DeviceWeights>> Prepare(const ModelWeights& host,
                                                                kernels::Backend* backend);

  const Tensor& token_embd() const { return token_embd_; }    // [vocab][hidden]
  const Tensor& output() const { return output_; }            // [vocab][hidden]
  const Tensor& output_norm() const { return output_norm_; }  // [1][hidden]
  const Tensor& rope_freqs() const { return rope_freqs_; }    // [1][rope_dim/2] or empty
  const std::vector<DeviceLayer>& layers() const { return layers_; }
  // Bytes copied into backend memory (0 when every tensor is borrowed).
  int64_t copied_bytes() const { return copied_bytes_; }

 private:
  DeviceWeights() = default;
  Tensor token_embd_, output_, output_norm_, rope_freqs_;
  std::vector<DeviceLayer> layers_;
  std::vector<std::unique_ptr<kernels::Buffer>> buffers_;
  int64_t copied_bytes_ = 0;
};

}  // namespace tandem::engine

#endif  // TANDEM_COMMON_ENGINE_DEVICE_WEIGHTS_H_
