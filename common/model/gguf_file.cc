#include "common/model/gguf_file.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <numeric>

#include "absl/status/status.h"
#include "common/util/status_macros.h"
#include "common/util/strings.h"

namespace tandem::model {

namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as little-endian u32
constexpr uint64_t kMaxKeyLength = 65535;

absl::Status Malformed(std::string_view what) {
  return absl::InvalidArgumentError(StrCat("malformed GGUF: ", what));
}

// Size in bytes of a fixed-size scalar type; 0 for STRING and ARRAY.
size_t ScalarSize(GgufValueType t) {
  switch (t) {
    case GgufValueType::kUint8:
    case GgufValueType::kInt8:
    case GgufValueType::kBool:
      return 1;
    case GgufValueType::kUint16:
    case GgufValueType::kInt16:
      return 2;
    case GgufValueType::kUint32:
    case GgufValueType::kInt32:
    case GgufValueType::kFloat32:
      return 4;
    case GgufValueType::kUint64:
    case GgufValueType::kInt64:
    case GgufValueType::kFloat64:
      return 8;
    case GgufValueType::kString:
    case GgufValueType::kArray:
      return 0;
  }
  return 0;
}

bool IsKnownValueType(uint32_t t) { return t <= static_cast<uint32_t>(GgufValueType::kFloat64); }

// A bounds-checked little-endian reader over the file bytes. Every read either
// succeeds entirely or returns an error naming `what`; it never reads past the end.
class Cursor {
 public:
  explicit Cursor(std::span<const uint8_t> bytes) : bytes_(bytes) {}

  uint64_t pos() const { return pos_; }
  uint64_t remaining() const { return bytes_.size() - pos_; }

