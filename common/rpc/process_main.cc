#include "common/rpc/process_main.h"

#include <cstdio>
#include <fstream>

#include "common/util/signals.h"
#include "common/util/strings.h"

namespace tandem::rpc {

void AddServerFlags(CLI::App& app, ServerFlags* f) {
  app.add_option("--model,-m", f->model, "GGUF model")->required();
  app.add_option("--host", f->host, "Address to listen on")->capture_default_str();
  app.add_option("--port", f->port, "Port (0: any free port)")->capture_default_str();
  app.add_option("--port-file", f->port_file, "Write the bound port here once listening");
  app.add_option("--drain-timeout-ms", f->drain_timeout_ms,
                 "On SIGTERM, how long running calls may take to finish")
      ->capture_default_str();
}

void AddEngineFlags(CLI::App& app, engine::EngineOptions* o) {
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

absl::Status AnnounceListening(const std::string& name, const ServerFlags& f, int port) {
  if (!f.port_file.empty()) {
    const std::string tmp = f.port_file + ".tmp";
    {
      std::ofstream out(tmp);
      out << port << "\n";
      if (!out) return absl::InternalError(StrCat("cannot write ", tmp));
    }
    if (std::rename(tmp.c_str(), f.port_file.c_str()) != 0) {
      return absl::InternalError(StrCat("cannot write ", f.port_file));
    }
  }
  std::fprintf(stderr, "%s listening on %s:%d\n", name.c_str(), f.host.c_str(), port);
  return absl::OkStatus();
}

void ServeUntilSignal(const std::string& name, RpcServer* server, const ServerFlags& f) {
  const int sig = WaitForTerminationSignal();
  std::fprintf(stderr, "%s: signal %d, draining (up to %d ms)\n", name.c_str(), sig,
               f.drain_timeout_ms);
  server->SetReady(false);
  server->Shutdown(std::chrono::milliseconds(f.drain_timeout_ms));
}

}  // namespace tandem::rpc
