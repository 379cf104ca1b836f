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
#include <functional>
#include <optional>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cli/exit_status.h"
#include "cli/log_relay.h"
#include "common/engine/model_weights.h"
#include "common/kv/kv_layout.h"
#include "common/model/gguf_file.h"
#include "common/model/hf_directory.h"
#include "common/model/model_config.h"
#include "common/rpc/process_main.h"
#include "common/rpc/worker_main.h"
#include "common/util/signals.h"
#include "common/util/strings.h"
#include "common/util/subprocess.h"
#include "nlohmann/json.hpp"

namespace tandem::cli {

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// How long a restarted child must stay up before its crashes stop counting as a loop.
constexpr auto kStableUptime = std::chrono::seconds(60);
constexpr auto kMaxRestartBackoff = std::chrono::seconds(30);
// How much lower in OS priority prefill workers run when workers share the cores: at
// nice 10 a busy thread gets about a tenth of a core against a nice-0 one (CFS weights
// 110 against 1024).
constexpr int kPrefillNice = 10;
// Tokens the decode workers' KV pools hold by default (--kv-cache-bytes 0).
constexpr int64_t kDecodeKvTokens = 16384;

struct Child {
  std::string name;  // "prefill-0", "decode-1", "router"
  std::vector<std::string> args;
  std::string port_file;
  std::string log;  // its stdout and stderr, relayed to ours
  int port = 0;
  int http_port = 0;
  Subprocess process;
  Clock::time_point started;
  int nice = 0;          // OS niceness added at start (prefill workers: decode keeps priority)
  int quick_deaths = 0;  // in a row, each within kStableUptime of its start
  std::optional<Clock::time_point> restart_at;  // dead, to be restarted then
};

std::string SelfDir() {
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  return ec ? "." : exe.parent_path().string();
}

// "exit code N" or "signal N", from a wait status.
std::string HowItEnded(int status) {
  return StrCat(WIFSIGNALED(status) ? "signal " : "exit code ",
                WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
}

// Start-up: waits until `done()` holds while watching every child in `children` and
// the termination signals (blocked, so taken here with sigtimedwait). A child that
// exits first fails start-up at once, with its last messages; SIGINT or SIGTERM gives
// Cancelled; `timeout` passing gives Unavailable naming `what`.
absl::Status AwaitStartUp(const std::vector<Child*>& children, LogRelay* relay,
                          std::chrono::seconds timeout, const std::string& what,
                          const std::function<bool()>& done) {
  const sigset_t term = TerminationSignals();
  const timespec tick{0, 20 * 1000 * 1000};
  const auto until = Clock::now() + timeout;
  for (;;) {
    if (done()) return absl::OkStatus();
    for (Child* c : children) {
      const std::optional<int> status = c->process.Poll();
      if (!status.has_value()) continue;
      const std::string last = relay->LastLines(c->name, 5);
      return absl::UnavailableError(StrCat(c->name, " exited during start-up (",
                                           HowItEnded(*status), "); its last messages:\n",
                                           last.empty() ? std::string("(none)") : last));
    }
    if (Clock::now() >= until) {
      return absl::UnavailableError(StrCat(what, " within ", timeout.count(), " s"));
    }
    const int sig = sigtimedwait(&term, nullptr, &tick);
    if (sig == SIGINT || sig == SIGTERM) {
      return absl::CancelledError(StrCat("signal ", sig, " during start-up"));
    }
  }
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
  cmd->add_option("--worker-host", o->worker_host,
                  "Address the workers listen on (internal; loopback keeps them private)")
      ->capture_default_str();
  cmd->add_option("--grpc-port", o->grpc_port, "Router gRPC port (0: any free port)")
      ->capture_default_str();
  cmd->add_option("--http-port", o->http_port,
                  "Router HTTP port: OpenAI API, /health, /metrics (0: any free port, -1: none)")
      ->capture_default_str();
  cmd->add_option("--api-key", o->api_key,
                  "Require this key on every call, on every process (probes and /metrics "
                  "stay open)")
      ->envname("TANDEM_API_KEY");
  cmd->add_option("--tls-cert", o->tls.cert, "PEM certificate: the router serves TLS");
  cmd->add_option("--tls-key", o->tls.key, "PEM private key of --tls-cert");
  cmd->add_option("--tls-client-ca", o->tls.client_ca,
                  "PEM CA bundle: the router requires client certificates signed by it");
  cmd->add_option("--metrics-prefix", o->metrics_prefix, "Prometheus metric name prefix")
      ->capture_default_str();
  cmd->add_option("--served-model-name", o->served_model_name,
                  "The model's name in the API and metrics (default: the file name without .gguf)");
  cmd->add_option("--endpoints-file", o->endpoints_file,
                  "Once ready, write every process's gRPC and HTTP ports here (JSON)");
  cmd->add_option("--threads-per-worker", o->threads_per_worker,
                  "Compute threads per worker (0: every worker may use every core, prefill "
                  "workers at a lower OS priority so that decode keeps priority; N: N each, "
                  "all at one priority)")
      ->capture_default_str();
  cmd->add_option("--kv-cache-bytes", o->decode_kv_cache_bytes,
                  "KV cache per decode worker (0: room for 16,384 tokens and at least 512 MiB, "
                  "or what one --max-model-len request needs if more)")
      ->capture_default_str();
  cmd->add_option("--prefill-kv-cache-bytes", o->prefill_kv_cache_bytes,
                  "KV cache per prefill worker (0: 256 MiB, or what one --max-model-len request "
                  "needs if more)")
      ->capture_default_str();
  cmd->add_option("--max-model-len", o->max_model_len,
                  "Longest request (prompt + max_tokens) served and advertised (0: the model's "
                  "context length)")
      ->capture_default_str();
  cmd->add_option("--drain-timeout-ms", o->drain_timeout_ms,
                  "On SIGINT/SIGTERM, how long running requests may take to finish")
      ->capture_default_str();
  cmd->add_option("--max-queued-requests", o->max_queued_requests)->capture_default_str();
  cmd->add_option("--priority-max-wait-ms", o->priority_max_wait_ms,
                  "A queued request that has waited this long goes before every request that "
                  "has not, whatever their priority")
      ->check(CLI::Range(int64_t{1}, int64_t{86400000}))
      ->capture_default_str();
  cmd->add_option("--http-threads", o->http_threads,
                  "Threads serving the router's HTTP connections (an open stream holds none)")
      ->capture_default_str();
  cmd->add_option("--http-max-connections", o->http_max_connections,
                  "The router's HTTP connections open at once (past it: 503 with Retry-After)")
      ->capture_default_str();
  cmd->add_option("--http-max-connections-per-client", o->http_max_connections_per_client,
                  "… from one client address (0: no bound, e.g. behind a proxy)")
      ->capture_default_str();
  cmd->add_flag("--prefix-caching,!--no-prefix-caching", o->prefix_caching,
                "Reuse cached prompt prefixes on the workers")
      ->capture_default_str();
  cmd->add_option("--routing-policy", o->routing_policy,
                  "Prefill worker choice: round_robin, least_loaded, cache_aware")
      ->capture_default_str();
  cmd->add_option("--disagg-min-tokens", o->disagg_min_tokens,
                  "Prompts with fewer uncached tokens than this on their decode worker are "
                  "prefilled there, without a prefill worker or a KV transfer (0: every prompt "
                  "goes to a prefill worker)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 24))
      ->capture_default_str();
  cmd->add_option("--speculative", o->speculative,
                  "Speculative decoding on the decode workers: ngram (prompt lookup), draft "
                  "(--draft-model) or off")
      ->check(CLI::IsMember({"ngram", "draft", "off"}))
      ->default_str("draft with --draft-model, else off");
  cmd->add_option("--draft-model", o->draft_model,
                  "GGUF file of a smaller model with the same vocabulary that drafts tokens on "
                  "the decode workers (implies --speculative draft)")
      ->check(CLI::ExistingFile);
  cmd->add_option("--num-speculative-tokens", o->num_speculative_tokens,
                  "Most tokens one draft proposes (adapted per sequence)")
      ->check(CLI::Range(1, 16))
      ->capture_default_str();
  cmd->add_option("--tool-call-parser", o->tool_call_parser,
                  "How the model writes tool calls: hermes, llama3_json, mistral, or auto (from "
                  "its chat template)")
      ->capture_default_str();
  cmd->add_option("--max-prefill-chunk", o->max_prefill_chunk,
                  "Prompt tokens one sequence computes per step (chunked prefill; 0: whole prompt)")
      ->capture_default_str();
  rpc::AddDeviceFlags(*cmd, &o->device, &o->gpu, &o->batch_invariant, &o->kv_dtype, &o->cpu_math);
  cmd->add_option("--max-restarts", o->max_restarts,
                  "A process that dies within 60 s of starting this many times in a row stops "
                  "the cluster (non-zero exit, its last messages)")
      ->check(CLI::Range(0, 1000))
      ->capture_default_str();
  cmd->add_option("--restart-backoff-ms", o->restart_backoff_ms,
                  "Pause before restarting a dead process; doubles per quick death, up to 30 s")
      ->check(CLI::Range(1, 600000))
      ->capture_default_str();
  cmd->add_option("--bin-dir", o->bin_dir,
                  "Where the tandem-* binaries are (default: beside this one)");
}

// The KV pools every worker gets: the defaults, raised where one request of the longest
// length served needs more; a pool set explicitly below that is refused, so the
// advertised max_model_len is one the cluster can serve.
struct KvPools {
  int64_t max_model_len = 0, prefill_bytes = 0, decode_bytes = 0;
};
absl::StatusOr<KvPools> SizeKvPools(const ServeOptions& o) {
  // The header only: no tokenizer, and not the whole-file hash (which would read every
  // byte of the model once more before the workers do).
  auto file = model::OpenModel(o.model);
  if (!file.ok()) return file.status();
  auto config = model::ModelConfig::FromGguf(**file);
  if (!config.ok()) return config.status();
  const model::ModelConfig& c = *config;
  // Every check a worker's load makes (each tensor present, of its shape and of a type
  // tandem decodes), converting nothing: a model no worker could load is refused here,
  // in seconds, with the reason, rather than by workers that fail and restart.
  if (auto fits = engine::ModelWeights::Check(**file, c); !fits.ok()) return fits.status();
  KvPools p;
  p.max_model_len = o.max_model_len > 0 ? o.max_model_len : c.context_length;
  if (o.max_model_len < 0 || p.max_model_len > static_cast<int64_t>(c.context_length)) {
    return absl::InvalidArgumentError(StrCat("--max-model-len: ", o.max_model_len,
                                             " is outside 1 .. ", c.context_length,
                                             " (the model's context length); 0 means all of it"));
  }
  const kv::KvLayout layout{static_cast<int32_t>(c.n_layers), static_cast<int32_t>(c.n_kv_heads),
                            static_cast<int32_t>(c.head_dim), kv::KvLayout{}.block_size,
                            o.kv_dtype};
  const int64_t bs = layout.block_size;
  // The prefill worker holds prompt + first token; the decode worker the whole request.
  const int64_t need = (p.max_model_len + 1 + bs - 1) / bs * layout.BlockBytes();
  auto size = [&](int64_t given, int64_t fallback,
                  std::string_view flag) -> absl::StatusOr<int64_t> {
    if (given == 0) return std::max(fallback, need);
    if (given < need) {
      return absl::InvalidArgumentError(
          StrCat(flag, " ", given, ": holds ", given / layout.BlockBytes() * bs,
                 " tokens, fewer than one ", p.max_model_len,
                 "-token request needs (--max-model-len); give at least ", need, " (",
                 layout.BytesPerToken(), " bytes per token), or lower --max-model-len"));
    }
    return given;
  };
  auto prefill = size(o.prefill_kv_cache_bytes, int64_t{256} << 20, "--prefill-kv-cache-bytes");
  if (!prefill.ok()) return prefill.status();
  // The decode pool holds kDecodeKvTokens tokens (16 requests of 1,024, as
  // `llama-server -np 16 -c 16384` does), and at least 512 MiB; pages are touched only
  // as blocks are first used.
  auto decode = size(o.decode_kv_cache_bytes,
                     std::max(int64_t{512} << 20, kDecodeKvTokens * layout.BytesPerToken()),
                     "--kv-cache-bytes");
  if (!decode.ok()) return decode.status();
  p.prefill_bytes = *prefill;
  p.decode_bytes = *decode;
  return p;
}

int RunServe(const ServeOptions& o) {
  BlockTerminationSignals();  // before any thread starts; waited for below
  const absl::StatusOr<KvPools> pools = SizeKvPools(o);
  if (!pools.ok()) return Fail(pools.status());
  const std::string bin = o.bin_dir.empty() ? SelfDir() : o.bin_dir;
  char tmpl[] = "/tmp/tandem-serve-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) return Fail(absl::InternalError("cannot create a temp directory"));
  const std::string run_dir = tmpl;
  // Children read the keys from the environment, so they never show in a process list.
  if (!o.api_key.empty()) setenv("TANDEM_API_KEY", o.api_key.c_str(), 1);
  // The processes require a key of each other, API key or not: a random one, known only
  // to them, so that nobody else on the host can call a worker (Release a lease, make a
  // prefill worker push KV to an address of their choosing).
  rpc::EnsureInternalKey();
  // Workers on one machine share its cores. By default each may use all of them: one
  // with work while the other idles (its pool sleeps after ~1 ms) gets the whole
  // machine, so a lone stream decodes as fast as `tandem generate`; when both have work
  // the prefill workers, started kPrefillNice lower in OS priority, yield the cores to
  // decode (docs/architecture.md, "Sharing one machine").
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const bool share = o.threads_per_worker <= 0 && o.device != "cuda";
  const int threads = o.threads_per_worker > 0 ? o.threads_per_worker : cores;

  std::deque<Child> workers;
  auto add_worker = [&](const std::string& role, int i, int64_t kv_bytes) {
    Child& c = workers.emplace_back();
    c.name = StrCat(role, "-", i);
    if (share && role == "prefill") c.nice = kPrefillNice;
    c.port_file = StrCat(run_dir, "/", c.name, ".port");
    c.log = StrCat(run_dir, "/", c.name, ".log");
    c.args = {StrCat(bin, "/tandem-", role, "-worker"),
              "--model",
              o.model,
              "--host",
              o.worker_host,
              "--port",
              "0",
              "--http-port",
              "0",
              "--port-file",
              c.port_file,
              "--metrics-prefix",
              o.metrics_prefix,
              "--threads",
              std::to_string(threads),
              "--kv-cache-bytes",
              std::to_string(kv_bytes),
              o.prefix_caching ? "--prefix-caching" : "--no-prefix-caching",
              "--max-prefill-chunk",
              std::to_string(o.max_prefill_chunk),
              "--device",
              o.device,
              "--gpu",
              std::to_string(o.gpu),
              "--kv-dtype",
              std::string(kv::KvDtypeName(o.kv_dtype)),
              "--cpu-math",
              std::string(kernels::CpuMathName(o.cpu_math))};
    if (!o.served_model_name.empty()) {
      c.args.insert(c.args.end(), {"--served-model-name", o.served_model_name});
    }
    if (o.batch_invariant) c.args.push_back("--batch-invariant");
    if (role == std::string_view("decode")) {
      c.args.insert(c.args.end(),
                    {"--num-speculative-tokens", std::to_string(o.num_speculative_tokens)});
      if (!o.speculative.empty()) c.args.insert(c.args.end(), {"--speculative", o.speculative});
      if (!o.draft_model.empty()) c.args.insert(c.args.end(), {"--draft-model", o.draft_model});
    }
  };
  for (int i = 0; i < o.prefill_workers; ++i) add_worker("prefill", i, pools->prefill_bytes);
  for (int i = 0; i < o.decode_workers; ++i) add_worker("decode", i, pools->decode_bytes);

  LogRelay relay;
  auto start = [&relay](Child* c) {
    relay.Add(c->name, c->log);
    c->process.Start(c->args, c->log, c->nice);
    c->started = Clock::now();
  };
  auto stop_all = [&](Child* router) {
    if (router != nullptr)
      router->process.Stop(std::chrono::milliseconds(o.drain_timeout_ms + 5000));
    for (Child& c : workers) c.process.Stop(std::chrono::milliseconds(5000));
    relay.Stop();  // the last of their messages, before the files go
    std::error_code ec;
    fs::remove_all(run_dir, ec);
  };

  // Start-up fails at once when any child exits before the cluster is ready, and a
  // termination signal stops it at any point (exit 0, as after a drain).
  std::vector<Child*> started;
  auto start_up_failed = [&](Child* router, const absl::Status& st) {
    stop_all(router);
    if (absl::IsCancelled(st)) {
      std::fprintf(stderr, "tandem serve: %s; stopped\n", std::string(st.message()).c_str());
      return 0;
    }
    return Fail(st);
  };
  for (Child& c : workers) {
    start(&c);
    started.push_back(&c);
  }
  std::vector<std::string> prefill_addrs, decode_addrs;
  const std::string worker_addr = o.worker_host == "0.0.0.0" ? "127.0.0.1" : o.worker_host;
  for (Child& c : workers) {
    const absl::Status up =
        AwaitStartUp(started, &relay, std::chrono::seconds(60), StrCat(c.name, " did not listen"),
                     [&c] { return (c.port = ReadPort(c.port_file)) > 0; });
    if (!up.ok()) return start_up_failed(nullptr, up);
    // From now on the worker keeps its ports, across restarts.
    c.http_port = ReadSecondPort(c.port_file);
    *(std::find(c.args.begin(), c.args.end(), "--port") + 1) = std::to_string(c.port);
    *(std::find(c.args.begin(), c.args.end(), "--http-port") + 1) = std::to_string(c.http_port);
    (c.name.starts_with("prefill") ? prefill_addrs : decode_addrs)
        .push_back(StrCat(worker_addr, ":", c.port));
  }

  Child router;
  router.name = "router";
  router.port_file = run_dir + "/router.port";
  router.log = run_dir + "/router.log";
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
                 "--priority-max-wait-ms",
                 std::to_string(o.priority_max_wait_ms),
                 "--routing-policy",
                 o.routing_policy,
                 "--disagg-min-tokens",
                 std::to_string(o.disagg_min_tokens),
                 "--tool-call-parser",
                 o.tool_call_parser,
                 "--http-port",
                 std::to_string(o.http_port),
                 "--http-threads",
                 std::to_string(o.http_threads),
                 "--http-max-connections",
                 std::to_string(o.http_max_connections),
                 "--http-max-connections-per-client",
                 std::to_string(o.http_max_connections_per_client),
                 "--metrics-prefix",
                 o.metrics_prefix,
                 "--ready-file",
                 run_dir + "/router.ready",
                 "--max-model-len",
                 std::to_string(pools->max_model_len)};
  if (!o.served_model_name.empty()) {
    router.args.insert(router.args.end(), {"--served-model-name", o.served_model_name});
  }
  if (o.tls.enabled()) router.args.insert(router.args.end(), {"--tls-cert", o.tls.cert});
  if (!o.tls.key.empty()) router.args.insert(router.args.end(), {"--tls-key", o.tls.key});
  if (!o.tls.client_ca.empty()) {
    router.args.insert(router.args.end(), {"--tls-client-ca", o.tls.client_ca});
  }
  start(&router);
  started.push_back(&router);
  absl::Status up =
      AwaitStartUp(started, &relay, std::chrono::seconds(60), "the router did not listen",
                   [&router] { return (router.port = ReadPort(router.port_file)) > 0; });
  if (!up.ok()) return start_up_failed(&router, up);
  router.http_port = ReadSecondPort(router.port_file);
  *(std::find(router.args.begin(), router.args.end(), "--port") + 1) = std::to_string(router.port);
  *(std::find(router.args.begin(), router.args.end(), "--http-port") + 1) =
      std::to_string(router.http_port > 0 ? router.http_port : -1);
  const std::string host = o.host == "0.0.0.0" ? "127.0.0.1" : o.host;
  const std::string endpoint = StrCat(host, ":", router.port);
  up = AwaitStartUp(started, &relay, std::chrono::seconds(120), "the cluster did not become ready",
                    [&] { return std::ifstream(run_dir + "/router.ready").good(); });
  if (!up.ok()) return start_up_failed(&router, up);
  const std::string http_url =
      router.http_port > 0
          ? StrCat(o.tls.enabled() ? "https://" : "http://", host, ":", router.http_port)
          : "";
  std::vector<Child*> all = {&router};
  for (Child& c : workers) all.push_back(&c);
  if (!o.endpoints_file.empty()) {
    nlohmann::json procs = nlohmann::json::array();
    for (const Child* c : all) {
      procs.push_back({{"name", c->name},
                       {"grpc_port", c->port},
                       {"http_port", c->http_port},
                       {"pid", c->process.pid()}});
    }
    const std::string tmp = o.endpoints_file + ".tmp";
    std::ofstream(tmp) << nlohmann::json{{"grpc", endpoint},
                                         {"http", http_url},
                                         {"processes", procs}}
                       << "\n";
    std::rename(tmp.c_str(), o.endpoints_file.c_str());
  }
  std::printf("tandem serve ready: gRPC %s%s%s  (prefill %s; decode %s; %d threads per worker)\n",
              endpoint.c_str(), http_url.empty() ? "" : ", HTTP ", http_url.c_str(),
              Join(prefill_addrs, ",").c_str(), Join(decode_addrs, ",").c_str(), threads);
  std::printf("  try: tandem client --endpoint %s --prompt \"Hello\" --chat\n", endpoint.c_str());
  if (!http_url.empty()) {
    std::printf(
        "   or: curl %s/v1/chat/completions -H 'Content-Type: application/json' -d "
        "'{\"messages\": [{\"role\": \"user\", \"content\": \"Hello\"}]}'\n",
        http_url.c_str());
  }
  std::fflush(stdout);

  // Supervise: restart what dies, until a termination signal. A child that keeps dying
  // soon after it starts is restarted after a growing pause, and past --max-restarts
  // such deaths in a row the cluster stops with its last error.
  const sigset_t term = TerminationSignals();
  const timespec tick{0, 100 * 1000 * 1000};
  for (;;) {
    const int sig = sigtimedwait(&term, nullptr, &tick);
    if (sig == SIGINT || sig == SIGTERM) break;
    const auto now = Clock::now();
    for (Child* c : all) {
      if (c->restart_at.has_value()) {
        if (now < *c->restart_at) continue;
        c->restart_at.reset();
        start(c);
        continue;
      }
      const pid_t pid = c->process.pid();
      const auto status = c->process.Poll();
      if (!status.has_value()) continue;
      const double up_s = std::chrono::duration<double>(now - c->started).count();
      c->quick_deaths = now - c->started < kStableUptime ? c->quick_deaths + 1 : 1;
      const std::string how = HowItEnded(*status);
      if (c->quick_deaths > o.max_restarts) {
        const std::string last = relay.LastLines(c->name);
        std::fprintf(stderr,
                     "tandem serve: %s died %d times in a row, each within %lld s of starting "
                     "(the last: %s after %.1f s); giving up (--max-restarts %d)\n",
                     c->name.c_str(), c->quick_deaths,
                     static_cast<long long>(
                         std::chrono::duration_cast<std::chrono::seconds>(kStableUptime).count()),
                     how.c_str(), up_s, o.max_restarts);
        stop_all(&router);
        return Fail(absl::UnavailableError(StrCat(c->name, " keeps dying; its last messages:\n",
                                                  last.empty() ? std::string("(none)") : last)));
      }
      const auto backoff =
          std::min<Clock::duration>(std::chrono::milliseconds(o.restart_backoff_ms) *
                                        (1LL << std::min(c->quick_deaths - 1, 20)),
                                    kMaxRestartBackoff);
      std::fprintf(stderr,
                   "tandem serve: %s (pid %d) died (%s) after %.1f s; restarting it on port %d in "
                   "%lld ms\n",
                   c->name.c_str(), pid, how.c_str(), up_s, c->port,
                   static_cast<long long>(
                       std::chrono::duration_cast<std::chrono::milliseconds>(backoff).count()));
      c->restart_at = now + backoff;
    }
  }
  std::fprintf(stderr, "tandem serve: draining (up to %d ms), then stopping the workers\n",
               o.drain_timeout_ms);
  stop_all(&router);
  std::fprintf(stderr, "tandem serve: stopped\n");
  return 0;
}

}  // namespace tandem::cli
