#include "cli/serve_command.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <fstream>
#include <thread>
#include <vector>

#include "cli/exit_status.h"
#include "common/rpc/router_probe.h"
#include "common/util/signals.h"
#include "common/util/strings.h"
#include "common/util/subprocess.h"

namespace tandem::cli {

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

struct Child {
  std::string name;  // "prefill-0", "decode-1", "router"
  std::vector<std::string> args;
  std::string port_file;
  int port = 0;
  Subprocess process;
};

std::string SelfDir() {
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  return ec ? "." : exe.parent_path().string();
}

}  // namespace

void AddServeCommand(CLI::App& app, ServeOptions* o) {
  CLI::App* cmd =
      app.add_subcommand("serve", "Run a local cluster: router + prefill + decode workers");
  cmd->add_option("--model,-m", o->model, "GGUF model")->required();
  cmd->add_option("--prefill-workers", o->prefill_workers)
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  cmd->add_option("--decode-workers", o->decode_workers)
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  cmd->add_option("--host", o->host, "Address the router listens on")->capture_default_str();
  cmd->add_option("--grpc-port", o->grpc_port, "Router gRPC port (0: any free port)")
      ->capture_default_str();
  cmd->add_option("--threads-per-worker", o->threads_per_worker,
                  "Compute threads per worker (0: the cores shared out)")
      ->capture_default_str();
  cmd->add_option("--kv-cache-bytes", o->decode_kv_cache_bytes, "KV cache per decode worker")
      ->capture_default_str();
  cmd->add_option("--prefill-kv-cache-bytes", o->prefill_kv_cache_bytes,
                  "KV cache per prefill worker")
      ->capture_default_str();
  cmd->add_option("--drain-timeout-ms", o->drain_timeout_ms,
                  "On SIGINT/SIGTERM, how long running requests may take to finish")
      ->capture_default_str();
  cmd->add_option("--max-queued-requests", o->max_queued_requests)->capture_default_str();
  cmd->add_flag("--prefix-caching,!--no-prefix-caching", o->prefix_caching,
                "Reuse cached prompt prefixes on the workers")
      ->capture_default_str();
  cmd->add_option("--routing-policy", o->routing_policy,
                  "Prefill worker choice: round_robin, least_loaded, cache_aware")
      ->capture_default_str();
  cmd->add_option("--max-prefill-chunk", o->max_prefill_chunk,
                  "Prompt tokens one sequence computes per step (chunked prefill; 0: whole prompt)")
      ->capture_default_str();
  cmd->add_option("--bin-dir", o->bin_dir,
                  "Where the tandem-* binaries are (default: beside this one)");
}

