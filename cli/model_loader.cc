#include "cli/model_loader.h"

#include <cstdio>

#include "common/util/status_macros.h"

namespace tandem::cli {

absl::StatusOr<LoadedModel> LoadModel(const std::string& path,
                                      const std::function<void(int, int)>& progress) {
  LoadedModel m;
  ASSIGN_OR_RETURN(m.file, model::GgufFile::Open(path));
  ASSIGN_OR_RETURN(m.config, model::ModelConfig::FromGguf(*m.file));
  ASSIGN_OR_RETURN(m.tokenizer, tokenizer::Tokenizer::FromGguf(*m.file));
  ASSIGN_OR_RETURN(m.weights, engine::ModelWeights::Load(*m.file, m.config, progress));
  return m;
}

int Fail(const absl::Status& status) {
  std::fprintf(stderr, "error: %s\n", std::string(status.message()).c_str());
  return 1;
}

}  // namespace tandem::cli
