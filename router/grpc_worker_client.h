// The worker clients over gRPC (tandem.v1.PrefillWorker / DecodeWorker, grpc.health.v1):
// asynchronous callback stubs, one channel per worker, the API key on every call.
// Health is SERVING on the worker's service plus an answer to GetWorkerStats.
//
// A client's destructor waits for its calls in flight to end (each has a deadline;
// cancel a Decode stream without one first).
#ifndef TANDEM_ROUTER_GRPC_WORKER_CLIENT_H_
#define TANDEM_ROUTER_GRPC_WORKER_CLIENT_H_

#include <string>

#include "router/worker_client.h"

namespace tandem::router {

WorkerClientFactory GrpcWorkerClients(std::string api_key);

}  // namespace tandem::router

#endif  // TANDEM_ROUTER_GRPC_WORKER_CLIENT_H_
