// PeerKvReceiver: the decode worker's end of the peer KV transports (NCCL, CUDA IPC).
//
// A prefill worker rendezvouses through the KV handshake (Join: its communicator id,
// under its sender id and a generation that grows each time it rebuilds). Its chunks
// then name their payloads by position on that communicator (seq); the service checks
// each against the reservation (DecodeWorker::AcceptPeerKv) and Submits it here. One
// thread per communicator receives the payloads strictly in seq order into staging
// buffers and hands them to the worker (PeerKvArrived), so sends and receives pair in
// descriptor order however the gRPC streams interleave. A refused chunk's payload is
// still received (the sender's Send must pair) and dropped.
//
// Detected, and each breaks the communicator (every payload pending on it fails, the
// sender's next transfer rebuilds): a seq already received or submitted twice
// (reordered), a seq still missing `timeout` after a later one was submitted
// (missing), a Recv that fails or passes its deadline, a rendezvous for a sender we
// do not know at this generation.
//
// Thread-safe.
#ifndef TANDEM_DECODE_WORKER_PEER_KV_RECEIVER_H_
#define TANDEM_DECODE_WORKER_PEER_KV_RECEIVER_H_

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "common/transport/peer_comm.h"
#include "common/transport/staging_pool.h"
#include "common/transport/transport_choice.h"
#include "decode_worker/decode_worker.h"

namespace tandem::decode {

struct PeerKvReceiverOptions {
  transport::PeerCommFactory* nccl = nullptr;  // null where unavailable
  transport::PeerCommFactory* cuda_ipc = nullptr;
  std::chrono::milliseconds timeout{10000};  // each Recv, and a gap in the seqs
};

// One payload a chunk names.
struct PeerPayload {
  uint64_t seq = 0;
  uint64_t lease_id = 0;
  int32_t layer = 0;
  int32_t first_block = 0;
  int32_t num_blocks = 0;
  int64_t bytes = 0;
  bool accepted = false;  // AcceptPeerKv said OK: deliver it; else receive and drop
};

class PeerKvReceiver {
 public:
  // `worker` and `staging` (its MakeStaging's) must outlive the receiver.
  PeerKvReceiver(DecodeWorker* worker, transport::StagingPool* staging,
                 PeerKvReceiverOptions options);
  ~PeerKvReceiver();  // aborts every communicator, fails what is pending, joins

  bool Supports(transport::TransportKind kind) const;
  int64_t max_payload_bytes() const { return staging_->bytes(); }

  // Joins the communicator `comm_id` of `sender_id`, replacing (aborting) an older
  // generation's. FailedPrecondition for a generation not above the current one;
  // ResourceExhausted when kMaxSenders senders hold busy communicators (idle ones
  // are evicted, least recently used first).
  // (Each NCCL communicator holds device buffers and proxy threads: keep this small.)
  static constexpr size_t kMaxSenders = 64;
  absl::Status Join(transport::TransportKind kind, uint64_t sender_id, uint64_t generation,
                    std::string_view comm_id);
  // Queues `p` on the sender's communicator of `generation`. On an error the payload
  // is not queued (and an accepted one is not the caller's to fail: Submit has
  // reported it through PeerKvFailed).
  absl::Status Submit(uint64_t sender_id, uint64_t generation, const PeerPayload& p);

  struct Stats {
    int64_t broken = 0;   // communicators broken by an error or a protocol violation
    int64_t rebuilt = 0;  // rendezvous that replaced a sender's earlier communicator
    int32_t senders = 0;  // communicators held now (at most kMaxSenders)
  };
  Stats stats() const;

 private:
  struct Link;
  void Run(Link* link);
  // Room for one more sender's link: forgets the broken links, then evicts idle ones
  // (least recently used first) into `pruned` (their threads are joined outside the
  // lock). ResourceExhausted when kMaxSenders links are all busy.
  absl::Status MakeRoom(std::vector<std::unique_ptr<Link>>* pruned)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Fails every payload pending on `link` with `why` and marks it broken.
  void Break(Link* link, const absl::Status& why) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Fail(const PeerPayload& p, const absl::Status& why);

  DecodeWorker* const worker_;
  transport::StagingPool* const staging_;
  const PeerKvReceiverOptions options_;

  mutable std::mutex mu_;
  absl::flat_hash_map<uint64_t, std::unique_ptr<Link>> links_ ABSL_GUARDED_BY(mu_);
  Stats stats_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tandem::decode

#endif  // TANDEM_DECODE_WORKER_PEER_KV_RECEIVER_H_
