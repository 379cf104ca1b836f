// GgufFile: a validated, read-only view of a GGUF (v2 or v3) model file.
//
// The file is untrusted input. Open()/Parse() check every count, length, type id,
// shape, offset and alignment against the bytes actually present *before* they
// allocate anything, so a hostile header cannot make the reader allocate more than
// a small multiple of the file size; every failure is an absl::Status naming the
// field (never an abort).
//
// Ownership: a GgufFile owns its memory map (Open) or borrows the caller's buffer
// (Parse; the buffer must outlive the object). String values, string arrays and
// tensor data are views into those bytes. Immutable after construction, so any
// number of threads may read it.
//
// Layout of the format (all little-endian):
//   "GGUF" u32 version u64 n_tensors u64 n_kv
//   n_kv × { string key, u32 type, value }          string = u64 len + bytes
//   n_tensors × { string name, u32 n_dims, u64 ne[n_dims], u32 ggml_type, u64 offset }
//   padding to `general.alignment` (default 32), then the tensor data section;
//   each tensor's offset is relative to the data section and aligned.
#ifndef TANDEM_COMMON_MODEL_GGUF_FILE_H_
#define TANDEM_COMMON_MODEL_GGUF_FILE_H_

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "common/model/ggml_type.h"
#include "common/util/mapped_file.h"
#include "common/util/strings.h"

namespace tandem::model {

// Metadata value type ids as stored in the file; never renumber.
enum class GgufValueType : uint32_t {
  kUint8 = 0,
  kInt8 = 1,
  kUint16 = 2,
  kInt16 = 3,
  kUint32 = 4,
  kInt32 = 5,
  kFloat32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kUint64 = 10,
  kInt64 = 11,
  kFloat64 = 12,
};

std::string_view GgufValueTypeName(GgufValueType type);

// An array value. Numeric and bool elements stay in the file (`raw`, little-endian,
// count × element size bytes); string elements are indexed in `strings`.
struct GgufArray {
  GgufValueType element_type;
  uint64_t count = 0;
  std::span<const uint8_t> raw;           // numeric/bool element bytes
  std::vector<std::string_view> strings;  // string elements, size() == count
};

// The alternative index of a GgufValue equals its GgufValueType id.
using GgufValue = std::variant<uint8_t, int8_t, uint16_t, int16_t, uint32_t, int32_t, float, bool,
                               std::string_view, GgufArray, uint64_t, int64_t, double>;

inline GgufValueType TypeOf(const GgufValue& v) { return static_cast<GgufValueType>(v.index()); }

struct GgufKeyValue {
  std::string_view key;
  GgufValue value;
};

inline constexpr int kGgufMaxDims = 4;
inline constexpr size_t kGgufMaxTensorName = 64;  // bytes, as in ggml (GGML_MAX_NAME)
inline constexpr uint32_t kGgufDefaultAlignment = 32;

struct GgufTensorInfo {
  std::string_view name;
  GgmlType type;
  int n_dims = 0;
  std::array<int64_t, kGgufMaxDims> ne{1, 1, 1, 1};  // ne[0] varies fastest (a row)
  uint64_t offset = 0;                               // relative to the data section
  uint64_t n_elements = 0;
  uint64_t n_bytes = 0;
  std::span<const uint8_t> data;  // n_bytes bytes inside the file
};

class GgufFile {
 public:
  // Maps (or copies: mapped_file.h) and validates the file at `path`.
  static absl::StatusOr<std::unique_ptr<GgufFile>> Open(
      const std::string& path, FileResidence residence = FileResidence::kMapped);
  // Views point into its own members: held by unique_ptr, never copied or moved.
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;
  // Validates `bytes` in place; they must outlive the returned object.
  static absl::StatusOr<std::unique_ptr<GgufFile>> Parse(std::span<const uint8_t> bytes);
  // A file assembled in memory (a Hugging Face directory read as the GGUF llama.cpp's
  // converter would write): `header` is a GGUF header — metadata and tensor infos,
  // validated as a file's are, offsets unused — and tensor i's bytes are `data[i]`
  // (exactly its n_bytes), which `keep_alive` owns. `path` names the source.
  static absl::StatusOr<std::unique_ptr<GgufFile>> Assemble(
      std::string header, std::vector<std::span<const uint8_t>> data,
      std::shared_ptr<const void> keep_alive, std::string path);

  uint32_t version() const { return version_; }
  uint32_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }
  uint64_t file_size() const { return bytes_.size(); }
  std::span<const uint8_t> bytes() const { return bytes_; }  // the whole file
  const std::string& path() const { return path_; }
  // Assembled in memory (Assemble): bytes() is then the header only.
  bool assembled() const { return external_data_; }
  // The bytes are a copy in huge-page memory (FileResidence::kHugePages).
  bool huge_pages() const { return mapping_ != nullptr && mapping_->huge_pages(); }

  const std::vector<GgufKeyValue>& metadata() const { return kv_; }
  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }

  // nullptr when absent.
  const GgufValue* Find(std::string_view key) const;
  const GgufTensorInfo* FindTensor(std::string_view name) const;

  // Typed accessors: NotFound when the key is absent, InvalidArgument (naming the key
  // and both types) when it holds another type.
  absl::StatusOr<std::string_view> GetString(std::string_view key) const;
  absl::StatusOr<bool> GetBool(std::string_view key) const;
  // Any integer type whose value fits in the result.
  absl::StatusOr<uint64_t> GetUint(std::string_view key) const;
  absl::StatusOr<int64_t> GetInt(std::string_view key) const;
  // FLOAT32 or FLOAT64.
  absl::StatusOr<double> GetFloat(std::string_view key) const;
  // An array whose elements have type `element_type`.
  absl::StatusOr<const GgufArray*> GetArray(std::string_view key, GgufValueType element_type) const;

 private:
  GgufFile() = default;
  absl::Status ParseAll();

  std::string path_;
  std::unique_ptr<MappedFile> mapping_;     // null when parsing a borrowed buffer
  std::string header_;                      // Assemble: the header bytes_ views
  std::shared_ptr<const void> keep_alive_;  // Assemble: owner of the tensor data
  bool external_data_ = false;              // Assemble: no data section in bytes_
  std::span<const uint8_t> bytes_;
  uint32_t version_ = 0;
  uint32_t alignment_ = kGgufDefaultAlignment;
  uint64_t data_offset_ = 0;
  std::vector<GgufKeyValue> kv_;
  std::vector<GgufTensorInfo> tensors_;
  absl::flat_hash_map<std::string_view, size_t, StringViewHash, StringViewEq> kv_index_;
  absl::flat_hash_map<std::string_view, size_t, StringViewHash, StringViewEq> tensor_index_;
};

// Reads element `i` of a numeric array as T (caller has checked element_type).
template <typename T>
T ArrayElement(const GgufArray& a, uint64_t i) {
  T v;
  __builtin_memcpy(&v, a.raw.data() + i * sizeof(T), sizeof(T));
  return v;
}

}  // namespace tandem::model

#endif  // TANDEM_COMMON_MODEL_GGUF_FILE_H_
