// A build without CUDA: no peer communicators.
#include "common/transport/gpu_transports.h"

namespace tandem::transport {

namespace {
absl::Status NotBuilt() {
  return absl::UnimplementedError("KV transports: this build has no CUDA (NCCL, CUDA IPC)");
}
}  // namespace

bool PeerTransportsBuilt() { return false; }
absl::StatusOr<std::string> GpuUuid(int) { return NotBuilt(); }
absl::StatusOr<std::unique_ptr<PeerCommFactory>> MakeNcclFactory(int) { return NotBuilt(); }
absl::StatusOr<std::unique_ptr<PeerCommFactory>> MakeCudaIpcFactory(int, int64_t) {
  return NotBuilt();
}
absl::Status NcclSelfTransfer(int, const void*, void*, int64_t) { return NotBuilt(); }

}  // namespace tandem::transport
