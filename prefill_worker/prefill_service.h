// The prefill worker's gRPC face: tandem.v1.PrefillWorker (Prefill, GetWorkerStats).
// Converts protos to PrefillWorker calls and back. Until the model has loaded every
// call answers UNAVAILABLE.
#ifndef TANDEM_PREFILL_WORKER_PREFILL_SERVICE_H_
#define TANDEM_PREFILL_WORKER_PREFILL_SERVICE_H_

#include <atomic>
#include <vector>

#include "common/transport/transport_choice.h"
#include "prefill_worker/prefill_worker.h"
#include "tandem/v1/worker.grpc.pb.h"

namespace tandem::prefill {

class PrefillService : public v1::PrefillWorker::Service {
 public:
  // `transports`: the KV transports it offers (reported by GetWorkerStats).
  void SetWorker(PrefillWorker* worker, v1::KvLayoutFingerprint fingerprint,
                 std::vector<transport::TransportKind> transports = {});

  grpc::Status Prefill(grpc::ServerContext* ctx, const v1::PrefillRequest* req,
                       v1::PrefillResponse* resp) override;
  grpc::Status GetWorkerStats(grpc::ServerContext* ctx, const v1::GetWorkerStatsRequest* req,
                              v1::WorkerStats* resp) override;

 private:
  std::atomic<PrefillWorker*> worker_{nullptr};
  v1::KvLayoutFingerprint fingerprint_;               // written before worker_ is published
  std::vector<transport::TransportKind> transports_;  // the same
};

}  // namespace tandem::prefill

#endif  // TANDEM_PREFILL_WORKER_PREFILL_SERVICE_H_
