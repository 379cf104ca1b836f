#include "common/model/gguf_writer.h"

#include <cstring>

#include "common/model/gguf_file.h"

namespace tandem::model {

namespace {

template <class T>
void Put(std::string* out, T v) {
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  out->append(b, sizeof(T));
}

void PutString(std::string* out, std::string_view s) {
  Put<uint64_t>(out, s.size());
  out->append(s);
}

constexpr uint32_t Id(GgufValueType t) { return static_cast<uint32_t>(t); }

}  // namespace

void GgufWriter::Key(std::string_view key, uint32_t type) {
  PutString(&kv_, key);
  Put<uint32_t>(&kv_, type);
  ++n_kv_;
}

GgufWriter& GgufWriter::Raw(std::string_view key, uint32_t type, std::string_view value_bytes) {
  Key(key, type);
  kv_.append(value_bytes);
  return *this;
}

GgufWriter& GgufWriter::String(std::string_view key, std::string_view value) {
  Key(key, Id(GgufValueType::kString));
  PutString(&kv_, value);
  return *this;
}

GgufWriter& GgufWriter::Uint32(std::string_view key, uint32_t value) {
  Key(key, Id(GgufValueType::kUint32));
  Put(&kv_, value);
  return *this;
}

GgufWriter& GgufWriter::Int32(std::string_view key, int32_t value) {
  Key(key, Id(GgufValueType::kInt32));
  Put(&kv_, value);
  return *this;
}

GgufWriter& GgufWriter::Float32(std::string_view key, float value) {
  Key(key, Id(GgufValueType::kFloat32));
  Put(&kv_, value);
  return *this;
}

GgufWriter& GgufWriter::Bool(std::string_view key, bool value) {
  Key(key, Id(GgufValueType::kBool));
  Put<uint8_t>(&kv_, value ? 1 : 0);
  return *this;
}

GgufWriter& GgufWriter::StringArray(std::string_view key, const std::vector<std::string>& values) {
  Key(key, Id(GgufValueType::kArray));
  Put<uint32_t>(&kv_, Id(GgufValueType::kString));
  Put<uint64_t>(&kv_, values.size());
  for (const std::string& v : values) PutString(&kv_, v);
  return *this;
}

GgufWriter& GgufWriter::Int32Array(std::string_view key, const std::vector<int32_t>& values) {
  Key(key, Id(GgufValueType::kArray));
  Put<uint32_t>(&kv_, Id(GgufValueType::kInt32));
  Put<uint64_t>(&kv_, values.size());
  for (int32_t v : values) Put(&kv_, v);
  return *this;
}

GgufWriter& GgufWriter::Float32Array(std::string_view key, const std::vector<float>& values) {
  Key(key, Id(GgufValueType::kArray));
  Put<uint32_t>(&kv_, Id(GgufValueType::kFloat32));
  Put<uint64_t>(&kv_, values.size());
  for (float v : values) Put(&kv_, v);
  return *this;
}

GgufWriter& GgufWriter::Tensor(std::string_view name, GgmlType type, std::span<const int64_t> ne) {
  PutString(&tensors_, name);
  Put<uint32_t>(&tensors_, static_cast<uint32_t>(ne.size()));
  for (int64_t n : ne) Put<uint64_t>(&tensors_, static_cast<uint64_t>(n));
  Put<uint32_t>(&tensors_, static_cast<uint32_t>(type));
  Put<uint64_t>(&tensors_, 0);
  ++n_tensors_;
  return *this;
}

std::string GgufWriter::Header() const {
  std::string out;
  out.append("GGUF", 4);
  Put<uint32_t>(&out, 3);
  Put<uint64_t>(&out, n_tensors_);
  Put<uint64_t>(&out, n_kv_);
  out += kv_;
  out += tensors_;
  return out;
}

}  // namespace tandem::model
