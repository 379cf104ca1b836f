// HttpServer: the HTTP side of every tandem process, asynchronous (Boost.Asio, requests
// parsed by Boost.Beast): a fixed number of threads serves every connection, and an
// open stream holds no thread — only its connection's buffers.
//
// Every process serves `GET /health` (200 once ready, 503 before and while draining),
// `GET /ping` and `GET /metrics` (Prometheus text format); the router adds the
// OpenAI-compatible API on the same port (router/openai_front.h). With an API key set,
// every path except /health, /metrics, /ping and those routed with HandlePublic (the
// router's web page, which holds no data and asks for the key itself) needs
// `Authorization: Bearer <key>` (401 otherwise, in OpenAI's error shape) — the one
// place HTTP checks it. With a
// certificate and key it serves HTTPS; with a client CA as well it requires and
// verifies client certificates (mTLS).
//
// HTTP/1.1 with keep-alive, `Expect: 100-continue`, bodies up to max_body_bytes (413
// past it), errors as OpenAI-shaped JSON (400 for a malformed request, 404 for no route,
// 405 for a known path with another method). A request's head and body must arrive
// within request_timeout of its first byte being awaited, and an idle keep-alive
// connection closes after as long: a client trickling bytes (slowloris) holds a
// connection that long at most, and no thread at all.
//
// Connections past max_connections in total, or past max_connections_per_client from
// one address, are still accepted and read, then answered 503 with `Retry-After: 1`
// and closed — never reset; past twice max_connections the server stops accepting for
// a moment and the kernel's backlog holds the rest. The probes (/health, /ping,
// /metrics) are answered on such connections too, so an attack that fills the server
// does not fail its liveness checks. Every close after an answer is graceful (the
// client's unread bytes are drained first, so the kernel sends no reset).
//
// Drain (on SIGTERM) stops taking work: from then on every request but the probes gets
// 503, /health says 503, and exchanges already running go on until Stop.
//
// Usage: Create → Handle(…) for each route → Listen (binds, starts the threads) → … →
// Stop. Handle only before Listen; the rest is thread-safe.
#ifndef TANDEM_COMMON_HTTP_HTTP_SERVER_H_
#define TANDEM_COMMON_HTTP_HTTP_SERVER_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "common/http/exchange.h"
#include "common/util/tls_files.h"

namespace tandem::metrics {
class Metrics;
}

namespace tandem::http {

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  int port = 0;  // 0: any free port
  std::string api_key;
  TlsFiles tls;
  int threads = 4;             // serve every connection; handlers run on them
  int max_connections = 4096;  // open at once; past it: 503
  // Open at once from one client address; past it: 503 (0: no bound, e.g. behind a
  // proxy whose connections all come from one address).
  int max_connections_per_client = 1024;
  std::chrono::milliseconds request_timeout{30000};  // see above
  size_t max_body_bytes = 8 << 20;
};

struct HttpServerStats {
  int64_t open_connections = 0;  // served ones, not those being answered 503
  // Of those, kept-alive ones idle between requests (the ones a bound closes to make room).
  int64_t idle_connections = 0;
  int64_t rejected_total = 0;  // requests answered 503 for being past a connection bound
};

class HttpServer {
 public:
  // Checks the options and TLS files; `metrics` (may be null) backs /metrics and must
  // outlive the server.
  static absl::StatusOr<std::unique_ptr<HttpServer>> Create(const HttpServerOptions& options,
                                                            metrics::Metrics* metrics);
  ~HttpServer();  // Stop()

  // Routes `method` `path` (exact, query string ignored) to `handler`.
  void Handle(std::string_view method, std::string_view path, Handler handler);
  // The same for a path served without the API key (static content only).
  void HandlePublic(std::string_view method, std::string_view path, Handler handler);

  // Binds and starts serving; the bound port is port().
  absl::Status Listen();
  int port() const;
  bool tls() const;
  // Not ready: /health answers 503 with "not ready" and `why` (public: name no address).
  void SetReady(bool ready, std::string why = {});
  // Not ready from now on, and new requests but the probes are answered 503.
  void Drain();
  HttpServerStats Stats() const;
  // Stops accepting, tells every open exchange its client is gone, closes every
  // connection and joins the threads. Exchanges still held elsewhere become no-ops.
  void Stop();

  class Impl;

 private:
  explicit HttpServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace tandem::http

#endif  // TANDEM_COMMON_HTTP_HTTP_SERVER_H_