int RunServe(const ServeOptions& o) {
  BlockTerminationSignals();  // before any thread starts; waited for below
  const std::string bin = o.bin_dir.empty() ? SelfDir() : o.bin_dir;
  char tmpl[] = "/tmp/tandem-serve-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) return Fail(absl::InternalError("cannot create a temp directory"));
  const std::string run_dir = tmpl;
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int threads = o.threads_per_worker > 0
                          ? o.threads_per_worker
                          : std::max(1, cores / (o.prefill_workers + o.decode_workers));

  std::deque<Child> workers;
  auto add_worker = [&](const std::string& role, int i, int64_t kv_bytes) {
    Child& c = workers.emplace_back();
    c.name = StrCat(role, "-", i);
    c.port_file = StrCat(run_dir, "/", c.name, ".port");
    c.args = {StrCat(bin, "/tandem-", role, "-worker"),
              "--model",
              o.model,
              "--host",
              "127.0.0.1",
              "--port",
              "0",
              "--port-file",
              c.port_file,
              "--threads",
              std::to_string(threads),
              "--kv-cache-bytes",
              std::to_string(kv_bytes),
              o.prefix_caching ? "--prefix-caching" : "--no-prefix-caching",
              "--max-prefill-chunk",
              std::to_string(o.max_prefill_chunk)};
  };
  for (int i = 0; i < o.prefill_workers; ++i) add_worker("prefill", i, o.prefill_kv_cache_bytes);
  for (int i = 0; i < o.decode_workers; ++i) add_worker("decode", i, o.decode_kv_cache_bytes);

  auto stop_all = [&](Child* router) {
    if (router != nullptr)
      router->process.Stop(std::chrono::milliseconds(o.drain_timeout_ms + 5000));
    for (Child& c : workers) c.process.Stop(std::chrono::milliseconds(5000));
    std::error_code ec;
    fs::remove_all(run_dir, ec);
  };

  for (Child& c : workers) c.process.Start(c.args);
  std::vector<std::string> prefill_addrs, decode_addrs;
  for (Child& c : workers) {
    c.port = WaitForPortFile(c.port_file, &c.process, std::chrono::seconds(60));
    if (c.port == 0) {
      stop_all(nullptr);
      return Fail(
          absl::UnavailableError(StrCat(c.name, " did not start (see its messages above)")));
    }
    // From now on the worker keeps its port, across restarts.
    auto port_arg = std::find(c.args.begin(), c.args.end(), "--port");
    *(port_arg + 1) = std::to_string(c.port);
    (c.name.starts_with("prefill") ? prefill_addrs : decode_addrs)
        .push_back(StrCat("127.0.0.1:", c.port));
  }

  Child router;
  router.name = "router";
  router.port_file = run_dir + "/router.port";
  router.args = {StrCat(bin, "/tandem-router"),
                 "--model",
                 o.model,
                 "--host",
                 o.host,
                 "--port",
                 std::to_string(o.grpc_port),
                 "--port-file",
                 router.port_file,
                 "--prefill",
                 Join(prefill_addrs, ","),
                 "--decode",
                 Join(decode_addrs, ","),
                 "--drain-timeout-ms",
                 std::to_string(o.drain_timeout_ms),
                 "--max-queued-requests",
                 std::to_string(o.max_queued_requests),
                 "--routing-policy",
                 o.routing_policy};
  router.process.Start(router.args);
  router.port = WaitForPortFile(router.port_file, &router.process, std::chrono::seconds(60));
  if (router.port == 0) {
    stop_all(&router);
    return Fail(absl::UnavailableError("the router did not start (see its messages above)"));
  }
  *(std::find(router.args.begin(), router.args.end(), "--port") + 1) = std::to_string(router.port);
  const std::string endpoint = StrCat(o.host == "0.0.0.0" ? "127.0.0.1" : o.host, ":", router.port);
  if (!rpc::WaitForRouterReady(endpoint, std::chrono::seconds(120))) {
    stop_all(&router);
    return Fail(absl::UnavailableError("the cluster did not become ready within 120 s"));
  }
  std::printf("tandem serve ready: gRPC %s  (prefill %s; decode %s; %d threads per worker)\n",
              endpoint.c_str(), Join(prefill_addrs, ",").c_str(), Join(decode_addrs, ",").c_str(),
              threads);
  std::printf("  try: tandem client --endpoint %s --prompt \"Hello\" --chat\n", endpoint.c_str());
  std::fflush(stdout);

  // Supervise: restart what dies, until a termination signal.
  std::vector<Child*> all;
  for (Child& c : workers) all.push_back(&c);
  all.push_back(&router);
  const sigset_t term = TerminationSignals();
  const timespec tick{0, 100 * 1000 * 1000};
  for (;;) {
    const int sig = sigtimedwait(&term, nullptr, &tick);
    if (sig == SIGINT || sig == SIGTERM) break;
    for (Child* c : all) {
      const pid_t pid = c->process.pid();
      if (auto status = c->process.Poll()) {
        std::fprintf(stderr, "tandem serve: %s (pid %d) died (%s %d); restarting it on port %d\n",
                     c->name.c_str(), pid, WIFSIGNALED(*status) ? "signal" : "exit code",
                     WIFSIGNALED(*status) ? WTERMSIG(*status) : WEXITSTATUS(*status), c->port);
        c->process.Start(c->args);
      }
    }
  }
  std::fprintf(stderr, "tandem serve: draining (up to %d ms), then stopping the workers\n",
               o.drain_timeout_ms);
  stop_all(&router);
  std::fprintf(stderr, "tandem serve: stopped\n");
  return 0;
}

}  // namespace tandem::cli
