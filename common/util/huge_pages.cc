#include "common/util/huge_pages.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>

#include "common/util/strings.h"

namespace tandem {

namespace {
size_t RoundUp(size_t n) {
  return (n + HugePageRegion::kHugePage - 1) / HugePageRegion::kHugePage *
         HugePageRegion::kHugePage;
}
}  // namespace

absl::StatusOr<HugePageRegion> HugePageRegion::Allocate(size_t bytes) {
  HugePageRegion r;
  if (bytes == 0) return r;
  // One huge page longer than needed, its start rounded up to a huge page.
  r.mapping_bytes_ = RoundUp(bytes) + kHugePage;
  void* p =
      ::mmap(nullptr, r.mapping_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    return absl::ResourceExhaustedError(
        StrCat("mapping ", bytes, " bytes of memory: ", std::strerror(errno)));
  }
  r.mapping_ = p;
  r.data_ = reinterpret_cast<uint8_t*>(RoundUp(reinterpret_cast<uintptr_t>(p)));
  r.size_ = bytes;
  ::madvise(r.data_, RoundUp(bytes), MADV_HUGEPAGE);  // advice: a kernel may decline it
  return r;
}

absl::Status HugePageRegion::MakeReadOnly() {
  if (data_ == nullptr) return absl::OkStatus();
  if (::mprotect(data_, RoundUp(size_), PROT_READ) != 0) {
    return absl::InternalError(StrCat("mprotect: ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

HugePageRegion::HugePageRegion(HugePageRegion&& other) noexcept { *this = std::move(other); }

HugePageRegion& HugePageRegion::operator=(HugePageRegion&& other) noexcept {
  if (this != &other) {
    Release();
    mapping_ = std::exchange(other.mapping_, nullptr);
    mapping_bytes_ = std::exchange(other.mapping_bytes_, 0);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

HugePageRegion::~HugePageRegion() { Release(); }

void HugePageRegion::Release() {
  if (mapping_ != nullptr) ::munmap(mapping_, mapping_bytes_);
  mapping_ = nullptr;
}

bool TransparentHugePagesOffered() {
  std::ifstream in("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string line;
  if (!std::getline(in, line)) return false;
  return line.find("[always]") != std::string::npos || line.find("[madvise]") != std::string::npos;
}

int64_t AvailableMemoryBytes() {
  std::ifstream in("/proc/meminfo");
  for (std::string line; std::getline(in, line);) {
    if (!line.starts_with("MemAvailable:")) continue;
    std::istringstream fields(line.substr(13));
    int64_t kib = 0;
    fields >> kib;
    return kib * 1024;
  }
  return 0;
}

}  // namespace tandem
