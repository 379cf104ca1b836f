// HugePageRegion: anonymous memory at a 2 MiB boundary, advised for transparent huge
// pages (MADV_HUGEPAGE), for large data streamed end to end — a model's weights
// (mapped_file.h), the bandwidth probe that measures their roof. Where the kernel grants
// the advice, such a stream misses the TLB once per 2 MiB instead of once per 4 KiB and
// the hardware prefetchers do not stop at every 4 KiB boundary.
//
// Owns the memory (released on destruction); movable, not copyable. Not thread-safe to
// change; the bytes may be read from any thread.
#ifndef TANDEM_COMMON_UTIL_HUGE_PAGES_H_
#define TANDEM_COMMON_UTIL_HUGE_PAGES_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/statusor.h"

namespace tandem {

class HugePageRegion {
 public:
  static constexpr size_t kHugePage = size_t{2} << 20;

  // `bytes` of zeroed, writable memory starting at a huge-page boundary (0: empty).
  // ResourceExhausted when the kernel refuses the mapping.
  static absl::StatusOr<HugePageRegion> Allocate(size_t bytes);

  HugePageRegion() = default;
  HugePageRegion(HugePageRegion&& other) noexcept;
  HugePageRegion& operator=(HugePageRegion&& other) noexcept;
  HugePageRegion(const HugePageRegion&) = delete;
  HugePageRegion& operator=(const HugePageRegion&) = delete;
  ~HugePageRegion();

  uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  // From now on the bytes can only be read (a write faults).
  absl::Status MakeReadOnly();

 private:
  void Release();
  void* mapping_ = nullptr;  // what munmap takes (null: nothing)
  size_t mapping_bytes_ = 0;
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

// Whether this kernel offers transparent huge pages to a region that asks
// (/sys/kernel/mm/transparent_hugepage/enabled is "always" or "madvise").
bool TransparentHugePagesOffered();
// MemAvailable from /proc/meminfo, in bytes; 0 when unknown.
int64_t AvailableMemoryBytes();

}  // namespace tandem

#endif  // TANDEM_COMMON_UTIL_HUGE_PAGES_H_
