#include "common/rpc/process_main.h"

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <thread>

#include "common/util/signals.h"
#include "common/util/strings.h"
#include "kernels/backend_factory.h"

namespace tandem::rpc {

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
  app.add_option("--served-model-name", f->served_model_name,
                 "The model's name in the API and metrics (default: the file name without .gguf)");
  app.add_option("--http-threads", f->http_threads,
                 "Threads serving every HTTP connection (an open stream holds none)")
      ->capture_default_str();
  app.add_option("--http-max-connections", f->http_max_connections,
                 "HTTP connections open at once; past it a request is answered 503 with "
                 "Retry-After")
      ->capture_default_str();
}

std::string ServedModelName(const ServerFlags& f) {
  if (!f.served_model_name.empty()) return f.served_model_name;
  // Like llama.cpp's server: the file's name, which is also what users type.
  std::string name = f.model.substr(f.model.rfind('/') + 1);
  if (name.ends_with(".gguf")) name.resize(name.size() - 5);
  return name.empty() ? f.model : name;
}

void AddDeviceFlags(CLI::App& app, std::string* device, int* gpu, bool* batch_invariant,
                    kv::KvDtype* kv_dtype) {
  if (const char* d = std::getenv("TANDEM_DEVICE"); d != nullptr && *d != '\0') *device = d;
  app.add_option("--device", *device, "Compute backend (default: $TANDEM_DEVICE, else cpu)")
      ->check(CLI::IsMember(kernels::DeviceNames()))
      ->capture_default_str();
  app.add_option("--gpu", *gpu, "CUDA device index (--device cuda)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_flag("--batch-invariant", *batch_invariant,
               "A request's tokens do not depend on what it is batched with (the CPU always; "
               "on a GPU: pinned GEMM algorithms, fixed attention splits, no tensor-core "
               "attention)");
  AddKvDtypeFlag(app, kv_dtype);
}

void AddKvDtypeFlag(CLI::App& app, kv::KvDtype* kv_dtype) {
  app.add_option_function<std::string>(
         "--kv-dtype",
         [kv_dtype](const std::string& name) {
           absl::StatusOr<kv::KvDtype> d = kv::ParseKvDtype(name);
           if (!d.ok()) throw CLI::ValidationError(std::string(d.status().message()));
           *kv_dtype = *d;
         },
         "KV cache element type: f32, bf16, f16")
      ->default_str(std::string(kv::KvDtypeName(*kv_dtype)));
}

void AddEngineFlags(CLI::App& app, engine::EngineOptions* o) {
  AddDeviceFlags(app, &o->device, &o->gpu, &o->batch_invariant, &o->kv_dtype);
  app.add_flag("--enforce-eager", o->enforce_eager,
               "Run every pass eagerly: no CUDA graphs for decode steps")
      ->capture_default_str();
  app.add_option("--gpu-memory-utilization", o->gpu_memory_utilization,
                 "Fraction of the GPU's memory this worker may use; sizes the KV pool from what "
                 "weights and activations leave (instead of --kv-cache-bytes; 0: off)")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  app.add_option("--threads,-t", o->num_threads, "Compute threads (0: every core)")
      ->capture_default_str();
  app.add_option("--kv-cache-bytes", o->kv_cache_bytes, "KV cache memory budget")
      ->capture_default_str();
  app.add_option("--block-size", o->block_size, "Tokens per KV block")->capture_default_str();
  app.add_option("--max-running", o->scheduler.max_running, "Sequences per batch")
      ->capture_default_str();
  app.add_option("--max-batched-tokens", o->scheduler.max_batched_tokens, "Tokens per forward pass")
      ->capture_default_str();
  app.add_option("--max-prefill-chunk", o->scheduler.max_prefill_chunk,
                 "Prompt tokens one sequence computes per step (chunked prefill; 0: whole prompt)")
      ->capture_default_str();
  app.add_flag("--prefix-caching,!--no-prefix-caching", o->prefix_caching,
               "Reuse the K/V of cached prompt prefixes")
      ->capture_default_str();
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
  auto server = http::HttpServer::Create(o, metrics);
  if (!server.ok()) return server.status();
  if (mount) mount(server->get());
  if (auto st = (*server)->Listen(); !st.ok()) return st;
  return server;
}

void ExportEngineStats(const engine::EngineStats& s, int64_t kv_transfer_bytes,
                       int64_t kv_transfer_failures, int64_t kv_comm_rebuilds,
                       metrics::Metrics* m) {
  metrics::WorkerGauges g;
  g.running = s.running;
  g.waiting = s.waiting;
  if (s.blocks.num_blocks > 0) {
    g.kv_usage = static_cast<double>(s.blocks.used_blocks) / s.blocks.num_blocks;
  }
  m->SetWorkerGauges(g);
  metrics::WorkerTotals t;
  t.prefix_queries = s.blocks.prefix_query_tokens;
  t.prefix_hits = s.blocks.prefix_hit_tokens;
  t.preemptions = s.preemptions;
  t.kv_transfer_bytes = kv_transfer_bytes;
  t.kv_transfer_failures = kv_transfer_failures;
  t.kv_comm_rebuilds = kv_comm_rebuilds;
  m->SyncTotals(t);
}

void ServeUntilSignal(const std::string& name, RpcServer* server, const ServerFlags& f,
                      const HttpDrain& http) {
  const int sig = WaitForTerminationSignal();
  std::fprintf(stderr, "%s: signal %d, draining (up to %d ms)\n", name.c_str(), sig,
               f.drain_timeout_ms);
  const auto until =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(f.drain_timeout_ms);
  server->SetReady(false);
  if (http.server != nullptr) http.server->SetReady(false);
  server->Shutdown(std::chrono::milliseconds(f.drain_timeout_ms));
  if (http.server == nullptr) return;
  while (http.idle && !http.idle() && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (http.cancel_all) http.cancel_all();
  http.server->Stop();
}

}  // namespace tandem::rpc