  template <typename T>
  absl::StatusOr<T> Read(std::string_view what) {
    if (remaining() < sizeof(T)) {
      return Malformed(StrCat(what, " at offset ", pos_, " runs past the end of the file"));
    }
    T v;
    std::memcpy(&v, bytes_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }

  absl::StatusOr<std::span<const uint8_t>> Take(uint64_t n, std::string_view what) {
    if (n > remaining()) {
      return Malformed(StrCat(what, " at offset ", pos_, " declares ", n, " bytes but only ",
                              remaining(), " remain in the file"));
    }
    auto out = bytes_.subspan(pos_, n);
    pos_ += n;
    return out;
  }

  absl::StatusOr<std::string_view> ReadString(std::string_view what) {
    ASSIGN_OR_RETURN(uint64_t len, Read<uint64_t>(StrCat(what, " length")));
    ASSIGN_OR_RETURN(auto s, Take(len, what));
    return std::string_view(reinterpret_cast<const char*>(s.data()), s.size());
  }

 private:
  std::span<const uint8_t> bytes_;
  uint64_t pos_ = 0;
};

template <typename T>
absl::StatusOr<GgufValue> ReadScalarAs(Cursor& c, std::string_view what) {
  ASSIGN_OR_RETURN(T v, c.Read<T>(what));
  return GgufValue(std::in_place_type<T>, v);
}

absl::StatusOr<GgufValue> ReadScalar(Cursor& c, GgufValueType t, std::string_view what) {
  switch (t) {
    case GgufValueType::kUint8:
      return ReadScalarAs<uint8_t>(c, what);
    case GgufValueType::kInt8:
      return ReadScalarAs<int8_t>(c, what);
    case GgufValueType::kUint16:
      return ReadScalarAs<uint16_t>(c, what);
    case GgufValueType::kInt16:
      return ReadScalarAs<int16_t>(c, what);
    case GgufValueType::kUint32:
      return ReadScalarAs<uint32_t>(c, what);
    case GgufValueType::kInt32:
      return ReadScalarAs<int32_t>(c, what);
    case GgufValueType::kFloat32:
      return ReadScalarAs<float>(c, what);
    case GgufValueType::kUint64:
      return ReadScalarAs<uint64_t>(c, what);
    case GgufValueType::kInt64:
      return ReadScalarAs<int64_t>(c, what);
    case GgufValueType::kFloat64:
      return ReadScalarAs<double>(c, what);
    case GgufValueType::kBool: {
      ASSIGN_OR_RETURN(uint8_t b, c.Read<uint8_t>(what));
      if (b > 1) return Malformed(StrCat(what, ": bool value ", int{b}, " is not 0 or 1"));
      return GgufValue(std::in_place_type<bool>, b == 1);
    }
    case GgufValueType::kString: {
      ASSIGN_OR_RETURN(std::string_view s, c.ReadString(what));
      return GgufValue(std::in_place_type<std::string_view>, s);
    }
    case GgufValueType::kArray:
      break;
  }
  return Malformed(StrCat(what, ": unexpected value type"));
}

absl::StatusOr<GgufValue> ReadValue(Cursor& c, GgufValueType t, std::string_view what) {
  if (t != GgufValueType::kArray) return ReadScalar(c, t, what);

  ASSIGN_OR_RETURN(uint32_t et_raw, c.Read<uint32_t>(StrCat(what, " array element type")));
  if (!IsKnownValueType(et_raw)) {
    return Malformed(StrCat(what, ": unknown array element type ", et_raw));
  }
  GgufArray arr;
  arr.element_type = static_cast<GgufValueType>(et_raw);
  if (arr.element_type == GgufValueType::kArray) {
    return Malformed(StrCat(what, ": nested arrays are not supported"));
  }
  ASSIGN_OR_RETURN(arr.count, c.Read<uint64_t>(StrCat(what, " array length")));
  if (arr.element_type == GgufValueType::kString) {
    // Each string takes at least its 8-byte length: bound the count before reserving.
    if (arr.count > c.remaining() / sizeof(uint64_t)) {
      return Malformed(StrCat(what, ": array of ", arr.count, " strings cannot fit in the ",
                              c.remaining(), " bytes that remain"));
    }
    arr.strings.reserve(arr.count);
    for (uint64_t i = 0; i < arr.count; ++i) {
      ASSIGN_OR_RETURN(std::string_view s, c.ReadString(what));
      arr.strings.push_back(s);
    }
    return GgufValue(std::move(arr));
  }
  size_t elem = ScalarSize(arr.element_type);
  if (arr.count > c.remaining() / elem) {
    return Malformed(StrCat(what, ": array of ", arr.count, " ",
                            GgufValueTypeName(arr.element_type), " elements cannot fit in the ",
                            c.remaining(), " bytes that remain"));
  }
  ASSIGN_OR_RETURN(arr.raw, c.Take(arr.count * elem, what));
  if (arr.element_type == GgufValueType::kBool) {
    for (uint8_t b : arr.raw) {
      if (b > 1) return Malformed(StrCat(what, ": bool element ", int{b}, " is not 0 or 1"));
    }
  }
  return GgufValue(std::move(arr));
}

// Keys whose type the rest of tandem relies on; a file that disagrees is rejected
// here rather than misread later.
struct KeySchema {
  std::string_view key;
  GgufValueType type;
  GgufValueType element_type;  // for arrays
};
constexpr KeySchema kSchema[] = {
    {"general.alignment", GgufValueType::kUint32, GgufValueType::kUint32},
    {"general.architecture", GgufValueType::kString, GgufValueType::kString},
    {"tokenizer.ggml.model", GgufValueType::kString, GgufValueType::kString},
    {"tokenizer.ggml.pre", GgufValueType::kString, GgufValueType::kString},
    {"tokenizer.ggml.tokens", GgufValueType::kArray, GgufValueType::kString},
    {"tokenizer.ggml.merges", GgufValueType::kArray, GgufValueType::kString},
    {"tokenizer.ggml.scores", GgufValueType::kArray, GgufValueType::kFloat32},
    {"tokenizer.ggml.token_type", GgufValueType::kArray, GgufValueType::kInt32},
    {"tokenizer.chat_template", GgufValueType::kString, GgufValueType::kString},
};

std::string DescribeType(const GgufValue& v) {
  if (const auto* a = std::get_if<GgufArray>(&v)) {
    return StrCat("array of ", GgufValueTypeName(a->element_type));
  }
  return std::string(GgufValueTypeName(TypeOf(v)));
}

absl::Status CheckSchema(std::string_view key, const GgufValue& v) {
  for (const auto& s : kSchema) {
    if (s.key != key) continue;
    bool ok = TypeOf(v) == s.type;
    if (ok && s.type == GgufValueType::kArray) {
      ok = std::get<GgufArray>(v).element_type == s.element_type;
    }
    if (!ok) {
      std::string want = s.type == GgufValueType::kArray
                             ? StrCat("array of ", GgufValueTypeName(s.element_type))
                             : std::string(GgufValueTypeName(s.type));
      return Malformed(StrCat("key '", key, "' must be ", want, ", found ", DescribeType(v)));
    }
  }
  return absl::OkStatus();
}

}  // namespace

std::string_view GgufValueTypeName(GgufValueType type) {
  switch (type) {
    case GgufValueType::kUint8:
      return "UINT8";
    case GgufValueType::kInt8:
      return "INT8";
    case GgufValueType::kUint16:
      return "UINT16";
    case GgufValueType::kInt16:
      return "INT16";
    case GgufValueType::kUint32:
      return "UINT32";
    case GgufValueType::kInt32:
      return "INT32";
    case GgufValueType::kFloat32:
      return "FLOAT32";
    case GgufValueType::kBool:
      return "BOOL";
    case GgufValueType::kString:
      return "STRING";
    case GgufValueType::kArray:
      return "ARRAY";
    case GgufValueType::kUint64:
      return "UINT64";
    case GgufValueType::kInt64:
      return "INT64";
    case GgufValueType::kFloat64:
      return "FLOAT64";
  }
  return "UNKNOWN";
}

absl::StatusOr<std::unique_ptr<GgufFile>> GgufFile::Open(const std::string& path,
                                                         FileResidence residence) {
  ASSIGN_OR_RETURN(auto mapping, MappedFile::Open(path, residence));
  std::unique_ptr<GgufFile> f(new GgufFile());
  f->path_ = path;
  f->bytes_ = mapping->bytes();
  f->mapping_ = std::move(mapping);
  absl::Status st = f->ParseAll();
  if (!st.ok()) return absl::Status(st.code(), StrCat(path, ": ", st.message()));
  return f;
}

absl::StatusOr<std::unique_ptr<GgufFile>> GgufFile::Parse(std::span<const uint8_t> bytes) {
  std::unique_ptr<GgufFile> f(new GgufFile());
  f->path_ = "<memory>";
  f->bytes_ = bytes;
  RETURN_IF_ERROR(f->ParseAll());
  return f;
}

absl::StatusOr<std::unique_ptr<GgufFile>> GgufFile::Assemble(
    std::string header, std::vector<std::span<const uint8_t>> data,
    std::shared_ptr<const void> keep_alive, std::string path) {
  std::unique_ptr<GgufFile> f(new GgufFile());
  f->path_ = std::move(path);
  f->header_ = std::move(header);
  f->bytes_ = {reinterpret_cast<const uint8_t*>(f->header_.data()), f->header_.size()};
  f->keep_alive_ = std::move(keep_alive);
  f->external_data_ = true;
  absl::Status st = f->ParseAll();
  if (!st.ok()) return absl::Status(st.code(), StrCat(f->path_, ": ", st.message()));
  if (data.size() != f->tensors_.size()) {
    return absl::InvalidArgumentError(StrCat(f->path_, ": ", data.size(), " tensor buffers for ",
                                             f->tensors_.size(), " tensors"));
  }
  for (size_t i = 0; i < data.size(); ++i) {
    if (data[i].size() != f->tensors_[i].n_bytes) {
      return absl::InvalidArgumentError(StrCat(f->path_, ": tensor '", f->tensors_[i].name,
                                               "' has ", data[i].size(), " bytes, its shape needs ",
                                               f->tensors_[i].n_bytes));
    }
    f->tensors_[i].data = data[i];
  }
  return f;
}

absl::Status GgufFile::ParseAll() {
  Cursor c(bytes_);
  ASSIGN_OR_RETURN(uint32_t magic, c.Read<uint32_t>("magic"));
  if (magic != kMagic) return Malformed("not a GGUF file (bad magic)");
  ASSIGN_OR_RETURN(version_, c.Read<uint32_t>("version"));
  if (version_ == 1) return Malformed("GGUF version 1 is not supported (only 2 and 3)");
  if (version_ != 2 && version_ != 3) {
    if (version_ == 0x02000000u || version_ == 0x03000000u) {
      return Malformed("big-endian GGUF files are not supported");
    }
    return Malformed(StrCat("unsupported GGUF version ", version_, " (only 2 and 3)"));
  }
  ASSIGN_OR_RETURN(uint64_t n_tensors, c.Read<uint64_t>("tensor count"));
  ASSIGN_OR_RETURN(uint64_t n_kv, c.Read<uint64_t>("metadata count"));

  // Smallest encodings: a key-value is 8 (key len) + 1 + 4 (type) + 1 (u8) bytes; a
  // tensor info is 8 (name len) + 4 + 8 (one dim) + 4 + 8 bytes.
  constexpr uint64_t kMinKv = 8 + 1 + 4 + 1;
  constexpr uint64_t kMinTensor = 8 + 4 + 8 + 4 + 8;
  if (n_kv > c.remaining() / kMinKv) {
    return Malformed(
        StrCat("metadata count ", n_kv, " cannot fit in a file of ", bytes_.size(), " bytes"));
  }
  if (n_tensors > c.remaining() / kMinTensor) {
    return Malformed(
        StrCat("tensor count ", n_tensors, " cannot fit in a file of ", bytes_.size(), " bytes"));
  }

  kv_.reserve(n_kv);
  for (uint64_t i = 0; i < n_kv; ++i) {
    std::string what = StrCat("metadata key #", i);
    ASSIGN_OR_RETURN(std::string_view key, c.ReadString(what));
    if (key.empty()) return Malformed(StrCat(what, " is empty"));
    if (key.size() > kMaxKeyLength) {
      return Malformed(StrCat(what, " is ", key.size(), " bytes (at most ", kMaxKeyLength, ")"));
    }
    what = StrCat("metadata key '", key, "'");
    ASSIGN_OR_RETURN(uint32_t type_raw, c.Read<uint32_t>(StrCat(what, " type")));
    if (!IsKnownValueType(type_raw)) {
      return Malformed(StrCat(what, " has unknown value type ", type_raw));
    }
    ASSIGN_OR_RETURN(GgufValue value, ReadValue(c, static_cast<GgufValueType>(type_raw), what));
    RETURN_IF_ERROR(CheckSchema(key, value));
    if (!kv_index_.emplace(key, kv_.size()).second) {
      return Malformed(StrCat("duplicate metadata key '", key, "'"));
    }
    kv_.push_back({key, std::move(value)});
  }

  if (const GgufValue* a = Find("general.alignment")) {
    uint32_t align = std::get<uint32_t>(*a);
    if (align == 0 || (align & (align - 1)) != 0) {
      return Malformed(StrCat("general.alignment ", align, " is not a power of two"));
    }
    alignment_ = align;
  }

  tensors_.reserve(n_tensors);
  for (uint64_t i = 0; i < n_tensors; ++i) {
    GgufTensorInfo t;
    std::string what = StrCat("tensor #", i);
    ASSIGN_OR_RETURN(t.name, c.ReadString(StrCat(what, " name")));
    if (t.name.empty() || t.name.size() >= kGgufMaxTensorName) {
      return Malformed(StrCat(what, " name has ", t.name.size(), " bytes (1..",
                              kGgufMaxTensorName - 1, " allowed)"));
    }
    what = StrCat("tensor '", t.name, "'");
    ASSIGN_OR_RETURN(uint32_t n_dims, c.Read<uint32_t>(StrCat(what, " n_dims")));
    if (n_dims < 1 || n_dims > kGgufMaxDims) {
      return Malformed(
          StrCat(what, " has ", n_dims, " dimensions (1..", kGgufMaxDims, " allowed)"));
    }
    t.n_dims = static_cast<int>(n_dims);
    int64_t n_elements = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      ASSIGN_OR_RETURN(uint64_t ne, c.Read<uint64_t>(StrCat(what, " dimension")));
      if (ne == 0 || ne > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return Malformed(
            StrCat(what, " dimension ", d, " is ", ne, " (must be positive and fit in int64)"));
      }
      t.ne[d] = static_cast<int64_t>(ne);
      if (__builtin_mul_overflow(n_elements, t.ne[d], &n_elements)) {
        return Malformed(StrCat(what, " element count overflows int64"));
      }
    }
    ASSIGN_OR_RETURN(uint32_t type_raw, c.Read<uint32_t>(StrCat(what, " type")));
    const GgmlTypeTraits* traits = FindGgmlType(type_raw);
    if (traits == nullptr) {
      return Malformed(StrCat(what, " has unknown ggml type ", type_raw));
    }
    t.type = traits->type;
    if (t.ne[0] % traits->block_size != 0) {
      return Malformed(StrCat(what, " row length ", t.ne[0], " is not a multiple of the ",
                              traits->name, " block size ", traits->block_size));
    }
    int64_t n_bytes = 0;
    if (__builtin_mul_overflow(n_elements / traits->block_size, traits->type_size, &n_bytes)) {
      return Malformed(StrCat(what, " byte size overflows int64"));
    }
    t.n_elements = static_cast<uint64_t>(n_elements);
    t.n_bytes = static_cast<uint64_t>(n_bytes);
    ASSIGN_OR_RETURN(t.offset, c.Read<uint64_t>(StrCat(what, " offset")));
    if (t.offset % alignment_ != 0) {
      return Malformed(
          StrCat(what, " offset ", t.offset, " is not a multiple of the alignment ", alignment_));
    }
    if (!tensor_index_.emplace(t.name, tensors_.size()).second) {
      return Malformed(StrCat("duplicate tensor name '", t.name, "'"));
    }
    tensors_.push_back(t);
  }

