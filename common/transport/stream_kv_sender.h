// StreamKvSender: every KV transport's sending side. A transfer's descriptors travel
// as a gRPC client stream (kv_transfer.proto PushKvBlocks) to the decode worker's
// KvTransfer service; the payload rides in the chunks (host transport) or, on a peer
// transport (NCCL between GPUs, CUDA IPC on one GPU), on a PeerComm to the same worker,
// one payload per chunk in the order of the chunks (PeerPayload.seq).
//
// Connect handshakes once per decode worker: the layout fingerprints must match, the
// decode worker picks the transport from what we offer (transport_choice.h), and for a
// peer transport we create a communicator and hand its id over in a second handshake.
// A peer's communicator is built lazily by its thread and again after it breaks (a
// send past its deadline, an error) or when a reservation names a new epoch of the
// decode worker (it restarted): the old one is aborted, a transfer on a broken one
// fails, the next transfer rendezvouses anew (a higher generation).
//
// One sender thread per decode worker serializes that peer's transfers in the order
// layers were queued, so sending layer l overlaps the engine computing layer l+1, a
// slow peer stalls only its own transfers, and the payloads on a communicator go in
// descriptor order. Host: blocks read through KvStorage::ReadLayer after the layer's
// event (from a GPU: gathered on the device into staging, then one copy out), chunks of
// at most `chunk_bytes`. Peer: each layer's blocks (runs of
// consecutive ids merged) gathered on the device into a staging buffer
// (KvStorage::GatherLayer), one chunk and one Send per layer per request when they fit
// the smaller of the two sides' staging buffers; every Send must finish within
// `timeout`.
#ifndef TANDEM_COMMON_TRANSPORT_STREAM_KV_SENDER_H_
#define TANDEM_COMMON_TRANSPORT_STREAM_KV_SENDER_H_

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "common/transport/kv_sender.h"
#include "common/transport/peer_comm.h"
#include "common/transport/staging_pool.h"
#include "kernels/kv_storage.h"
#include "tandem/v1/kv_transfer.grpc.pb.h"

namespace tandem::transport {

struct StreamKvSenderOptions {
  std::string api_key;  // sent on every call to decode workers (their --api-key)
  KvDevice device = {};
  // Offered at the handshake, preferred first (transport_choice.h Offered).
  std::vector<TransportKind> offered = {TransportKind::kHost};
  // The communicators of the peer transports; null where unavailable.
  PeerCommFactory* nccl = nullptr;
  PeerCommFactory* cuda_ipc = nullptr;
  std::chrono::milliseconds timeout{10000};  // each Send on a peer transport
  int32_t staging_buffers = 2;               // peer transports: gathered payloads in flight
  int64_t staging_bytes = int64_t{16} << 20;
  int64_t chunk_bytes = int64_t{1} << 20;  // host transport: payload per chunk
};

class StreamKvSender : public KvSender {
 public:
  // `kv` is read (never written) by the sender threads; it must outlive the sender.
  // Allocates the staging buffers when a peer transport is offered (before serving).
  static absl::StatusOr<std::unique_ptr<StreamKvSender>> Create(const kernels::KvStorage* kv,
                                                                v1::KvLayoutFingerprint fingerprint,
                                                                StreamKvSenderOptions options);
  ~StreamKvSender() override;  // finishes queued work, then joins every peer's thread

  absl::Status Connect(const std::string& address) override;
  absl::StatusOr<std::unique_ptr<KvTransfer>> Begin(const KvDestination& dst,
                                                    std::vector<int32_t> src_blocks) override;
  KvSenderStats Stats() const override;
  // The transport the handshake chose for `address` (nullopt before Connect).
  std::optional<TransportKind> TransportOf(const std::string& address) const;

 private:
  class Transfer;
  struct Task {
    Transfer* transfer;
    int32_t layer;  // -1: finish
    int32_t first = 0;
    int32_t count = 0;
    std::shared_ptr<kernels::Event> ready;
  };
  // One decode worker: its stub, its transport, and the thread that writes to it.
  struct Peer {
    std::string address;
    std::shared_ptr<v1::KvTransfer::Stub> stub;
    TransportKind kind = TransportKind::kHost;
    PeerCommFactory* factory = nullptr;  // peer transports
    int64_t max_payload = 0;             // peer transports: bytes per chunk (Rendezvous)
    // The sender thread's: the communicator, its generation, next payload's seq, and
    // the receiver's epoch when it joined (a transfer naming another epoch is for a
    // restarted receiver, which knows no communicator of ours).
    std::unique_ptr<PeerComm> comm;
    std::unique_ptr<PeerComm> retired;  // broken, kept until the next rendezvous succeeds
    uint64_t generation = 0;            // of the last rendezvous attempt
    uint64_t seq = 0;
    uint64_t epoch = 0;
    bool built = false;  // a communicator was built before (the next one is a rebuild)
    std::mutex mu;
    std::condition_variable cv;
    std::deque<Task> tasks ABSL_GUARDED_BY(mu);
    bool stop ABSL_GUARDED_BY(mu) = false;
    std::thread thread;
  };
  StreamKvSender(const kernels::KvStorage* kv, v1::KvLayoutFingerprint fingerprint,
                 StreamKvSenderOptions options);
  static void Enqueue(Peer* peer, Task task);
  void Run(Peer* peer);
  void WriteLayer(Transfer* t, const Task& task);
  // Peer transports: one chunk and one Send per piece of the layer.
  void SendLayer(Transfer* t, const Task& task);
  // Our side of a KV handshake offering `kinds`.
  v1::HandshakeRequest Handshake(const std::vector<TransportKind>& kinds) const;
  // A new communicator with the peer (its thread); also learns its payload size and epoch.
  absl::Status Rendezvous(Peer* peer);
  void BreakComm(Peer* peer, const absl::Status& why);
  // A chunk of `count` blocks of `layer` from index `first`; the transfer's first chunk
  // also carries the header (lease, epoch, fingerprint, block ids).
  v1::KvBlocksChunk Chunk(const Transfer* t, int32_t layer, int32_t first, int32_t count) const;
  bool Write(Transfer* t, const v1::KvBlocksChunk& chunk);
  void Complete(Transfer* t);

  const kernels::KvStorage* kv_;
  const v1::KvLayoutFingerprint fingerprint_;
  const StreamKvSenderOptions options_;
  const uint64_t sender_id_;  // random per process: names our communicators
  std::unique_ptr<StagingPool> staging_;

  mutable std::mutex peers_mu_;
  absl::flat_hash_map<std::string, std::unique_ptr<Peer>> peers_ ABSL_GUARDED_BY(peers_mu_);
  std::atomic<int64_t> rebuilds_{0};
};

}  // namespace tandem::transport

#endif  // TANDEM_COMMON_TRANSPORT_STREAM_KV_SENDER_H_
