// GgufWriter: the bytes of a GGUF v3 header — metadata, then tensor infos — for
// GgufFile::Assemble, which reads a converted model (a Hugging Face directory) through
// the same validated view as a file. Keys and tensors keep the order they are added
// in; tensor offsets are written as 0 (Assemble takes the data from elsewhere). Not
// thread-safe; a plain builder.
#ifndef TANDEM_COMMON_MODEL_GGUF_WRITER_H_
#define TANDEM_COMMON_MODEL_GGUF_WRITER_H_

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/model/ggml_type.h"

namespace tandem::model {

class GgufWriter {
 public:
  GgufWriter& String(std::string_view key, std::string_view value);
  GgufWriter& Uint32(std::string_view key, uint32_t value);
  GgufWriter& Int32(std::string_view key, int32_t value);
  GgufWriter& Float32(std::string_view key, float value);
  GgufWriter& Bool(std::string_view key, bool value);
  GgufWriter& StringArray(std::string_view key, const std::vector<std::string>& values);
  GgufWriter& Int32Array(std::string_view key, const std::vector<int32_t>& values);
  GgufWriter& Float32Array(std::string_view key, const std::vector<float>& values);
  // One key-value whose type id and value bytes are given verbatim (tests write
  // malformed ones with it).
  GgufWriter& Raw(std::string_view key, uint32_t type, std::string_view value_bytes);
  // A tensor of `type` with dimensions `ne` (ne[0] varies fastest, as GGUF stores them).
  GgufWriter& Tensor(std::string_view name, GgmlType type, std::span<const int64_t> ne);

  std::string Header() const;
  // The encoded key-values alone, and how many.
  const std::string& KvBytes() const { return kv_; }
  uint64_t n_kv() const { return n_kv_; }

 private:
  void Key(std::string_view key, uint32_t type);
  std::string kv_, tensors_;
  uint64_t n_kv_ = 0, n_tensors_ = 0;
};

}  // namespace tandem::model

#endif  // TANDEM_COMMON_MODEL_GGUF_WRITER_H_