  // The data section starts at the next multiple of the alignment.
  uint64_t pad = (alignment_ - c.pos() % alignment_) % alignment_;
  data_offset_ = c.pos() + pad;
  if (tensors_.empty() || external_data_) return absl::OkStatus();
  if (data_offset_ > bytes_.size()) {
    return Malformed(StrCat("tensor data section starts at ", data_offset_,
                            " past the end of the file (", bytes_.size(), " bytes)"));
  }
  const uint64_t data_size = bytes_.size() - data_offset_;
  for (auto& t : tensors_) {
    if (t.offset > data_size || t.n_bytes > data_size - t.offset) {
      return Malformed(StrCat("tensor '", t.name, "' data [", t.offset, ", +", t.n_bytes,
                              ") lies outside the ", data_size, "-byte data section"));
    }
    t.data = bytes_.subspan(data_offset_ + t.offset, t.n_bytes);
  }
  std::vector<size_t> order(tensors_.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return tensors_[a].offset < tensors_[b].offset; });
  for (size_t i = 1; i < order.size(); ++i) {
    const auto& prev = tensors_[order[i - 1]];
    const auto& cur = tensors_[order[i]];
    if (prev.offset + prev.n_bytes > cur.offset) {
      return Malformed(
          StrCat("tensors '", prev.name, "' and '", cur.name, "' overlap in the data section"));
    }
  }
  return absl::OkStatus();
}

