// libFuzzer target: GgufFile::Parse on arbitrary bytes, then everything that reads
// a parsed file (model config, tokenizer construction, a short encode/decode).
// Built with -DTANDEM_FUZZ=ON under clang; scripts/test.sh runs it for 60 s.
#include <cstddef>
#include <cstdint>

#include "common/model/gguf_file.h"
#include "common/model/model_config.h"
#include "common/tokenizer/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto file = tandem::model::GgufFile::Parse({data, size});
  if (!file.ok()) return 0;
  (void)tandem::model::ModelConfig::FromGguf(**file);
  auto tok = tandem::tokenizer::Tokenizer::FromGguf(**file);
  if (!tok.ok()) return 0;
  auto ids = (*tok)->Encode("Hello, world! 123 <|im_start|> héllo 🙂");
  if (ids.ok()) (void)(*tok)->Decode(*ids);
  return 0;
}
