// LoadModel: the GGUF file, config, tokenizer and weights every engine command needs.
#ifndef TANDEM_CLI_MODEL_LOADER_H_
#define TANDEM_CLI_MODEL_LOADER_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/engine/model_weights.h"
#include "common/model/gguf_file.h"
#include "common/model/model_config.h"
#include "common/tokenizer/tokenizer.h"

namespace tandem::cli {

struct LoadedModel {
  std::unique_ptr<model::GgufFile> file;  // weights are views into it: declared first
  model::ModelConfig config;
  std::unique_ptr<tokenizer::Tokenizer> tokenizer;
  std::unique_ptr<engine::ModelWeights> weights;
};

// `progress(done, total)` is called per layer while weights load (may be empty).
absl::StatusOr<LoadedModel> LoadModel(const std::string& path,
                                      const std::function<void(int, int)>& progress = {});

// Prints "error: <message>" to stderr; returns the process exit code 1.
int Fail(const absl::Status& status);

}  // namespace tandem::cli

#endif  // TANDEM_CLI_MODEL_LOADER_H_