const GgufValue* GgufFile::Find(std::string_view key) const {
  auto it = kv_index_.find(key);
  return it == kv_index_.end() ? nullptr : &kv_[it->second].value;
}

const GgufTensorInfo* GgufFile::FindTensor(std::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

namespace {
absl::Status WrongType(std::string_view key, std::string_view want, const GgufValue& v) {
  return absl::InvalidArgumentError(
      StrCat("GGUF key '", key, "' must be ", want, ", found ", DescribeType(v)));
}
absl::Status Missing(std::string_view key) {
  return absl::NotFoundError(StrCat("GGUF key '", key, "' is missing"));
}
}  // namespace

absl::StatusOr<std::string_view> GgufFile::GetString(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return Missing(key);
  if (const auto* s = std::get_if<std::string_view>(v)) return *s;
  return WrongType(key, "STRING", *v);
}

absl::StatusOr<bool> GgufFile::GetBool(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return Missing(key);
  if (const auto* b = std::get_if<bool>(v)) return *b;
  return WrongType(key, "BOOL", *v);
}

absl::StatusOr<int64_t> GgufFile::GetInt(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return Missing(key);
  return std::visit(
      [&](const auto& x) -> absl::StatusOr<int64_t> {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
          if constexpr (std::is_same_v<T, uint64_t>) {
            if (x > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
              return absl::InvalidArgumentError(
                  StrCat("GGUF key '", key, "' value ", x, " does not fit in int64"));
            }
          }
          return static_cast<int64_t>(x);
        } else {
          return WrongType(key, "an integer", *v);
        }
      },
      *v);
}

absl::StatusOr<uint64_t> GgufFile::GetUint(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return Missing(key);
  if (const auto* u = std::get_if<uint64_t>(v)) return *u;
  ASSIGN_OR_RETURN(int64_t i, GetInt(key));
  if (i < 0) {
    return absl::InvalidArgumentError(
        StrCat("GGUF key '", key, "' value ", i, " must not be negative"));
  }
  return static_cast<uint64_t>(i);
}

absl::StatusOr<double> GgufFile::GetFloat(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return Missing(key);
  if (const auto* f = std::get_if<float>(v)) return *f;
  if (const auto* d = std::get_if<double>(v)) return *d;
  return WrongType(key, "FLOAT32 or FLOAT64", *v);
}

absl::StatusOr<const GgufArray*> GgufFile::GetArray(std::string_view key,
                                                    GgufValueType element_type) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return Missing(key);
  const auto* a = std::get_if<GgufArray>(v);
  if (a == nullptr || a->element_type != element_type) {
    return WrongType(key, StrCat("array of ", GgufValueTypeName(element_type)), *v);
  }
  return a;
}

}  // namespace tandem::model
