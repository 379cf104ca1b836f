// LoadModel: the GGUF file, config, tokenizer and weights every process that runs or
// serves a model needs, plus the model's identity for KV compatibility checks.
#ifndef TANDEM_COMMON_ENGINE_LOADED_MODEL_H_
#define TANDEM_COMMON_ENGINE_LOADED_MODEL_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/engine/model_weights.h"
#include "common/model/gguf_file.h"
#include "common/model/model_config.h"
#include "common/tokenizer/tokenizer.h"

namespace tandem::engine {

struct LoadedModel {
  std::unique_ptr<model::GgufFile> file;  // weights are views into it: declared first
  model::ModelConfig config;
  std::unique_ptr<tokenizer::Tokenizer> tokenizer;
  std::unique_ptr<ModelWeights> weights;  // null when loaded without weights
  std::string hash;                       // XXH3-64 of the whole file, 16 hex digits
};

struct LoadOptions {
  bool weights = true;  // false: file, config and tokenizer only (the router)
  // Called per layer while weights load (may be empty).
  std::function<void(int done, int total)> progress;
};

absl::StatusOr<LoadedModel> LoadModel(const std::string& path, const LoadOptions& options = {});

}  // namespace tandem::engine

#endif  // TANDEM_COMMON_ENGINE_LOADED_MODEL_H_
