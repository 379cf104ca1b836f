// The decode worker's gRPC face: tandem.v1.DecodeWorker (Reserve, Release, Decode,
// GetWorkerStats) and tandem.v1.KvTransfer (Handshake, PushKvBlocks). Converts
// protos to DecodeWorker calls and back; holds no state of its own beyond streams.
//
// The worker pointer is set once the model has loaded; until then every call answers
// UNAVAILABLE. Decode is a callback reactor (one write in flight, tokens that arrive
// meanwhile are coalesced into the next message); the rest are synchronous handlers.
#ifndef TANDEM_DECODE_WORKER_DECODE_SERVICE_H_
#define TANDEM_DECODE_WORKER_DECODE_SERVICE_H_

#include <atomic>

#include "common/transport/transport_choice.h"
#include "decode_worker/decode_worker.h"
#include "decode_worker/peer_kv_receiver.h"
#include "tandem/v1/kv_transfer.grpc.pb.h"
#include "tandem/v1/worker.grpc.pb.h"

namespace tandem::decode {

class DecodeService
    : public v1::DecodeWorker::WithCallbackMethod_Decode<v1::DecodeWorker::Service> {
 public:
  // `transports`: the KV transports it accepts (reported by GetWorkerStats).
  void SetWorker(DecodeWorker* worker, v1::KvLayoutFingerprint fingerprint,
                 std::vector<transport::TransportKind> transports = {}) {
    fingerprint_ = std::move(fingerprint);
    transports_ = std::move(transports);
    worker_.store(worker);
  }

  grpc::Status Reserve(grpc::ServerContext* ctx, const v1::ReserveRequest* req,
                       v1::ReserveResponse* resp) override;
  grpc::Status Release(grpc::ServerContext* ctx, const v1::ReleaseRequest* req,
                       v1::ReleaseResponse* resp) override;
  grpc::ServerWriteReactor<v1::DecodeResponse>* Decode(grpc::CallbackServerContext* ctx,
                                                       const v1::DecodeRequest* req) override;
  grpc::Status GetWorkerStats(grpc::ServerContext* ctx, const v1::GetWorkerStatsRequest* req,
                              v1::WorkerStats* resp) override;

 private:
  std::atomic<DecodeWorker*> worker_{nullptr};
  v1::KvLayoutFingerprint fingerprint_;               // written before worker_ is published
  std::vector<transport::TransportKind> transports_;  // the same
};

// What the KV service takes: the handshake picks the transport (transport_choice.h)
// from the sender's offer, both devices and `accepted`; a peer transport's payloads go
// through `peer`.
struct KvTransports {
  transport::KvDevice device;
  std::vector<transport::TransportKind> accepted = {transport::TransportKind::kHost};
  PeerKvReceiver* peer = nullptr;  // must outlive the service's calls; null: host only
};

class KvReceiverService : public v1::KvTransfer::Service {
 public:
  void SetWorker(DecodeWorker* worker, v1::KvLayoutFingerprint fingerprint,
                 KvTransports transports = {});

  grpc::Status Handshake(grpc::ServerContext* ctx, const v1::HandshakeRequest* req,
                         v1::HandshakeResponse* resp) override;
  grpc::Status PushKvBlocks(grpc::ServerContext* ctx, grpc::ServerReader<v1::KvBlocksChunk>* reader,
                            v1::PushKvBlocksResponse* resp) override;

 private:
  // One chunk whose payload travels on the peer communicator: checked against the
  // lease (unless the transfer was refused already: `begun` false) and queued for
  // receiving; a refused one is received and dropped, so the pairing holds.
  absl::Status PeerChunk(DecodeWorker* w, uint64_t lease, const v1::KvBlocksChunk& chunk,
                         bool begun);

  std::atomic<DecodeWorker*> worker_{nullptr};
  v1::KvLayoutFingerprint fingerprint_;  // written before worker_ is published
  KvTransports transports_;              // likewise
};

}  // namespace tandem::decode

#endif  // TANDEM_DECODE_WORKER_DECODE_SERVICE_H_
