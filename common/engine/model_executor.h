// ModelExecutor: one forward pass of a Llama-family model over a batch of sequences,
// written once against kernels::Backend.
//
// A batch mixes prompts (many new tokens) and decode steps (one new token). For each
// sequence the caller gives its new tokens, their positions (the last positions of the
// sequence), and its block table, which must already cover every position. The pass
// writes the new tokens' K/V into the KV storage and returns logits for the rows
// asked for.
//
// Memory: one workspace buffer in backend memory, sized at creation for the limits
// (max tokens and sequences per pass, block tables at full context) and holding every
// activation and the step plan; a pass over larger limits regrows it (the engine's
// scheduler stays within them; direct callers may not).
// The step plan — token ids, positions, slot mapping, block tables, logit rows — is
// built on the host once per pass and uploaded in one copy; every layer reads it
// there. Logits stay in the workspace until the next pass.
//
// Decode steps (every sequence one new token, all logits wanted) are replayed from a
// graph per batch size where the backend captures graphs (CUDA): the plan upload stays
// outside the graph, so each replay reads that step's tokens, positions and tables.
//
// Not thread-safe: one executor per engine thread. The weights, backend and storage
// are borrowed and must outlive it.
#ifndef TANDEM_COMMON_ENGINE_MODEL_EXECUTOR_H_
#define TANDEM_COMMON_ENGINE_MODEL_EXECUTOR_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "common/engine/device_weights.h"
#include "common/model/model_config.h"
#include "kernels/backend.h"
#include "kernels/kv_storage.h"

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
  // of them computed now; `want_logits`: return the last `logit_count` rows' logits
  // (more than one: a speculative draft being checked).
  void AddSequence(std::span<const int32_t> new_tokens, int32_t kv_len,
                   std::span<const int32_t> block_table, bool want_logits, int32_t logit_count = 1);
  int32_t num_tokens() const { return static_cast<int32_t>(tokens.size()); }
};

struct ExecutorLimits {
  int32_t max_tokens = 2048;  // tokens per pass
  int32_t max_seqs = 64;      // sequences per pass
  // Replay decode steps from graphs where the backend can capture them (CUDA graphs,
  // one per batch size, captured at its second step); false: every pass eager.
  bool graphs = true;
};

class ModelExecutor {
 public:
  static absl::StatusOr<std::unique_ptr<ModelExecutor>> Create(const model::ModelConfig& config,
                                                               const DeviceWeights& weights,
                                                               kernels::Backend* backend,
                                                               kernels::KvStorage* kv,
                                                               const ExecutorLimits& limits);

  // Device memory Create takes for `limits` on `backend`: the workspace and the scratch
  // it reserves there (Backend::ScratchBytes: the bf16 GEMM operand, split-K partials).
  static int64_t DeviceBytes(const model::ModelConfig& config, const ExecutorLimits& limits,
                             int32_t block_size, const kernels::Backend& backend);

  // Returns logits [batch.logit_rows.size()][vocab] in backend memory, valid until the
  // next Forward. InvalidArgument for an inconsistent batch (token ids out of range,
  // block tables too short, ...): nothing is written to the KV storage then. A backend
  // failure comes back as its status (the KV of the batch's new tokens is then
  // undefined). `on_layer_kv(l, ready)`, when given, runs once layer l's K/V writes are
  // enqueued; `ready` completes when they are in the storage (so a transport can send
  // layer l while later layers compute).
  using LayerCallback =
      std::function<void(int32_t layer, const std::shared_ptr<kernels::Event>& ready)>;
  absl::StatusOr<kernels::Tensor> Forward(const ForwardBatch& batch,
                                          const LayerCallback& on_layer_kv = nullptr);
  // [1][max logit rows] int32 in the workspace for the sampler (Sampler::SampleRows'
  // `ids`); valid until the workspace regrows.
  kernels::Tensor IdsScratch() const;

 private:
  ModelExecutor(const model::ModelConfig& config, const DeviceWeights& weights,
                kernels::Backend* backend, kernels::KvStorage* kv);
  absl::Status Validate(const ForwardBatch& batch) const;
  // Enqueues every op of the pass after the plan upload (eagerly or into a capture).
  void EnqueuePass(const ForwardBatch& batch, const kernels::StepView& step,
                   const kernels::Tensor& logit_rows, const LayerCallback& on_layer_kv);
  // Workspace for `tokens` tokens, `seqs` sequences and `table_entries` block ids.
  absl::Status Reserve(int64_t tokens, int64_t seqs, int64_t table_entries);

  const model::ModelConfig config_;
  const DeviceWeights& w_;
  kernels::Backend* backend_;
  kernels::KvStorage* kv_;
  kernels::RopeParams rope_;
  kernels::RopeParams rope_local_;  // sliding-window layers' RoPE where it differs
  bool local_rope_ = false;         // whether it does (Gemma 3)
  kernels::AttentionShape attn_;
  kernels::MoeRouting routing_;  // a mixture of experts' (experts 0: none)
  std::unique_ptr<kernels::Buffer> workspace_;
  int64_t cap_tokens_ = 0, cap_seqs_ = 0, cap_table_ = 0;
  std::vector<int32_t> plan_;  // host staging of the step plan, uploaded once per pass
  bool use_graphs_ = true;
  absl::flat_hash_map<int64_t, std::unique_ptr<kernels::Graph>> graphs_;  // by batch size
  absl::flat_hash_set<int64_t> warm_;  // batch sizes that ran once eagerly
  int64_t scratch_epoch_ = 0;          // the backend's when graphs_ were captured
};

}  // namespace tandem::engine

#endif  // TANDEM_COMMON_ENGINE_MODEL_EXECUTOR_H_
