// MappedFile: a read-only memory map of a whole file.
//
// Owns the mapping; it is unmapped on destruction. The bytes are immutable and may
// be read from any thread. An empty file maps to an empty span.
#ifndef TANDEM_COMMON_UTIL_MAPPED_FILE_H_
#define TANDEM_COMMON_UTIL_MAPPED_FILE_H_

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "absl/status/statusor.h"

namespace tandem {

class MappedFile {
 public:
  // Maps `path` read-only. NotFound / PermissionDenied / Internal on failure.
  static absl::StatusOr<std::unique_ptr<MappedFile>> Open(const std::string& path);

  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  std::span<const uint8_t> bytes() const { return {data_, size_}; }
  const std::string& path() const { return path_; }

 private:
  MappedFile(std::string path, const uint8_t* data, size_t size)
      : path_(std::move(path)), data_(data), size_(size) {}

  std::string path_;
  const uint8_t* data_;
  size_t size_;
};

}  // namespace tandem

#endif  // TANDEM_COMMON_UTIL_MAPPED_FILE_H_
