// The router's public gRPC face: tandem.v1.Generation. Validates and converts client
// protos (RequestValidator), hands requests to the Router, and streams its output
// through a reactor per request (one write in flight; OnCancel cancels the request).
#ifndef TANDEM_ROUTER_GENERATION_SERVICE_H_
#define TANDEM_ROUTER_GENERATION_SERVICE_H_

#include <string>

#include "router/request_validator.h"
#include "router/router.h"
#include "tandem/v1/generation.grpc.pb.h"

namespace tandem::router {

struct ModelInfo {
  std::string name;
  int64_t kv_bytes_per_token = 0;
};

class GenerationService : public v1::Generation::CallbackService {
 public:
  GenerationService(Router* router, WorkerPool* pool, const RequestValidator* validator,
                    const model::ModelConfig& config, ModelInfo info)
      : router_(router),
        pool_(pool),
        validator_(validator),
        config_(config),
        info_(std::move(info)) {}

  grpc::ServerWriteReactor<v1::GenerateResponse>* Generate(grpc::CallbackServerContext* ctx,
                                                           const v1::GenerateRequest* req) override;
  grpc::ServerUnaryReactor* Abort(grpc::CallbackServerContext* ctx, const v1::AbortRequest* req,
                                  v1::AbortResponse* resp) override;
  grpc::ServerUnaryReactor* Tokenize(grpc::CallbackServerContext* ctx,
                                     const v1::TokenizeRequest* req,
                                     v1::TokenizeResponse* resp) override;
  grpc::ServerUnaryReactor* GetModelInfo(grpc::CallbackServerContext* ctx,
                                         const v1::GetModelInfoRequest* req,
                                         v1::GetModelInfoResponse* resp) override;
  grpc::ServerUnaryReactor* GetServerInfo(grpc::CallbackServerContext* ctx,
                                          const v1::GetServerInfoRequest* req,
                                          v1::GetServerInfoResponse* resp) override;

 private:
  Router* router_;
  WorkerPool* pool_;
  const RequestValidator* validator_;
  const model::ModelConfig& config_;
  const ModelInfo info_;
};

}  // namespace tandem::router

#endif  // TANDEM_ROUTER_GENERATION_SERVICE_H_
