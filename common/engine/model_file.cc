#include "common/engine/model_file.h"

#include <xxhash.h>

#include <cstdio>

#include "common/util/status_macros.h"

namespace tandem::engine {

absl::StatusOr<ModelFile> OpenModelFile(const std::string& path) {
  ModelFile m;
  ASSIGN_OR_RETURN(m.file, model::GgufFile::Open(path));
  ASSIGN_OR_RETURN(m.config, model::ModelConfig::FromGguf(*m.file));
  ASSIGN_OR_RETURN(m.tokenizer, tokenizer::Tokenizer::FromGguf(*m.file));
  const auto bytes = m.file->bytes();
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016llx",
                static_cast<unsigned long long>(XXH3_64bits(bytes.data(), bytes.size())));
  m.hash = hex;
  return m;
}

}  // namespace tandem::engine
