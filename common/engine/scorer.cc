#include "common/engine/scorer.h"

#include "common/util/status_macros.h"
#include "common/util/strings.h"

namespace tandem::engine {

namespace {
constexpr int32_t kBlock = 16;
}  // namespace

absl::StatusOr<std::unique_ptr<Scorer>> Scorer::Create(const ModelWeights& weights,
                                                       std::unique_ptr<kernels::Backend> backend,
                                                       int32_t max_tokens, kv::KvDtype kv_dtype) {
  std::unique_ptr<Scorer> s(new Scorer());
  s->max_tokens_ = max_tokens;
  s->backend_ = std::move(backend);
  ASSIGN_OR_RETURN(s->weights_, DeviceWeights::Prepare(weights, s->backend_.get()));
  const model::ModelConfig& c = weights.config();
  const kv::KvLayout layout{static_cast<int32_t>(c.n_layers), static_cast<int32_t>(c.n_kv_heads),
                            static_cast<int32_t>(c.head_dim), kBlock, kv_dtype};
  ASSIGN_OR_RETURN(s->kv_, kernels::KvStorage::Create(
                               s->backend_.get(), layout,
                               int64_t{(max_tokens + kBlock - 1) / kBlock} * layout.BlockBytes()));
  ASSIGN_OR_RETURN(s->executor_,
                   ModelExecutor::Create(c, *s->weights_, s->backend_.get(), s->kv_.get(),
                                         {.max_tokens = max_tokens, .max_seqs = 1}));
  return s;
}

absl::Status Scorer::Logits(std::span<const int32_t> tokens, int32_t rows,
                            std::vector<float>* out) {
  const int32_t n = static_cast<int32_t>(tokens.size());
  if (n == 0 || n > max_tokens_) {
    return absl::InvalidArgumentError(
        StrCat("scorer: ", n, " tokens; it scores 1 to ", max_tokens_));
  }
  if (rows <= 0 || rows > n) rows = n;
  std::vector<int32_t> table((n + kBlock - 1) / kBlock);
  for (size_t b = 0; b < table.size(); ++b) table[b] = static_cast<int32_t>(b);
  ForwardBatch batch;
  batch.AddSequence(tokens, n, table, true, rows);
  ASSIGN_OR_RETURN(const kernels::Tensor logits, executor_->Forward(batch));
  out->resize(static_cast<size_t>(logits.elements()));
  backend_->CopyToHost(*logits.buffer, logits.offset, logits.bytes(), out->data());
  return backend_->Synchronize();
}

}  // namespace tandem::engine
