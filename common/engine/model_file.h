// ModelFile: what a process serving a model reads from its GGUF file besides the
// weights — the mapped file, the config, the tokenizer and the file's hash (the model's
// identity in KV compatibility checks). The router needs only this; workers load the
// weights on top of it (loaded_model.h).
#ifndef TANDEM_COMMON_ENGINE_MODEL_FILE_H_
#define TANDEM_COMMON_ENGINE_MODEL_FILE_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/grammar/token_masker.h"
#include "common/model/gguf_file.h"
#include "common/model/model_config.h"
#include "common/tokenizer/tokenizer.h"

namespace tandem::engine {

struct ModelFile {
  std::unique_ptr<model::GgufFile> file;  // declared first: everything else may view into it
  model::ModelConfig config;
  std::unique_ptr<tokenizer::Tokenizer> tokenizer;
  std::string hash;  // XXH3-64 of the whole file, 16 hex digits
};

// `residence`: where a GGUF file's bytes live (common/util/mapped_file.h).
absl::StatusOr<ModelFile> OpenModelFile(const std::string& path,
                                        FileResidence residence = FileResidence::kMapped);

// The vocabulary as grammars see it: each token's bytes (control tokens none), the
// end-of-sequence token as the one that ends an output.
std::shared_ptr<const grammar::TokenMasker> MakeTokenMasker(const tokenizer::Tokenizer& tokenizer);

}  // namespace tandem::engine

#endif  // TANDEM_COMMON_ENGINE_MODEL_FILE_H_
