// OpenAiFront: the router's OpenAI-compatible HTTP API, mounted on the process's
// HttpServer next to /health and /metrics.
//
//   POST /v1/completions, POST /v1/chat/completions — streaming as server-sent events
//        (`data: {json}` … `data: [DONE]`) or one JSON response; n and batched prompts
//        fan out into one router request per choice (see openai_request.h)
//   GET  /v1/models            the served model
//   POST /tokenize, /detokenize  (vLLM's extension) {"prompt" | "messages"} → tokens
//   GET  /version
//
// A request runs exactly as a gRPC Generate does (same validator, same router); its
// errors come back as {"error": {"message", "type", "param", "code"}} with the HTTP
// status of its gRPC code: INVALID_ARGUMENT/FAILED_PRECONDITION 400, UNAUTHENTICATED
// 401, NOT_FOUND 404, RESOURCE_EXHAUSTED 429, UNAVAILABLE 503, DEADLINE_EXCEEDED 504,
// the rest 500 (the server itself answers 413 for a body over the limit). A client that
// disconnects — streaming or not — cancels its requests at once (the connection's
// pending read sees the hang-up).
//
// Thread-safe. No thread waits on a request: a handler validates and submits on one of
// the server's threads and returns; the router's callbacks turn each event into JSON
// and queue it on the request's exchange.
#ifndef TANDEM_ROUTER_OPENAI_FRONT_H_
#define TANDEM_ROUTER_OPENAI_FRONT_H_

#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "absl/container/flat_hash_map.h"
#include "common/http/http_server.h"
#include "router/openai_request.h"
#include "router/request_validator.h"
#include "router/router.h"

namespace tandem::router {

class HttpCall;

class OpenAiFront {
 public:
  OpenAiFront(Router* router, WorkerPool* pool, const RequestValidator* validator,
              const tokenizer::Tokenizer& tokenizer, const model::ModelConfig& config,
              std::string served_model_name);
  ~OpenAiFront();

  // Registers the routes on `server`.
  void Mount(http::HttpServer* server);

  // No generation request is open.
  bool Idle();
  // Cancels every open generation request (shutdown after the drain timeout).
  void CancelAll();

 private:
  friend class HttpCall;

  void Generate(OpenAiEndpoint endpoint, std::shared_ptr<http::Exchange> exchange);
  http::Response Models() const;
  http::Response Tokenize(std::string_view body) const;
  http::Response Detokenize(std::string_view body) const;
  // The call has answered (or given up): it is no longer open.
  void Forget(HttpCall* call);

  Router* router_;
  WorkerPool* pool_;
  const RequestValidator* validator_;
  const tokenizer::Tokenizer& tokenizer_;
  const model::ModelConfig& config_;
  const std::string model_name_;
  const int64_t created_;  // unix seconds, for /v1/models

  std::mutex mu_;
  absl::flat_hash_map<HttpCall*, std::shared_ptr<HttpCall>> open_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tandem::router

#endif  // TANDEM_ROUTER_OPENAI_FRONT_H_
