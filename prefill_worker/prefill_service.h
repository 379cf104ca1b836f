// The prefill worker's gRPC face: tandem.v1.PrefillWorker (Prefill, GetWorkerStats).
// Converts protos to PrefillWorker calls and back. Until the model has loaded every
// call answers UNAVAILABLE.
#ifndef TANDEM_PREFILL_WORKER_PREFILL_SERVICE_H_
#define TANDEM_PREFILL_WORKER_PREFILL_SERVICE_H_

#include <atomic>

#include "prefill_worker/prefill_worker.h"
#include "tandem/v1/worker.grpc.pb.h"

namespace tandem::prefill {

class PrefillService : public v1::PrefillWorker::Service {
 public:
  void SetWorker(PrefillWorker* worker, v1::KvLayoutFingerprint fingerprint);

  grpc::Status Prefill(grpc::ServerContext* ctx, const v1::PrefillRequest* req,
                       v1::PrefillResponse* resp) override;
  grpc::Status GetWorkerStats(grpc::ServerContext* ctx, const v1::GetWorkerStatsRequest* req,
                              v1::WorkerStats* resp) override;

 private:
  std::atomic<PrefillWorker*> worker_{nullptr};
  v1::KvLayoutFingerprint fingerprint_;  // written before worker_ is published
};

}  // namespace tandem::prefill

#endif  // TANDEM_PREFILL_WORKER_PREFILL_SERVICE_H_
