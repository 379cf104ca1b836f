// The worker clients over gRPC (tandem.v1.PrefillWorker / DecodeWorker, grpc.health.v1):
// asynchronous callback stubs, one channel per worker, the API key on every call.
// Health is SERVING on the worker's service plus an answer to GetWorkerStats.
//
// A client's destructor waits for its calls in flight to end (each has a deadline;
// cancel a Decode stream without one first).
#ifndef TANDEM_ROUTER_GRPC_WORKER_CLIENT_H_
#define TANDEM_ROUTER_GRPC_WORKER_CLIENT_H_

#include <grpcpp/support/status.h>

#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "router/worker_client.h"

namespace tandem::router {

WorkerClientFactory GrpcWorkerClients(std::string api_key);

// What the router makes of a worker call's failure (`call`: "prefill", "decode reserve",
// ...), which may reach the client. Internal addresses never do: every host:port in the
// worker's message (its first 4 KiB) reads "(a worker)", and the call is named without
// the worker's address (the router's log has it, for failures that are not the
// request's). A refusal of the request (INVALID_ARGUMENT, OUT_OF_RANGE) whose message
// starts with a field ("params.temperature: ...", docs/api.md "Statuses") becomes a FieldError
// naming it in the client's terms (params.X → X), so the OpenAI error carries it in
// `param`; one naming a field only the router fills (destination.*, first_token_id, ...)
// is the router's fault: INTERNAL. Linear in the message.
absl::Status FromWorker(const grpc::Status& s, std::string_view call, std::string_view address);

}  // namespace tandem::router

#endif  // TANDEM_ROUTER_GRPC_WORKER_CLIENT_H_
