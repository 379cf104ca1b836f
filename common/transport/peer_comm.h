// PeerComm: ordered, unframed moves of device bytes between this process and one peer —
// the shape of ncclSend/ncclRecv on a 2-rank NCCL communicator. Under the peer KV
// transport (stream_kv_sender.h sends, decode_worker/peer_kv_receiver.h receives);
// implementations: NCCL and a ring in device memory shared over CUDA IPC for two
// processes on one GPU (gpu_transports.h), and an in-process fake for tests
// (fake_peer_comm.h).
//
// Contract:
//   - the k-th Send pairs with the peer's k-th Recv and both name the same byte count:
//     nothing on the wire says where a payload ends or what it is (the KV transport's
//     descriptors, on its gRPC stream, do);
//   - Send returns once `src` may be reused, Recv once `dst` holds the bytes; both wait
//     at most until `deadline`, then fail with DeadlineExceeded;
//   - any failure breaks the communicator: it aborts itself, and every later call fails
//     at once with the first error. Build another through the handshake.
//
// Threads: one thread issues Send and Recv (their order is the pairing); Abort from any.
#ifndef TANDEM_COMMON_TRANSPORT_PEER_COMM_H_
#define TANDEM_COMMON_TRANSPORT_PEER_COMM_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/util/strings.h"
#include "kernels/tensor.h"

namespace tandem::transport {

using PeerDeadline = std::chrono::steady_clock::time_point;

class PeerComm {
 public:
  virtual ~PeerComm() = default;
  // `bytes` bytes at `offset` of a buffer of this process's KV backend.
  virtual absl::Status Send(const kernels::Buffer& src, int64_t offset, int64_t bytes,
                            PeerDeadline deadline) = 0;
  virtual absl::Status Recv(const kernels::Buffer& dst, int64_t offset, int64_t bytes,
                            PeerDeadline deadline) = 0;
  // Breaks the communicator (a pending Send or Recv returns `why` soon after).
  virtual void Abort(const absl::Status& why) = 0;
};

// OutOfRange unless [offset, offset + bytes) is a non-empty range inside `b`: what every
// Send and Recv checks first.
inline absl::Status CheckPeerRange(const kernels::Buffer& b, int64_t offset, int64_t bytes) {
  if (offset < 0 || bytes <= 0 || offset > b.bytes() - bytes) {
    return absl::OutOfRangeError(
        StrCat("peer comm: ", bytes, " bytes at ", offset, " outside a buffer of ", b.bytes()));
  }
  return absl::OkStatus();
}

// Makes communicators: the sending side creates one (rank 0) and hands its id to the
// receiving side through the KV handshake, which joins it (rank 1). Neither call waits
// for the other side: the first Send or Recv does, until its deadline.
class PeerCommFactory {
 public:
  virtual ~PeerCommFactory() = default;
  // "nccl", "cuda-ipc", "fake".
  virtual std::string_view name() const = 0;
  struct Created {
    std::string id;  // opaque bytes for Join
    std::unique_ptr<PeerComm> comm;
  };
  virtual absl::StatusOr<Created> Create() = 0;
  // InvalidArgument for an id this factory cannot have made.
  virtual absl::StatusOr<std::unique_ptr<PeerComm>> Join(std::string_view id) = 0;
};

}  // namespace tandem::transport

#endif  // TANDEM_COMMON_TRANSPORT_PEER_COMM_H_
