// What the main() of every tandem server process shares: server flags, the startup
// sequence (listen → load → ready), the port file a supervisor reads, the HTTP side
// (/health, /metrics; the router adds the OpenAI API), and a clean, draining shutdown
// on SIGINT/SIGTERM. What only processes that run an engine add is in worker_main.h.
#ifndef TANDEM_COMMON_RPC_PROCESS_MAIN_H_
#define TANDEM_COMMON_RPC_PROCESS_MAIN_H_

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "common/http/http_server.h"
#include "common/metrics/metrics.h"
#include "common/rpc/rpc_server.h"

namespace tandem::rpc {

struct ServerFlags {
  std::string model;
  std::string host = "127.0.0.1";  // gRPC and HTTP bind here
  int port = 0;                    // 0: any free port
  int http_port = -1;              // -1: no HTTP server; 0: any free port
  std::string port_file;           // written with the bound ports once listening
  std::string ready_file;          // created once the process is first ready
  int drain_timeout_ms = 10000;
  std::string metrics_prefix = "tandem:";
  std::string api_key;  // --api-key or $TANDEM_API_KEY
  // --internal-key or $TANDEM_INTERNAL_KEY: what the cluster's processes require of each
  // other (worker RPCs, KV transfers); empty: the api key. InternalKey() picks.
  std::string internal_key;
  const std::string& InternalKey() const { return internal_key.empty() ? api_key : internal_key; }
  int http_threads = 4;
  int http_max_connections = 4096;
  int http_max_connections_per_client = 1024;
  std::string served_model_name;  // empty: the model file's name without .gguf
};

// The model name the process reports (OpenAI `model`, the metrics' model_name label).
std::string ServedModelName(const ServerFlags& flags);

void AddServerFlags(CLI::App& app, ServerFlags* flags);

// The internal key of a local cluster (--internal-key): $TANDEM_INTERNAL_KEY, first set to
// a random one when unset, so that the processes this one starts inherit it.
std::string EnsureInternalKey();
// --tls-cert / --tls-key / --tls-client-ca (the router's public ports).
void AddTlsFlags(CLI::App& app, TlsFiles* tls);

// Writes "<grpc port>\n<http port>\n" to flags.port_file (if set) atomically and logs
// "<name> listening on host:port" to stderr. `http_port` 0: no HTTP server.
absl::Status AnnounceListening(const std::string& name, const ServerFlags& flags, int port,
                               int http_port = 0);

// Creates flags.ready_file (if set): what a supervisor waits for (works whatever the
// transport security, unlike a health probe).
void AnnounceReady(const ServerFlags& flags);

// The process's HTTP server on flags.host:flags.http_port with /health and /metrics
// plus what `mount` adds, listening. Null when flags.http_port < 0.
absl::StatusOr<std::unique_ptr<http::HttpServer>> StartHttpServer(
    const ServerFlags& flags, metrics::Metrics* metrics, const TlsFiles& tls = {},
    const std::function<void(http::HttpServer*)>& mount = nullptr);

// How the HTTP side drains (the router's streams): `idle` says whether requests are
// still open; `cancel_all` ends those left when the drain timeout is up.
struct HttpDrain {
  http::HttpServer* server = nullptr;
  std::function<bool()> idle;
  std::function<void()> cancel_all;
};

// Blocks until SIGINT/SIGTERM, then marks the process not ready (gRPC health and
// HTTP /health), lets running gRPC calls and HTTP requests finish for up to
// `drain_timeout_ms`, cancels what is left and stops both servers.
void ServeUntilSignal(const std::string& name, RpcServer* server, const ServerFlags& flags,
                      const HttpDrain& http = {});

}  // namespace tandem::rpc

#endif  // TANDEM_COMMON_RPC_PROCESS_MAIN_H_
