#include "common/engine/model_file.h"

#include <xxhash.h>

#include <cstdio>

#include "common/model/hf_directory.h"
#include "common/util/status_macros.h"

namespace tandem::engine {

absl::StatusOr<ModelFile> OpenModelFile(const std::string& path, FileResidence residence) {
  ModelFile m;
  ASSIGN_OR_RETURN(m.file, model::OpenModel(path, residence));
  ASSIGN_OR_RETURN(m.config, model::ModelConfig::FromGguf(*m.file));
  ASSIGN_OR_RETURN(m.tokenizer, tokenizer::Tokenizer::FromGguf(*m.file));
  // The whole file; for a directory, its converted header and every tensor's bytes.
  XXH3_state_t* state = XXH3_createState();
  XXH3_64bits_reset(state);
  const auto bytes = m.file->bytes();
  XXH3_64bits_update(state, bytes.data(), bytes.size());
  if (m.file->assembled()) {
    for (const auto& t : m.file->tensors()) XXH3_64bits_update(state, t.data.data(), t.data.size());
  }
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016llx",
                static_cast<unsigned long long>(XXH3_64bits_digest(state)));
  XXH3_freeState(state);
  m.hash = hex;
  return m;
}

std::shared_ptr<const grammar::TokenMasker> MakeTokenMasker(const tokenizer::Tokenizer& tokenizer) {
  const tokenizer::Vocab& v = tokenizer.vocab();
  std::vector<std::string> bytes(v.size());
  for (int32_t id = 0; id < v.size(); ++id) {
    if (v.types[id] != tokenizer::TokenType::kControl) bytes[id] = tokenizer.TokenBytes(id);
  }
  std::vector<int32_t> ends;
  if (v.eos_id >= 0) ends.push_back(v.eos_id);
  return std::make_shared<const grammar::TokenMasker>(bytes, std::move(ends));
}

}  // namespace tandem::engine
