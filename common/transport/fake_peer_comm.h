// FakePeerNetwork: PeerComm pairs inside one process, for tests of the peer KV
// transport without a GPU. It behaves as NCCL does where the transport depends on it —
// the k-th Send pairs with the k-th Recv, a Send waits for its Recv (and a Recv for its
// Send) until the deadline, a deadline or an Abort breaks only the end that hits it
// (the other learns at its own deadline) — and checks what NCCL cannot: a Recv whose
// byte count differs from its Send's breaks both ends with Internal (NCCL would hang
// or corrupt). Payloads are memcpy'd between host-addressable buffers
// (the CPU backend's).
//
// Test controls: Stall() makes every later Send of every pair vanish (neither side
// ever sees it: a wedged link); Pairings() lists each completed Send/Recv pair's byte
// count in order, per communicator.
//
// Thread-safe.
#ifndef TANDEM_COMMON_TRANSPORT_FAKE_PEER_COMM_H_
#define TANDEM_COMMON_TRANSPORT_FAKE_PEER_COMM_H_

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "common/transport/peer_comm.h"

namespace tandem::transport {

class FakePeerNetwork : public PeerCommFactory {
 public:
  FakePeerNetwork();
  ~FakePeerNetwork() override;

  std::string_view name() const override { return "fake"; }
  absl::StatusOr<Created> Create() override;
  absl::StatusOr<std::unique_ptr<PeerComm>> Join(std::string_view id) override;

  void Stall(bool stalled) { stalled_ = stalled; }
  // Completed pairings' byte counts by communicator id, in pairing order.
  std::map<std::string, std::vector<int64_t>> Pairings() const;
  int32_t communicators() const;

  struct Link;  // one communicator's shared state (fake_peer_comm.cc)

 private:
  std::atomic<bool> stalled_{false};
  mutable std::mutex mu_;
  int64_t next_id_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<std::string, std::shared_ptr<Link>> links_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tandem::transport

#endif  // TANDEM_COMMON_TRANSPORT_FAKE_PEER_COMM_H_
