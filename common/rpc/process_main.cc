#include "common/rpc/process_main.h"

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <thread>

#include "common/util/random_id.h"
#include "common/util/signals.h"
#include "common/util/strings.h"

namespace tandem::rpc {

std::string EnsureInternalKey() {
  if (const char* given = std::getenv("TANDEM_INTERNAL_KEY"); given != nullptr && *given != 0) {
    return given;
  }
  const std::string key = absl::StrCat(absl::Hex(RandomNonZero64(), absl::kZeroPad16),
                                       absl::Hex(RandomNonZero64(), absl::kZeroPad16));
  setenv("TANDEM_INTERNAL_KEY", key.c_str(), 1);
  return key;
}

void AddServerFlags(CLI::App& app, ServerFlags* f) {
  app.add_option("--model,-m", f->model, "GGUF model")->required();
  app.add_option("--host", f->host, "Address to listen on (gRPC and HTTP)")->capture_default_str();
  app.add_option("--port", f->port, "gRPC port (0: any free port)")->capture_default_str();
  app.add_option("--http-port", f->http_port,
                 "HTTP port for /health, /metrics (and the router's OpenAI API); 0: any free "
                 "port, -1: none")
      ->capture_default_str();
  app.add_option("--port-file", f->port_file,
                 "Write the bound gRPC and HTTP ports here (one per line) once listening");
  app.add_option("--ready-file", f->ready_file, "Create this file once first ready");
  app.add_option("--drain-timeout-ms", f->drain_timeout_ms,
                 "On SIGTERM, how long running calls may take to finish")
      ->capture_default_str();
  app.add_option("--metrics-prefix", f->metrics_prefix,
                 "Prefix of every Prometheus metric name (vllm: for vLLM dashboards)")
      ->capture_default_str();
  app.add_option("--api-key", f->api_key,
                 "Require this key on every call (HTTP Authorization: Bearer, gRPC metadata "
                 "authorization); probes and /metrics stay open")
      ->envname("TANDEM_API_KEY");
  app.add_option("--internal-key", f->internal_key,
                 "Key the cluster's processes require of each other: worker RPCs and KV "
                 "transfers (default: --api-key; `tandem serve` makes a random one)")
      ->envname("TANDEM_INTERNAL_KEY");
  app.add_option("--served-model-name", f->served_model_name,
                 "The model's name in the API and metrics (default: the file name without .gguf)");
  app.add_option("--http-threads", f->http_threads,
                 "Threads serving every HTTP connection (an open stream holds none)")
      ->capture_default_str();
  app.add_option("--http-max-connections", f->http_max_connections,
                 "HTTP connections open at once; past it a request is answered 503 with "
                 "Retry-After")
      ->capture_default_str();
  app.add_option("--http-max-connections-per-client", f->http_max_connections_per_client,
                 "HTTP connections open at once from one client address; past it: 503 "
                 "(0: no bound, e.g. behind a proxy)")
      ->capture_default_str();
}

std::string ServedModelName(const ServerFlags& f) {
  if (!f.served_model_name.empty()) return f.served_model_name;
  // Like llama.cpp's server: the file's name, which is also what users type.
  std::string name = f.model.substr(f.model.rfind('/') + 1);
  if (name.ends_with(".gguf")) name.resize(name.size() - 5);
  return name.empty() ? f.model : name;
}

void AddTlsFlags(CLI::App& app, TlsFiles* tls) {
  app.add_option("--tls-cert", tls->cert, "PEM certificate chain: serve gRPC and HTTP over TLS");
  app.add_option("--tls-key", tls->key, "PEM private key of --tls-cert");
  app.add_option("--tls-client-ca", tls->client_ca,
                 "PEM CA bundle: require client certificates signed by it (mTLS)");
}

absl::Status AnnounceListening(const std::string& name, const ServerFlags& f, int port,
                               int http_port) {
  if (!f.port_file.empty()) {
    const std::string tmp = f.port_file + ".tmp";
    {
      std::ofstream out(tmp);
      out << port << "\n" << http_port << "\n";
      if (!out) return absl::InternalError(StrCat("cannot write ", tmp));
    }
    if (std::rename(tmp.c_str(), f.port_file.c_str()) != 0) {
      return absl::InternalError(StrCat("cannot write ", f.port_file));
    }
  }
  if (http_port > 0) {
    std::fprintf(stderr, "%s listening on %s:%d (gRPC), %s:%d (HTTP)\n", name.c_str(),
                 f.host.c_str(), port, f.host.c_str(), http_port);
  } else {
    std::fprintf(stderr, "%s listening on %s:%d\n", name.c_str(), f.host.c_str(), port);
  }
  return absl::OkStatus();
}

void AnnounceReady(const ServerFlags& f) {
  if (f.ready_file.empty()) return;
  std::ofstream out(f.ready_file);
  out << "ready\n";
}

absl::StatusOr<std::unique_ptr<http::HttpServer>> StartHttpServer(
    const ServerFlags& f, metrics::Metrics* metrics, const TlsFiles& tls,
    const std::function<void(http::HttpServer*)>& mount) {
  if (f.http_port < 0) return std::unique_ptr<http::HttpServer>();
  http::HttpServerOptions o;
  o.host = f.host;
  o.port = f.http_port;
  o.api_key = f.api_key;
  o.tls = tls;
  o.threads = f.http_threads;
  o.max_connections = f.http_max_connections;
  o.max_connections_per_client = f.http_max_connections_per_client;
  auto server = http::HttpServer::Create(o, metrics);
  if (!server.ok()) return server.status();
  if (mount) mount(server->get());
  if (auto st = (*server)->Listen(); !st.ok()) return st;
  return server;
}

void ServeUntilSignal(const std::string& name, RpcServer* server, const ServerFlags& f,
                      const HttpDrain& http) {
  const int sig = WaitForTerminationSignal();
  std::fprintf(stderr, "%s: signal %d, draining (up to %d ms)\n", name.c_str(), sig,
               f.drain_timeout_ms);
  const auto until =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(f.drain_timeout_ms);
  server->SetReady(false);
  if (http.server != nullptr) http.server->Drain();  // new HTTP requests get 503 from now on
  server->Shutdown(std::chrono::milliseconds(f.drain_timeout_ms));
  if (http.server == nullptr) return;
  while (http.idle && !http.idle() && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (http.cancel_all) http.cancel_all();
  http.server->Stop();
}

}  // namespace tandem::rpc
