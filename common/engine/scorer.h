// Scorer: the teacher-forced logits of a token sequence, on the host. One model
// executor over its own backend and KV storage; each call computes the sequence in one
// pass from an empty cache. What `tandem bench kld` and the golden tests score with.
#ifndef TANDEM_COMMON_ENGINE_SCORER_H_
#define TANDEM_COMMON_ENGINE_SCORER_H_

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "common/engine/device_weights.h"
#include "common/engine/model_executor.h"
#include "common/engine/model_weights.h"
#include "kernels/backend.h"
#include "kernels/kv_storage.h"

namespace tandem::engine {

class Scorer {
 public:
  // Scores sequences of up to `max_tokens` tokens with `weights` on `backend` (its own),
  // the cache in `kv_dtype`.
  static absl::StatusOr<std::unique_ptr<Scorer>> Create(const ModelWeights& weights,
                                                        std::unique_ptr<kernels::Backend> backend,
                                                        int32_t max_tokens,
                                                        kv::KvDtype kv_dtype = kv::KvDtype::kF32);

  // Logits [rows][vocab] of the last `rows` positions of `tokens` (0: every position);
  // row r is the distribution of the token after position tokens.size() - rows + r.
  // InvalidArgument for no tokens or more than `max_tokens`.
  absl::Status Logits(std::span<const int32_t> tokens, int32_t rows, std::vector<float>* out);

 private:
  Scorer() = default;
  int32_t max_tokens_ = 0;
  std::unique_ptr<kernels::Backend> backend_;
  std::unique_ptr<DeviceWeights> weights_;
  std::unique_ptr<kernels::KvStorage> kv_;
  std::unique_ptr<ModelExecutor> executor_;
};

}  // namespace tandem::engine

#endif  // TANDEM_COMMON_ENGINE_SCORER_H_
