// HttpServer: the HTTP side of every tandem process (cpp-httplib).
//
// Every process serves `GET /health` (200 once ready, 503 before and while draining)
// and `GET /metrics` (Prometheus text format); the router adds the OpenAI-compatible
// API on the same port (router/openai_front.h). With an API key set, every path except
// /health, /metrics and /ping needs `Authorization: Bearer <key>` (401 otherwise, in
// OpenAI's error shape). With a certificate and key it serves HTTPS; with a client CA
// as well it requires and verifies client certificates (mTLS).
//
// Usage: Create → register routes on server() → Listen (binds, serves on a thread) →
// … → Stop. Thread-safe after Listen.
#ifndef TANDEM_COMMON_HTTP_HTTP_SERVER_H_
#define TANDEM_COMMON_HTTP_HTTP_SERVER_H_

#include <atomic>
#include <memory>
#include <string>
#include <string_view>
#include <thread>

#include "absl/status/statusor.h"
#include "common/util/tls_files.h"

namespace httplib {
class Server;
struct Request;
struct Response;
}  // namespace httplib

namespace tandem::metrics {
class Metrics;
}

namespace tandem::http {

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  int port = 0;  // 0: any free port
  std::string api_key;
  TlsFiles tls;
  int threads = 64;  // connections served at once (a streaming request holds one)
  size_t max_body_bytes = 8 << 20;
};

// An OpenAI-shaped error: {"error": {"message", "type", "param" (null when empty), "code"}}.
std::string JsonErrorBody(int http_status, std::string_view message, std::string_view type,
                          std::string_view param = {});
// Sets the response's status and JsonErrorBody as its content.
void SetJsonError(httplib::Response& res, int http_status, std::string_view message,
                  std::string_view type, std::string_view param = {});

class HttpServer {
 public:
  // Checks the TLS files; `metrics` (may be null) backs /metrics and must outlive the server.
  static absl::StatusOr<std::unique_ptr<HttpServer>> Create(const HttpServerOptions& options,
                                                            metrics::Metrics* metrics);
  ~HttpServer();  // Stop()

  httplib::Server& server() { return *server_; }
  // Binds and starts serving; the bound port is port().
  absl::Status Listen();
  int port() const { return port_; }
  bool tls() const { return options_.tls.enabled(); }
  void SetReady(bool ready) { ready_ = ready; }
  void Stop();

 private:
  HttpServer(const HttpServerOptions& options, std::unique_ptr<httplib::Server> server,
             metrics::Metrics* metrics);
  bool Authorized(const httplib::Request& req) const;

  const HttpServerOptions options_;
  std::unique_ptr<httplib::Server> server_;
  metrics::Metrics* metrics_;
  std::atomic<bool> ready_{false};
  int port_ = 0;
  std::thread thread_;
};

}  // namespace tandem::http

#endif  // TANDEM_COMMON_HTTP_HTTP_SERVER_H_
