// SafetensorsFile: a validated, read-only view of one `*.safetensors` file (the tensor
// format of Hugging Face model directories; sharded models are several of them).
//
// The file is untrusted input. Layout (little-endian):
//   u64 N | N bytes of JSON header | data section (the rest of the file)
// The header is one object: each key a tensor name whose value is exactly
//   {"dtype": "BF16", "shape": [d0, d1, ...], "data_offsets": [begin, end]}
// (offsets relative to the data section), plus an optional "__metadata__" object of
// string values. Open()/Parse() accept a file only if: N ≤ 100 MB and the header fits
// in the file; the header is that object and nothing else (no duplicate names, no other
// fields, no negative or fractional numbers, nesting no deeper than the format's);
// every dtype is known; no shape has more than kMaxRank dimensions; each tensor's byte
// count — its shape's product times the dtype's size, computed without overflow — is
// end − begin; and the tensors, ordered by offset, tile the data section exactly: the
// first begins at 0, each begins where the previous ends, the last ends at the end of the
// file. Messages quote at most 200 bytes of a name. Every failure is an
// absl::Status naming the file's field (never an abort); the header is read by a
// streaming parser, so a hostile header cannot make the reader build a large document.
//
// Ownership as GgufFile: Open() owns its memory map, Parse() borrows the caller's
// bytes. Tensor data are views into them. Immutable, so any thread may read it.
#ifndef TANDEM_COMMON_MODEL_SAFETENSORS_FILE_H_
#define TANDEM_COMMON_MODEL_SAFETENSORS_FILE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "common/model/ggml_type.h"
#include "common/util/mapped_file.h"

namespace tandem::model {

// The element types the format defines.
enum class SafetensorsDtype {
  kBool,
  kU8,
  kI8,
  kF8E4M3,
  kF8E5M2,
  kI16,
  kU16,
  kF16,
  kBF16,
  kI32,
  kU32,
  kF32,
  kI64,
  kU64,
  kF64,
};

std::string_view SafetensorsDtypeName(SafetensorsDtype dtype);
int64_t SafetensorsDtypeSize(SafetensorsDtype dtype);  // bytes per element
// The GGUF type with the same element encoding (F32, F16, BF16), or nullopt.
std::optional<GgmlType> GgmlTypeOf(SafetensorsDtype dtype);

struct SafetensorsTensor {
  std::string name;
  SafetensorsDtype dtype;
  std::vector<int64_t> shape;     // outermost first, as in PyTorch
  std::span<const uint8_t> data;  // row-major, little-endian
  int64_t n_elements() const;
};

class SafetensorsFile {
 public:
  static constexpr uint64_t kMaxHeaderBytes = 100'000'000;
  // Dimensions a shape may have (models use at most 5; the bound keeps a hostile header
  // from holding 50 million of them).
  static constexpr size_t kMaxRank = 16;

  static absl::StatusOr<std::unique_ptr<SafetensorsFile>> Open(const std::string& path);
  // `bytes` must outlive the result.
  static absl::StatusOr<std::unique_ptr<SafetensorsFile>> Parse(std::span<const uint8_t> bytes);

  // In the order of their offsets.
  const std::vector<SafetensorsTensor>& tensors() const { return tensors_; }
  const SafetensorsTensor* Find(std::string_view name) const;
  // "__metadata__", in the header's order.
  const std::vector<std::pair<std::string, std::string>>& metadata() const { return metadata_; }

 private:
  SafetensorsFile() = default;
  absl::Status ParseAll(std::span<const uint8_t> bytes);

  std::unique_ptr<MappedFile> mapping_;
  std::vector<SafetensorsTensor> tensors_;
  absl::flat_hash_map<std::string, size_t> by_name_;
  std::vector<std::pair<std::string, std::string>> metadata_;
};

}  // namespace tandem::model

#endif  // TANDEM_COMMON_MODEL_SAFETENSORS_FILE_H_
