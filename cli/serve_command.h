// `tandem serve`: a whole cluster on loopback — the router plus P prefill and D decode
// workers as child processes — supervised until SIGINT/SIGTERM.
//
// Startup: workers first (each on a free port it reports through a port file), then
// the router pointed at them; "ready" is printed once the router has healthy workers.
// Workers bind to --worker-host (loopback by default) with an HTTP port each for
// /metrics; --endpoints-file lists every process's ports. A child that dies is restarted on its old
// port (the router's health polling picks it up again). Shutdown: the router drains (stops
// accepting calls, lets running ones finish up to --drain-timeout-ms), then the workers stop.
#ifndef TANDEM_CLI_SERVE_COMMAND_H_
#define TANDEM_CLI_SERVE_COMMAND_H_

#include <cstdint>
#include <string>

#include "CLI/CLI.hpp"
#include "common/kv/kv_layout.h"
#include "common/util/tls_files.h"
#include "kernels/backend.h"

namespace tandem::cli {

struct ServeOptions {
  std::string model;
  int prefill_workers = 1;
  int decode_workers = 1;
  std::string host = "127.0.0.1";         // the router's gRPC and HTTP ports
  std::string worker_host = "127.0.0.1";  // the workers' ports (internal)
  int grpc_port = 50051;
  int http_port = 8000;  // OpenAI API, /health, /metrics; -1: none, 0: any free port
  std::string api_key;   // --api-key / $TANDEM_API_KEY, on every process
  TlsFiles tls;          // the router's public ports
  std::string metrics_prefix = "tandem:";
  std::string served_model_name;
  std::string endpoints_file;  // JSON: every process's ports, once ready
  int threads_per_worker = 0;  // 0: every worker may use every core, prefill at lower priority
  // 0: 512 MiB per decode worker and 256 MiB per prefill worker, or more where one
  // request of --max-model-len tokens needs more. Set explicitly, a pool too small for
  // one such request is refused at start.
  int64_t decode_kv_cache_bytes = 0;
  int64_t prefill_kv_cache_bytes = 0;
  int64_t max_model_len = 0;  // 0: the model's context length
  int drain_timeout_ms = 10000;
  int http_threads = 4;                        // serve the router's HTTP connections
  int http_max_connections = 4096;             // the router's HTTP connections open at once
  int http_max_connections_per_client = 1024;  // … from one client address (0: no bound)
  int max_restarts = 5;          // quick deaths in a row of one child before serve gives up
  int restart_backoff_ms = 500;  // the pause before the first restart; doubles per quick death
  int max_queued_requests = 256;
  int64_t priority_max_wait_ms = 10000;        // router
  bool prefix_caching = true;                  // on every worker
  std::string routing_policy = "cache_aware";  // router
  // Router: prompts with fewer uncached tokens prefill on their decode worker. Its
  // workers share one machine's cores, so a prefill worker saves the decode worker no
  // compute and costs a KV transfer (docs/performance.md, "Selective disaggregation").
  int64_t disagg_min_tokens = 1024;
  std::string tool_call_parser = "auto";  // router
  std::string speculative;  // decode workers (unset: draft with a draft_model, else off)
  std::string draft_model;  // decode workers (--speculative draft)
  int32_t num_speculative_tokens = 4;
  int32_t max_prefill_chunk = 512;                        // prefill workers
  std::string device = "cpu";                             // every worker's --device
  int gpu = 0;                                            // every worker's --gpu
  bool batch_invariant = false;                           // every worker's --batch-invariant
  kv::KvDtype kv_dtype = kv::KvDtype::kF32;               // every worker's --kv-dtype
  kernels::CpuMath cpu_math = kernels::DefaultCpuMath();  // every worker's --cpu-math
  std::string bin_dir;  // default: the directory of this executable
};

void AddServeCommand(CLI::App& app, ServeOptions* options);
int RunServe(const ServeOptions& options);

}  // namespace tandem::cli

#endif  // TANDEM_CLI_SERVE_COMMAND_H_
