// HostKvSender: the host transport — KV blocks as a gRPC client stream
// (kv_transfer.proto PushKvBlocks) to the decode worker's KvTransfer service.
//
// One sender thread serializes every transfer's writes in the order layers were
// queued, so sending layer l overlaps the engine computing layer l+1. Chunks carry at
// most `chunk_bytes` of payload each.
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
#include "common/kv/kv_cache.h"
#include "common/transport/kv_sender.h"
#include "tandem/v1/kv_transfer.grpc.pb.h"

namespace tandem::transport {

class HostKvSender : public KvSender {
 public:
  // `cache` is read (never written) by the sender thread; it must outlive the sender.
  // `api_key`: sent on every call to decode workers (their --api-key).
  HostKvSender(const kv::KvCache* cache, v1::KvLayoutFingerprint fingerprint,
               std::string api_key = {}, int64_t chunk_bytes = int64_t{1} << 20);
  ~HostKvSender() override;

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
  };
  void Enqueue(Task task);
  void Run();
  void WriteLayer(Transfer* t, int32_t layer, int32_t first, int32_t count);
  void Complete(Transfer* t);

  const kv::KvCache* cache_;
  const v1::KvLayoutFingerprint fingerprint_;
  const std::string api_key_;
  const int64_t chunk_bytes_;

  std::mutex peers_mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<v1::KvTransfer::Stub>> peers_
      ABSL_GUARDED_BY(peers_mu_);

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Task> tasks_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace tandem::transport

#endif  // TANDEM_COMMON_TRANSPORT_HOST_KV_SENDER_H_
