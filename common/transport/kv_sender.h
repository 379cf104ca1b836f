// KvSender: moves one request's KV blocks from this (prefill) worker's cache into
// blocks a decode worker reserved, layer by layer.
//
// A transfer is opened before the forward pass, fed layer numbers as the pass
// enqueues each layer, with the backend event that completes when that layer's K/V
// are in the storage (SendLayer never blocks the engine thread), and closed with
// Finish, which reports once the receiver has acknowledged every block — or why it
// did not. A failed transfer fails its request: there is no "successful" stream built
// on missing KV. One implementation, stream_kv_sender.h: the host transport (the
// payload in the gRPC stream) and the peer ones, NCCL and CUDA IPC (the payload on a
// PeerComm), which fall back to the host one unless the handshake pairs two workers
// over them.
//
// Thread-safe: Begin from any thread; one transfer's calls from one thread.
#ifndef TANDEM_COMMON_TRANSPORT_KV_SENDER_H_
#define TANDEM_COMMON_TRANSPORT_KV_SENDER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/transport/transport_choice.h"
#include "kernels/backend.h"

namespace tandem::transport {

// Where the blocks go.
struct KvDestination {
  std::string address;             // the decode worker, host:port
  uint64_t lease_id = 0;           // its reservation
  std::vector<int32_t> block_ids;  // reserved ids, in sequence order
  int32_t cached_blocks = 0;       // leading blocks the receiver already holds: not sent
  uint64_t epoch = 0;              // the receiver's incarnation (ReserveResponse.epoch)
};

struct KvTransferStats {
  int64_t bytes = 0;
  // Finish called (the forward pass is over) → acknowledgement: the part of the
  // transfer that compute did not hide.
  double ms = 0;
  TransportKind transport = TransportKind::kHost;
};

struct KvSenderStats {
  int64_t comm_rebuilds = 0;  // peer communicators built again after one broke
};

class KvTransfer {
 public:
  virtual ~KvTransfer() = default;
  // Queues layer `layer` of blocks [first, first + count) (indices into the transfer's
  // block lists) for sending once `ready` completes (a failed event fails the
  // transfer); the blocks must stay put until Finish's callback has run. Each (layer,
  // block) must be sent exactly once.
  virtual void SendLayer(int32_t layer, int32_t first, int32_t count,
                         std::shared_ptr<kernels::Event> ready) = 0;
  // After the last SendLayer: `done` runs (on a transport thread) with the outcome.
  virtual void Finish(std::function<void(absl::Status, KvTransferStats)> done) = 0;
  // Whether the transfer has failed already (Finish will say why), so that a prompt
  // computed in chunks stops at the next one instead of running to its end. Once true,
  // the transfer reads no more of its blocks. Callable from any thread.
  virtual bool Failed() const { return false; }
};

class KvSender {
 public:
  virtual ~KvSender() = default;
  // Checks that the peer at `address` shares our KV layout (cached per address);
  // FailedPrecondition on a mismatch, Unavailable when it cannot be reached.
  virtual absl::Status Connect(const std::string& address) = 0;
  // A transfer of our blocks `src_blocks` (sequence order) into `dst`. `src_blocks`
  // and dst.block_ids have the same length.
  virtual absl::StatusOr<std::unique_ptr<KvTransfer>> Begin(const KvDestination& dst,
                                                            std::vector<int32_t> src_blocks) = 0;
  virtual KvSenderStats Stats() const { return {}; }
};

}  // namespace tandem::transport

#endif  // TANDEM_COMMON_TRANSPORT_KV_SENDER_H_
