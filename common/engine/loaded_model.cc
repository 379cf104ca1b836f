#include "common/engine/loaded_model.h"

#include "common/util/status_macros.h"
#include "common/util/strings.h"

namespace tandem::engine {

absl::StatusOr<LoadedModel> LoadModel(const std::string& path, const LoadOptions& options) {
  LoadedModel m;
  ASSIGN_OR_RETURN(static_cast<ModelFile&>(m), OpenModelFile(path));
  ASSIGN_OR_RETURN(m.weights, ModelWeights::Load(*m.file, m.config, options.progress));
  return m;
}

absl::Status CheckSameVocabulary(const tokenizer::Tokenizer& target,
                                 const tokenizer::Tokenizer& draft) {
  if (target.vocab_size() != draft.vocab_size()) {
    return absl::InvalidArgumentError(StrCat("draft_model: a vocabulary of ", draft.vocab_size(),
                                             " tokens, the target's has ", target.vocab_size()));
  }
  for (int32_t id = 0; id < target.vocab_size(); ++id) {
    if (target.TokenBytes(id) != draft.TokenBytes(id)) {
      return absl::InvalidArgumentError(
          StrCat("draft_model: token ", id, " is not the target's token ", id));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<LoadedModel> LoadDraftModel(const std::string& path, const ModelFile& target) {
  auto named = [&](const absl::Status& st) {
    return absl::Status(st.code(), StrCat("draft_model: ", path, ": ", st.message()));
  };
  LoadedModel m;
  absl::StatusOr<ModelFile> file = OpenModelFile(path);
  if (!file.ok()) return named(file.status());
  static_cast<ModelFile&>(m) = *std::move(file);
  RETURN_IF_ERROR(CheckSameVocabulary(*target.tokenizer, *m.tokenizer));
  absl::StatusOr<std::unique_ptr<ModelWeights>> weights = ModelWeights::Load(*m.file, m.config);
  if (!weights.ok()) return named(weights.status());
  m.weights = *std::move(weights);
  return m;
}

}  // namespace tandem::engine
