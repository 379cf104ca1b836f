// DraftModel: a smaller model with the target's vocabulary that proposes the tokens a
// speculative step checks (Engine, `--speculative draft --draft-model FILE`). It runs
// in the engine's process, on the engine's backend, with its own paged KV cache.
//
// Per sequence it keeps the K/V of the tokens it has seen. Propose() is given each
// sequence's tokens so far (prompt + output); the draft computes from the first token
// that differs from what it holds — the whole prompt the first time (a decode worker
// receives only the target's K/V from the prefill worker: the draft's it computes
// itself), one or two tokens after a draft held or was cut — and then proposes
// greedily, its arg-max k times, one pass per draft token for every sequence at once.
// A catch-up longer than a pass's token budget is computed in chunks over several
// calls, proposing nothing until it is done.
//
// Greedy drafts are deterministic, so the engine checks them as it checks prompt
// lookup's (speculative.h VerifyDraft): a token holds exactly when the target's own
// draw equals it. The output is plain sampling's — the same tokens for a seeded
// request — whatever the draft proposes; the draft only decides how many tokens a pass
// keeps.
//
// Memory: the draft's weights as the backend prepares them, a KV pool of `kv_bytes`
// and an executor workspace. A sequence that does not fit the pool proposes nothing.
// Driven by the engine thread only.
#ifndef TANDEM_COMMON_ENGINE_DRAFT_MODEL_H_
#define TANDEM_COMMON_ENGINE_DRAFT_MODEL_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "absl/container/node_hash_map.h"
#include "absl/status/statusor.h"
#include "common/engine/device_weights.h"
#include "common/engine/model_executor.h"
#include "common/engine/model_weights.h"
#include "common/kv/block_manager.h"
#include "kernels/backend.h"
#include "kernels/kv_storage.h"

namespace tandem::engine {

struct DraftModelOptions {
  int64_t kv_bytes = int64_t{64} << 20;
  int32_t block_size = 16;
  kv::KvDtype kv_dtype = kv::KvDtype::kF32;
  ExecutorLimits limits;  // one pass: tokens (catch-up chunks) and sequences
};

class DraftModel {
 public:
  // Prepares the draft's weights on `backend` (borrowed). InvalidArgument when its
  // vocabulary size differs from `target_vocab_size` (the ids must mean the same
  // tokens; a worker checks the tokenizers too: CheckSameVocabulary in
  // loaded_model.h). Nothing is proposed before AllocateCache.
  static absl::StatusOr<std::unique_ptr<DraftModel>> Create(const ModelWeights& draft,
                                                            int64_t target_vocab_size,
                                                            kernels::Backend* backend);
  // The KV pool and the executor's workspace (once; after the engine has sized what is
  // left for the caches).
  absl::Status AllocateCache(const DraftModelOptions& options);

  struct Request {
    kv::SeqId id;
    std::span<const int32_t> prompt, output;  // the sequence's tokens so far
    int32_t k;                                // most tokens to propose (≥ 1)
    std::vector<int32_t>* draft;              // out: the proposal (empty: none this time)
  };
  // Proposes for each request (distinct ids). Catch-ups share one pass's token budget,
  // shortest first. A backend failure comes back as its status: every draft is then
  // empty and the K/V the draft held is forgotten.
  absl::Status Propose(std::span<const Request> requests);

  // Forgets the sequences for which `keep` is false (their blocks become free).
  void Retain(const std::function<bool(kv::SeqId)>& keep);
  int32_t num_sequences() const { return static_cast<int32_t>(held_.size()); }
  kv::BlockManagerStats block_stats() const {
    return blocks_ != nullptr ? blocks_->Stats() : kv::BlockManagerStats{};
  }
  // Bytes of one KV block of this model (the engine splits its KV budget by it).
  static int64_t BlockBytes(const model::ModelConfig& config, int32_t block_size,
                            kv::KvDtype dtype);

 private:
  DraftModel() = default;
  void ForgetAll();

  const ModelWeights* weights_ = nullptr;
  kernels::Backend* backend_ = nullptr;
  std::unique_ptr<DeviceWeights> device_weights_;
  std::unique_ptr<kernels::KvStorage> kv_;
  std::unique_ptr<kv::BlockManager> blocks_;
  std::unique_ptr<ModelExecutor> executor_;
  int32_t max_pass_tokens_ = 0;
  // Per sequence: the tokens whose K/V the draft's cache holds, in order.
  absl::node_hash_map<kv::SeqId, std::vector<int32_t>> held_;  // stable while Propose runs
};

}  // namespace tandem::engine

#endif  // TANDEM_COMMON_ENGINE_DRAFT_MODEL_H_
