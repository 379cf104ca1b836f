#include "common/engine/loaded_model.h"

#include "common/util/status_macros.h"
#include "common/util/strings.h"

namespace tandem::engine {

absl::StatusOr<LoadedModel> LoadModel(const std::string& path, const LoadOptions& options) {
  LoadedModel m;
  ASSIGN_OR_RETURN(static_cast<ModelFile&>(m), OpenModelFile(path, options.residence));
  if (options.check) {
    RETURN_IF_ERROR(options.check(m));
  }
  ASSIGN_OR_RETURN(m.weights, ModelWeights::Load(*m.file, m.config, options.progress));
  return m;
}

absl::Status CheckSameVocabulary(const tokenizer::Tokenizer& target,
                                 const tokenizer::Tokenizer& draft) {
  if (target.vocab_size() != draft.vocab_size()) {
    return absl::InvalidArgumentError(StrCat("a vocabulary of ", draft.vocab_size(),
                                             " tokens, the target's has ", target.vocab_size()));
  }
  for (int32_t id = 0; id < target.vocab_size(); ++id) {
    if (target.TokenBytes(id) != draft.TokenBytes(id)) {
      return absl::InvalidArgumentError(StrCat("token ", id, " is not the target's token ", id));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<LoadedModel> LoadDraftModel(const std::string& path, const ModelFile& target) {
  absl::StatusOr<LoadedModel> m =
      LoadModel(path, {.check = [&target](const ModelFile& draft) {
                  return CheckSameVocabulary(*target.tokenizer, *draft.tokenizer);
                }});
  if (!m.ok()) {
    return absl::Status(m.status().code(),
                        StrCat("draft_model: ", path, ": ", m.status().message()));
  }
  return m;
}

}  // namespace tandem::engine
