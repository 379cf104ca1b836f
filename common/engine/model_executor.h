// ModelExecutor: one forward pass of a Llama-family model over a batch of sequences,
// written once against kernels::Backend.
//
// A batch mixes prompts (many new tokens) and decode steps (one new token). For each
// sequence the caller gives its new tokens, their positions (the last positions of the
// sequence), and its block table, which must already cover every position. The pass
// writes the new tokens' K/V into the cache and returns logits for the rows asked for.
//
// Not thread-safe: one executor per engine thread. The weights, backend and cache are
// borrowed and must outlive it.
#ifndef TANDEM_COMMON_ENGINE_MODEL_EXECUTOR_H_
#define TANDEM_COMMON_ENGINE_MODEL_EXECUTOR_H_

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/status.h"
#include "common/engine/model_weights.h"
#include "common/kv/kv_cache.h"
#include "kernels/backend.h"

namespace tandem::engine {

struct ForwardBatch {
  std::vector<int32_t> tokens;           // [T] new tokens of every sequence, in order
  std::vector<int32_t> positions;        // [T]
  std::vector<int32_t> q_indptr{0};      // [S+1] sequence s owns rows q_indptr[s]..q_indptr[s+1]
  std::vector<int32_t> kv_len;           // [S] tokens in the cache after this pass
  std::vector<int32_t> block_indptr{0};  // [S+1]
  std::vector<int32_t> block_ids;        // block tables, concatenated
  std::vector<int32_t> logit_rows;       // rows whose logits are returned, in this order

  // Appends a sequence whose cache will hold `kv_len` tokens, the last `new_tokens`
  // of them computed now; `want_logits`: return the last row's logits.
  void AddSequence(std::span<const int32_t> new_tokens, int32_t kv_len,
                   std::span<const int32_t> block_table, bool want_logits);
  int32_t num_tokens() const { return static_cast<int32_t>(tokens.size()); }
};

class ModelExecutor {
 public:
  ModelExecutor(const ModelWeights& weights, kernels::Backend* backend, kv::KvCache* cache);

  // logits: [batch.logit_rows.size()][vocab]. InvalidArgument for an inconsistent
  // batch (token ids out of range, block tables too short, ...); nothing is written
  // to the cache then. `on_layer_kv(l)`, when given, runs as soon as layer l's K/V
  // are in the cache (so they can be sent while later layers compute).
  using LayerCallback = std::function<void(int32_t layer)>;
  absl::Status Forward(const ForwardBatch& batch, std::vector<float>* logits,
                       const LayerCallback& on_layer_kv = nullptr);

 private:
  absl::Status Validate(const ForwardBatch& batch) const;

  const ModelWeights& w_;
  kernels::Backend* backend_;
  kv::KvCache* cache_;
  kernels::RopeParams rope_;
  kernels::RopeTable rope_table_;
  kernels::AttentionShape attn_;
  // Scratch, resized per batch.
  std::vector<float> x_, h_, q_, k_, v_, attn_out_, proj_, gate_, up_;
};

}  // namespace tandem::engine

#endif  // TANDEM_COMMON_ENGINE_MODEL_EXECUTOR_H_
