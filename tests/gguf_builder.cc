#include "tests/gguf_builder.h"

#include <fstream>

namespace tandem::testing {

// Well-formed key-values are encoded by the production writer; RawKv by the caller.
GgufBuilder& GgufBuilder::RawKv(std::string_view key, uint32_t type, std::string value_bytes) {
  kv_.Raw(key, type, value_bytes);
  return *this;
}

GgufBuilder& GgufBuilder::String(std::string_view key, std::string_view value) {
  kv_.String(key, value);
  return *this;
}
GgufBuilder& GgufBuilder::Uint32(std::string_view key, uint32_t value) {
  kv_.Uint32(key, value);
  return *this;
}
GgufBuilder& GgufBuilder::Int32(std::string_view key, int32_t value) {
  kv_.Int32(key, value);
  return *this;
}
GgufBuilder& GgufBuilder::Float32(std::string_view key, float value) {
  kv_.Float32(key, value);
  return *this;
}
GgufBuilder& GgufBuilder::Bool(std::string_view key, bool value) {
  kv_.Bool(key, value);
  return *this;
}
GgufBuilder& GgufBuilder::StringArray(std::string_view key,
                                      const std::vector<std::string>& values) {
  kv_.StringArray(key, values);
  return *this;
}
GgufBuilder& GgufBuilder::Int32Array(std::string_view key, const std::vector<int32_t>& values) {
  kv_.Int32Array(key, values);
  return *this;
}
GgufBuilder& GgufBuilder::Float32Array(std::string_view key, const std::vector<float>& values) {
  kv_.Float32Array(key, values);
  return *this;
}

GgufBuilder& GgufBuilder::AddTensor(Tensor t) {
  tensors_.push_back(std::move(t));
  return *this;
}

GgufBuilder& GgufBuilder::F32Tensor(std::string_view name, std::vector<uint64_t> dims,
                                    const std::vector<float>& values) {
  Tensor t;
  t.name = std::string(name);
  t.type = 0;
  t.dims = std::move(dims);
  t.data.assign(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float));
  return AddTensor(std::move(t));
}

std::string GgufBuilder::Build() const {
  ByteWriter w;
  w.Bytes("GGUF").U32(version_);
  w.U64(n_tensors_override_.value_or(tensors_.size()));
  w.U64(n_kv_override_.value_or(kv_.n_kv()));
  w.Bytes(kv_.KvBytes());

  // Place tensor data: explicit offsets as given, others at the next aligned spot.
  std::vector<uint64_t> offsets;
  uint64_t next = 0;
  for (const auto& t : tensors_) {
    uint64_t off = t.offset.value_or((next + alignment_ - 1) / alignment_ * alignment_);
    offsets.push_back(off);
    next = std::max(next, off + t.data.size());
  }
  for (size_t i = 0; i < tensors_.size(); ++i) {
    const auto& t = tensors_[i];
    w.Str(t.name).U32(static_cast<uint32_t>(t.dims.size()));
    for (uint64_t d : t.dims) w.U64(d);
    w.U32(t.type).U64(offsets[i]);
  }
  std::string out = w.str();
  if (tensors_.empty()) return out;
  out.resize((out.size() + alignment_ - 1) / alignment_ * alignment_, '\0');
  const size_t base = out.size();
  for (size_t i = 0; i < tensors_.size(); ++i) {
    const auto& d = tensors_[i].data;
    if (d.empty()) continue;  // e.g. a deliberately out-of-range offset
    if (base + offsets[i] + d.size() > out.size()) out.resize(base + offsets[i] + d.size(), '\0');
    std::copy(d.begin(), d.end(), out.begin() + static_cast<std::ptrdiff_t>(base + offsets[i]));
  }
  return out;
}

bool GgufBuilder::WriteTo(const std::string& path) const {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  const std::string bytes = Build();
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  return static_cast<bool>(f);
}

GgufBuilder TinyGpt2Vocab() {
  GgufBuilder b;
  b.String("general.architecture", "llama")
      .String("tokenizer.ggml.model", "gpt2")
      .String("tokenizer.ggml.pre", "gpt2")
      .StringArray("tokenizer.ggml.tokens", {"a", "b", "ab", "<|end|>"})
      .Int32Array("tokenizer.ggml.token_type", {1, 1, 1, 3})
      .StringArray("tokenizer.ggml.merges", {"a b"});
  return b;
}

}  // namespace tandem::testing
