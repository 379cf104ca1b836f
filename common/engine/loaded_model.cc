#include "common/engine/loaded_model.h"

#include "common/util/status_macros.h"

namespace tandem::engine {

absl::StatusOr<LoadedModel> LoadModel(const std::string& path, const LoadOptions& options) {
  LoadedModel m;
  ASSIGN_OR_RETURN(static_cast<ModelFile&>(m), OpenModelFile(path));
  ASSIGN_OR_RETURN(m.weights, ModelWeights::Load(*m.file, m.config, options.progress));
  return m;
}

}  // namespace tandem::engine
