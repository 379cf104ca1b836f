// HostKvSender: the host transport — KV blocks as a gRPC client stream
// (kv_transfer.proto PushKvBlocks) to the decode worker's KvTransfer service.
//
// One sender thread per decode worker (created by Connect) serializes that peer's
// transfers in the order layers were queued, so sending layer l overlaps the engine
// computing layer l+1, and a slow peer stalls only its own transfers. Blocks are read
// through kernels::KvStorage::ReadLayer after the layer's event. Chunks carry at most
// `chunk_bytes` of payload each.
#ifndef TANDEM_COMMON_TRANSPORT_HOST_KV_SENDER_H_
#define TANDEM_COMMON_TRANSPORT_HOST_KV_SENDER_H_

#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "common/transport/kv_sender.h"
#include "kernels/kv_storage.h"
#include "tandem/v1/kv_transfer.grpc.pb.h"

namespace tandem::transport {

class HostKvSender : public KvSender {
 public:
  // `kv` is read (never written) by the sender threads; it must outlive the sender.
  // `api_key`: sent on every call to decode workers (their --api-key).
  HostKvSender(const kernels::KvStorage* kv, v1::KvLayoutFingerprint fingerprint,
               std::string api_key = {}, int64_t chunk_bytes = int64_t{1} << 20);
  ~HostKvSender() override;  // finishes queued work, then joins every peer's thread

  absl::Status Connect(const std::string& address) override;
  absl::StatusOr<std::unique_ptr<KvTransfer>> Begin(const KvDestination& dst,
                                                    std::vector<int32_t> src_blocks) override;

 private:
  class Transfer;
  struct Task {
    Transfer* transfer;
    int32_t layer;  // -1: finish
    int32_t first = 0;
    int32_t count = 0;
    std::shared_ptr<kernels::Event> ready;
  };
  // One decode worker: its stub and the thread that writes to it.
  struct Peer {
    std::shared_ptr<v1::KvTransfer::Stub> stub;
    std::mutex mu;
    std::condition_variable cv;
    std::deque<Task> tasks ABSL_GUARDED_BY(mu);
    bool stop ABSL_GUARDED_BY(mu) = false;
    std::thread thread;
  };
  static void Enqueue(Peer* peer, Task task);
  void Run(Peer* peer);
  void WriteLayer(Transfer* t, const Task& task);
  void Complete(Transfer* t);

  const kernels::KvStorage* kv_;
  const v1::KvLayoutFingerprint fingerprint_;
  const std::string api_key_;
  const int64_t chunk_bytes_;

  std::mutex peers_mu_;
  absl::flat_hash_map<std::string, std::unique_ptr<Peer>> peers_ ABSL_GUARDED_BY(peers_mu_);
};

}  // namespace tandem::transport

#endif  // TANDEM_COMMON_TRANSPORT_HOST_KV_SENDER_H_
