#include "common/util/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/status/status.h"
#include "common/util/strings.h"

namespace tandem {

namespace {

constexpr size_t kHugePage = size_t{2} << 20;

absl::Status ErrnoStatus(int err, const std::string& what) {
  std::string msg = StrCat(what, ": ", std::strerror(err));
  switch (err) {
    case ENOENT:
      return absl::NotFoundError(msg);
    case EACCES:
    case EPERM:
      return absl::PermissionDeniedError(msg);
    default:
      return absl::InternalError(msg);
  }
}

// Closes a descriptor on every path out.
struct Fd {
  int fd;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

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

absl::StatusOr<std::unique_ptr<MappedFile>> MappedFile::Open(const std::string& path,
                                                             FileResidence residence) {
  Fd fd{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (fd.fd < 0) return ErrnoStatus(errno, StrCat("open ", path));
  struct stat st;
  if (::fstat(fd.fd, &st) != 0) return ErrnoStatus(errno, StrCat("stat ", path));
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(StrCat(path, " is not a regular file"));
  }
  const size_t size = static_cast<size_t>(st.st_size);
  if (size == 0) {
    return std::unique_ptr<MappedFile>(new MappedFile(path, nullptr, 0, nullptr, 0, false));
  }
  if (residence == FileResidence::kAuto) {
    const int64_t bytes = static_cast<int64_t>(size);
    residence = bytes >= kHugePageMinBytes && TransparentHugePagesOffered() &&
                        bytes <= AvailableMemoryBytes() / 4
                    ? FileResidence::kHugePages
                    : FileResidence::kMapped;
  }
  if (residence == FileResidence::kMapped) {
    void* p = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd.fd, 0);
    if (p == MAP_FAILED) return ErrnoStatus(errno, StrCat("mmap ", path));
    return std::unique_ptr<MappedFile>(
        new MappedFile(path, static_cast<const uint8_t*>(p), size, p, size, false));
  }
  // A region one huge page longer than the file, its start rounded up to a huge page.
  const size_t region_bytes = (size + kHugePage - 1) / kHugePage * kHugePage + kHugePage;
  void* region =
      ::mmap(nullptr, region_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (region == MAP_FAILED) return ErrnoStatus(errno, StrCat("allocating a copy of ", path));
  auto release = [&] { ::munmap(region, region_bytes); };
  uint8_t* data = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(region) + kHugePage - 1) /
                                             kHugePage * kHugePage);
  const size_t data_bytes = (size + kHugePage - 1) / kHugePage * kHugePage;
  ::madvise(data, data_bytes, MADV_HUGEPAGE);  // advice: a kernel may decline it
  for (size_t done = 0; done < size;) {
    const ssize_t n = ::pread(fd.fd, data + done, size - done, static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = n < 0 ? errno : EIO;
      release();
      return ErrnoStatus(err, StrCat("reading ", path, " at byte ", done));
    }
    done += static_cast<size_t>(n);
  }
  if (::mprotect(data, data_bytes, PROT_READ) != 0) {
    const int err = errno;
    release();
    return ErrnoStatus(err, StrCat("mprotect of the copy of ", path));
  }
  return std::unique_ptr<MappedFile>(new MappedFile(path, data, size, region, region_bytes, true));
}

MappedFile::~MappedFile() {
  if (region_ != nullptr) ::munmap(region_, region_bytes_);
}

}  // namespace tandem
