#include "common/util/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/status/status.h"
#include "common/util/status_macros.h"
#include "common/util/strings.h"

namespace tandem {

namespace {

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
    return std::unique_ptr<MappedFile>(new MappedFile(path, nullptr, 0, HugePageRegion()));
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
        new MappedFile(path, static_cast<const uint8_t*>(p), size, HugePageRegion()));
  }
  ASSIGN_OR_RETURN(HugePageRegion copy, HugePageRegion::Allocate(size));
  for (size_t done = 0; done < size;) {
    const ssize_t n = ::pread(fd.fd, copy.data() + done, size - done, static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      return ErrnoStatus(n < 0 ? errno : EIO, StrCat("reading ", path, " at byte ", done));
    done += static_cast<size_t>(n);
  }
  RETURN_IF_ERROR(copy.MakeReadOnly());
  const uint8_t* data = copy.data();
  return std::unique_ptr<MappedFile>(new MappedFile(path, data, size, std::move(copy)));
}

MappedFile::~MappedFile() {
  if (data_ != nullptr && copy_.data() == nullptr) ::munmap(const_cast<uint8_t*>(data_), size_);
}

}  // namespace tandem
