// The default model's tokenizer, loaded once per test binary (and kept: tests share it).
#ifndef TANDEM_TESTS_DEFAULT_TOKENIZER_H_
#define TANDEM_TESTS_DEFAULT_TOKENIZER_H_

#include "common/model/gguf_file.h"
#include "common/tokenizer/tokenizer.h"
#include "tests/test_paths.h"

namespace tandem::testing {

inline const tokenizer::Tokenizer& DefaultTokenizer() {
  static const model::GgufFile* file = model::GgufFile::Open(DefaultModelPath())->release();
  static const tokenizer::Tokenizer* tok = tokenizer::Tokenizer::FromGguf(*file)->release();
  return *tok;
}

}  // namespace tandem::testing

#endif  // TANDEM_TESTS_DEFAULT_TOKENIZER_H_
