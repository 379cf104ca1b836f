// GgufBuilder: writes GGUF files for tests — well-formed ones, and, through its raw
// hooks, every kind of malformed one the reader must reject.
//
// Test-only. Not thread-safe. Build() returns the file bytes; WriteTo() saves them.
#ifndef TANDEM_TESTS_GGUF_BUILDER_H_
#define TANDEM_TESTS_GGUF_BUILDER_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/model/gguf_writer.h"

namespace tandem::testing {

// Little-endian byte appender.
class ByteWriter {
 public:
  ByteWriter& U8(uint8_t v) { return Raw(&v, 1); }
  ByteWriter& U32(uint32_t v) { return Raw(&v, 4); }
  ByteWriter& I32(int32_t v) { return Raw(&v, 4); }
  ByteWriter& U64(uint64_t v) { return Raw(&v, 8); }
  ByteWriter& F32(float v) { return Raw(&v, 4); }
  ByteWriter& Str(std::string_view s) {
    U64(s.size());
    bytes_.append(s);
    return *this;
  }
  ByteWriter& Raw(const void* p, size_t n) {
    bytes_.append(static_cast<const char*>(p), n);
    return *this;
  }
  ByteWriter& Bytes(std::string_view s) {
    bytes_.append(s);
    return *this;
  }
  const std::string& str() const { return bytes_; }

 private:
  std::string bytes_;
};

class GgufBuilder {
 public:
  struct Tensor {
    std::string name;
    uint32_t type = 0;               // ggml type id (raw, may be invalid on purpose)
    std::vector<uint64_t> dims;      // ne[0] first
    std::string data;                // bytes placed in the data section
    std::optional<uint64_t> offset;  // explicit offset; default: next aligned position
  };

  GgufBuilder& Version(uint32_t v) {
    version_ = v;
    return *this;
  }
  GgufBuilder& Alignment(uint32_t a) {
    alignment_ = a;
    return *this;
  }

  GgufBuilder& String(std::string_view key, std::string_view value);
  GgufBuilder& Uint32(std::string_view key, uint32_t value);
  GgufBuilder& Int32(std::string_view key, int32_t value);
  GgufBuilder& Float32(std::string_view key, float value);
  GgufBuilder& Bool(std::string_view key, bool value);
  GgufBuilder& StringArray(std::string_view key, const std::vector<std::string>& values);
  GgufBuilder& Int32Array(std::string_view key, const std::vector<int32_t>& values);
  GgufBuilder& Float32Array(std::string_view key, const std::vector<float>& values);
  // One key-value whose type and value bytes are given verbatim.
  GgufBuilder& RawKv(std::string_view key, uint32_t type, std::string value_bytes);

  GgufBuilder& AddTensor(Tensor t);
  // An F32 tensor holding `values`, shape `dims`.
  GgufBuilder& F32Tensor(std::string_view name, std::vector<uint64_t> dims,
                         const std::vector<float>& values);

  // Header counts written instead of the real ones (to declare more than is present).
  GgufBuilder& OverrideCounts(std::optional<uint64_t> n_tensors, std::optional<uint64_t> n_kv) {
    n_tensors_override_ = n_tensors;
    n_kv_override_ = n_kv;
    return *this;
  }

  std::string Build() const;
  // Writes Build() to `path`; returns false on I/O failure.
  bool WriteTo(const std::string& path) const;

 private:
  uint32_t version_ = 3;
  uint32_t alignment_ = 32;  // used for placing data; write general.alignment to change the file's
  model::GgufWriter kv_;     // the key-values, encoded
  std::vector<Tensor> tensors_;
  std::optional<uint64_t> n_tensors_override_, n_kv_override_;
};

// A minimal well-formed byte-level BPE vocabulary (GGUF metadata only).
GgufBuilder TinyGpt2Vocab();

}  // namespace tandem::testing

#endif  // TANDEM_TESTS_GGUF_BUILDER_H_
