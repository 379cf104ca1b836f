// tandem-router: the cluster's front door. Validates, tokenizes and queues requests,
// picks workers, and relays token streams as text (see router.h) — over gRPC
// (tandem.v1.Generation) and over HTTP (the OpenAI-compatible API, openai_front.h).
#include <cstdio>

#include "absl/strings/str_split.h"
#include "common/engine/model_file.h"
#include "common/kv/kv_layout.h"
#include "common/rpc/process_main.h"
#include "common/util/signals.h"
#include "common/util/strings.h"
#include "router/generation_service.h"
#include "router/grpc_worker_client.h"
#include "router/openai_front.h"
#include "router/web_page.h"

int main(int argc, char** argv) {
  using namespace tandem;
  BlockTerminationSignals();
  CLI::App app{"tandem-router — the front door of a tandem cluster"};
  rpc::ServerFlags flags;
  flags.port = 50051;
  TlsFiles tls;
  std::string prefill, decode;
  router::RouterOptions options;
  int lease_ms = 120000, poll_ms = 500, discovery_ms = 5000;
  router::ValidatorLimits limits;
  rpc::AddServerFlags(app, &flags);
  rpc::AddTlsFlags(app, &tls);
  app.add_option("--prefill", prefill,
                 "Prefill workers, host:port,... (a DNS name stands for every address it "
                 "resolves to, re-resolved every --discovery-interval-ms)")
      ->required();
  app.add_option("--decode", decode, "Decode workers, host:port,... (as --prefill)")->required();
  app.add_option("--discovery-interval-ms", discovery_ms,
                 "How often worker DNS names are re-resolved")
      ->capture_default_str();
  app.add_option("--max-queued-requests", options.queue.max_requests,
                 "Requests waiting for decode memory before RESOURCE_EXHAUSTED")
      ->capture_default_str();
  app.add_option("--max-queued-tokens", options.queue.max_tokens,
                 "Prompt tokens waiting before RESOURCE_EXHAUSTED")
      ->capture_default_str();
  int64_t priority_max_wait_ms = options.queue.max_priority_wait.count();
  app.add_option("--priority-max-wait-ms", priority_max_wait_ms,
                 "A queued request that has waited this long goes before every request that "
                 "has not, whatever their priority (bounds how long priority can hold it back)")
      ->check(CLI::Range(int64_t{1}, int64_t{86400000}))
      ->capture_default_str();
  app.add_option("--max-prefill-tokens-in-flight", options.max_prefill_tokens_in_flight,
                 "Prompt tokens sent to one prefill worker before the rest wait in the queue")
      ->capture_default_str();
  options.disagg_min_tokens = router::kDefaultDisaggMinTokens;
  app.add_option("--disagg-min-tokens", options.disagg_min_tokens,
                 "Prompts with fewer uncached tokens than this on their decode worker are "
                 "prefilled there, without a prefill worker or a KV transfer (0: every prompt "
                 "goes to a prefill worker)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 24))
      ->capture_default_str();
  std::string routing = "cache_aware";
  app.add_option("--routing-policy", routing,
                 "How to pick a prefill worker: round_robin, least_loaded, cache_aware")
      ->capture_default_str();
  app.add_option("--lease-ms", lease_ms, "How long a decode reservation waits for its KV")
      ->capture_default_str();
  app.add_option("--health-poll-ms", poll_ms, "Worker health and stats polling interval")
      ->capture_default_str();
  app.add_option("--max-prompt-bytes", limits.max_prompt_bytes, "Largest prompt text accepted")
      ->capture_default_str();
  int64_t max_model_len = 0;
  app.add_option("--max-model-len", max_model_len,
                 "Longest request (prompt + max_tokens) accepted and advertised (0: the model's "
                 "context length)")
      ->capture_default_str();
  std::string tool_call_parser = "auto";
  app.add_option("--tool-call-parser", tool_call_parser,
                 "How the model writes tool calls: hermes, llama3_json, mistral, or auto (from "
                 "its chat template)")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  options.queue.max_priority_wait = std::chrono::milliseconds(priority_max_wait_ms);
  options.lease = std::chrono::milliseconds(lease_ms);
  auto fail = [](const absl::Status& st) {
    std::fprintf(stderr, "tandem-router: %s\n", st.ToString().c_str());
    return 1;
  };
  auto policy = router::ParseRoutingPolicy(routing);
  if (!policy.ok()) return fail(policy.status());
  options.routing = *policy;
  if (auto st = metrics::CheckPrefix(flags.metrics_prefix); !st.ok()) return fail(st);
  if (auto st = tls.CheckServer(); !st.ok()) return fail(st);

  std::optional<router::ToolCallFormat> tool_format;
  if (tool_call_parser != "auto") {
    auto f = router::ParseToolCallFormat(tool_call_parser);
    if (!f.ok())
      return fail(absl::InvalidArgumentError(StrCat("--tool-call-parser: ", f.status().message())));
    tool_format = *f;
  }

  auto model = engine::OpenModelFile(flags.model);  // the router only tokenizes
  if (!model.ok()) return fail(model.status());
  // What this router serves: the model's context, or less (--max-model-len).
  model::ModelConfig config = model->config;
  if (max_model_len < 0 || max_model_len > static_cast<int64_t>(config.context_length)) {
    return fail(absl::InvalidArgumentError(
        StrCat("--max-model-len: ", max_model_len, " is outside 1 .. ", config.context_length,
               " (the model's context length); 0 means all of it")));
  }
  if (max_model_len > 0) config.context_length = max_model_len;
  const std::string model_name = rpc::ServedModelName(flags);

  metrics::Metrics metrics({flags.metrics_prefix, model_name, metrics::Role::kRouter});
  options.metrics = &metrics;
  std::vector<std::string> prefill_addrs = absl::StrSplit(prefill, ',', absl::SkipEmpty());
  std::vector<std::string> decode_addrs = absl::StrSplit(decode, ',', absl::SkipEmpty());
  router::WorkerPool pool(prefill_addrs, decode_addrs,
                          router::GrpcWorkerClients(flags.InternalKey()),
                          {.poll_interval = std::chrono::milliseconds(poll_ms),
                           .discovery_interval = std::chrono::milliseconds(discovery_ms)});
  router::RequestValidator validator(*model->tokenizer, config, limits, tool_format);
  std::fprintf(stderr, "tandem-router: tool calls parsed as %s\n",
               std::string(router::ToolCallFormatName(validator.tool_format())).c_str());
  router::Router router(*model->tokenizer, config, &pool, options);
  metrics.SetRefresh([&router, &pool](metrics::Metrics& m) {
    const router::RouterStats s = router.Stats();
    const router::PoolKv kv = router::SummarizePoolKv(pool.Snapshot(router::WorkerRole::kDecode));
    m.SetLoadGauges(
        {.running = s.running_requests, .waiting = s.queued_requests, .kv_usage = kv.usage});
    if (kv.num_blocks > 0) {
      m.SetCacheConfig(kv.block_size, kv.num_blocks);
    } else {
      m.ClearCacheConfig();  // no healthy decode worker: no configuration to report
    }
  });
  const kv::KvLayout layout{static_cast<int32_t>(config.n_layers),
                            static_cast<int32_t>(config.n_kv_heads),
                            static_cast<int32_t>(config.head_dim)};
  router::ModelInfo info{model_name, layout.BytesPerToken()};
  router::GenerationService service(&router, &pool, &validator, config, info);

  auto server = rpc::RpcServer::Start(StrCat(flags.host, ":", flags.port), {&service},
                                      {"tandem.v1.Generation"}, tls, flags.api_key);
  if (!server.ok()) return fail(server.status());
  router::OpenAiFront front(&router, &pool, &validator, *model->tokenizer, config, model_name);
  auto http = rpc::StartHttpServer(flags, &metrics, tls, [&](http::HttpServer* s) {
    front.Mount(s);
    router::MountWebPage(s, &router, &pool, model_name);
  });
  if (!http.ok()) return fail(http.status());
  if (auto st = rpc::AnnounceListening("tandem-router", flags, (*server)->port(),
                                       *http != nullptr ? (*http)->port() : 0);
      !st.ok())
    return fail(st);
  rpc::RpcServer* srv = server->get();
  http::HttpServer* web = http->get();
  pool.Start([srv, web, &flags](bool ready, const std::string& why) {
    srv->SetReady(ready);
    if (web != nullptr) web->SetReady(ready, why);
    if (ready) rpc::AnnounceReady(flags);
    std::fprintf(stderr, "tandem-router %s%s\n", ready ? "ready" : "not ready: ", why.c_str());
  });
  rpc::ServeUntilSignal("tandem-router", srv, flags,
                        {.server = web,
                         .idle = [&front] { return front.Idle(); },
                         .cancel_all = [&front] { front.CancelAll(); }});
  metrics.SetRefresh(nullptr);
  return 0;
}
