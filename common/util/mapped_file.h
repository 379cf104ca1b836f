// MappedFile: a whole file's bytes, read-only — a memory map of the file, or a copy in
// anonymous memory advised for transparent huge pages.
//
// Decode reads every weight once per token. Through the page cache's 4 KiB pages that
// stream misses the TLB every 4 KiB, and the hardware prefetchers stop at each page
// boundary; in 2 MiB pages it does neither (measured on a 1.2 B Q4_K_M file: decode
// 25 → 34 tokens/s, docs/performance.md). Read-only file mappings get no huge pages
// from most kernels and file systems, so a process that runs a model's weights copies
// them (FileResidence::kAuto, what LoadModel asks for): when the file is at least
// kHugePageMinBytes, the kernel offers transparent huge pages, and the file takes at
// most a quarter of the memory the kernel reports available. Otherwise, and for every
// caller that only reads headers or parses untrusted files, the file is mapped.
//
// Owns the memory; it is released on destruction. The bytes are immutable (the copy is
// made read-only once filled) and may be read from any thread. An empty file has an
// empty span.
#ifndef TANDEM_COMMON_UTIL_MAPPED_FILE_H_
#define TANDEM_COMMON_UTIL_MAPPED_FILE_H_

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "absl/status/statusor.h"
#include "common/util/huge_pages.h"

namespace tandem {

enum class FileResidence {
  kMapped,     // mmap of the file (the page cache's pages, shared between processes)
  kHugePages,  // a private copy in memory advised for transparent huge pages
  kAuto,       // kHugePages where it pays and fits (above), else kMapped
};

class MappedFile {
 public:
  static constexpr int64_t kHugePageMinBytes = int64_t{64} << 20;

  // Maps or copies `path`. NotFound / PermissionDenied / Internal on failure.
  static absl::StatusOr<std::unique_ptr<MappedFile>> Open(
      const std::string& path, FileResidence residence = FileResidence::kMapped);

  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  std::span<const uint8_t> bytes() const { return {data_, size_}; }
  const std::string& path() const { return path_; }
  // Whether the bytes are a copy in huge-page memory (kHugePages, or kAuto resolved so);
  // whether the kernel backed it with huge pages is its own choice.
  bool huge_pages() const { return copy_.data() != nullptr; }

 private:
  MappedFile(std::string path, const uint8_t* data, size_t size, HugePageRegion copy)
      : path_(std::move(path)), data_(data), size_(size), copy_(std::move(copy)) {}

  std::string path_;
  const uint8_t* data_;  // the mapping (munmapped on destruction), or copy_'s bytes
  size_t size_;
  HugePageRegion copy_;
};

}  // namespace tandem

#endif  // TANDEM_COMMON_UTIL_MAPPED_FILE_H_
