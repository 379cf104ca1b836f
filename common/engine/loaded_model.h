// LoadModel: a model file (model_file.h) with its weights, for the processes that run it.
#ifndef TANDEM_COMMON_ENGINE_LOADED_MODEL_H_
#define TANDEM_COMMON_ENGINE_LOADED_MODEL_H_

#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "common/engine/model_file.h"
#include "common/engine/model_weights.h"

namespace tandem::engine {

// The weights are views into `file`, which the base class destroys last.
struct LoadedModel : ModelFile {
  std::unique_ptr<ModelWeights> weights;
};

struct LoadOptions {
  // Called per layer while weights load (may be empty).
  std::function<void(int done, int total)> progress = {};
  // Checks the file (config, tokenizer) before its weights load; an error ends the load.
  std::function<absl::Status(const ModelFile&)> check = {};
  // Where a GGUF file's bytes live: by default copied into huge-page memory where that
  // pays and fits, else mapped (common/util/mapped_file.h).
  FileResidence residence = FileResidence::kAuto;
};

absl::StatusOr<LoadedModel> LoadModel(const std::string& path, const LoadOptions& options = {});

// The residence for weights a backend reads where they are: the CPU's (kAuto); a
// device copies them, so its host bytes stay mapped (reclaimable page cache, not a copy).
inline FileResidence ResidenceFor(std::string_view device) {
  return device == "cuda" ? FileResidence::kMapped : FileResidence::kAuto;
}

// Whether a draft's token ids mean the target's tokens: the same number, each with the
// same bytes (InvalidArgument naming the first that differs).
absl::Status CheckSameVocabulary(const tokenizer::Tokenizer& target,
                                 const tokenizer::Tokenizer& draft);

// A speculative decoding draft for `target`: LoadModel with CheckSameVocabulary as its
// check (so a mismatch is refused before the weights load); errors name draft_model.
absl::StatusOr<LoadedModel> LoadDraftModel(const std::string& path, const ModelFile& target);

}  // namespace tandem::engine

#endif  // TANDEM_COMMON_ENGINE_LOADED_MODEL_H_
