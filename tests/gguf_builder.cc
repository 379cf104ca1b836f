#include "tests/gguf_builder.h"

#include <fstream>

namespace tandem::testing {

namespace {
enum : uint32_t { kU8 = 0, kU32 = 4, kI32 = 5, kF32 = 6, kBool = 7, kString = 8, kArray = 9 };
}

GgufBuilder& GgufBuilder::RawKv(std::string_view key, uint32_t type, std::string value_bytes) {
  ByteWriter w;
  w.Str(key).U32(type).Bytes(value_bytes);
  kv_.push_back(w.str());
  return *this;
}

GgufBuilder& GgufBuilder::String(std::string_view key, std::string_view value) {
  return RawKv(key, kString, ByteWriter().Str(value).str());
}
GgufBuilder& GgufBuilder::Uint32(std::string_view key, uint32_t value) {
  return RawKv(key, kU32, ByteWriter().U32(value).str());
}
GgufBuilder& GgufBuilder::Int32(std::string_view key, int32_t value) {
  return RawKv(key, kI32, ByteWriter().I32(value).str());
}
GgufBuilder& GgufBuilder::Float32(std::string_view key, float value) {
  return RawKv(key, kF32, ByteWriter().F32(value).str());
}
GgufBuilder& GgufBuilder::Bool(std::string_view key, bool value) {
  return RawKv(key, kBool, ByteWriter().U8(value ? 1 : 0).str());
}
GgufBuilder& GgufBuilder::StringArray(std::string_view key,
                                      const std::vector<std::string>& values) {
  ByteWriter w;
  w.U32(kString).U64(values.size());
  for (const auto& v : values) w.Str(v);
  return RawKv(key, kArray, w.str());
}
GgufBuilder& GgufBuilder::Int32Array(std::string_view key, const std::vector<int32_t>& values) {
  ByteWriter w;
  w.U32(kI32).U64(values.size());
  for (int32_t v : values) w.I32(v);
  return RawKv(key, kArray, w.str());
}
GgufBuilder& GgufBuilder::Float32Array(std::string_view key, const std::vector<float>& values) {
  ByteWriter w;
  w.U32(kF32).U64(values.size());
  for (float v : values) w.F32(v);
  return RawKv(key, kArray, w.str());
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
  w.U64(n_kv_override_.value_or(kv_.size()));
  for (const auto& kv : kv_) w.Bytes(kv);

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
