#include "cli/cache_bench_command.h"

#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

#include "cli/bench_prompts.h"
#include "cli/exit_status.h"
#include "cli/local_cluster.h"
#include "common/engine/model_file.h"
#include "common/rpc/rpc_server.h"
#include "common/util/strings.h"
#include "nlohmann/json.hpp"
#include "tandem/v1/generation.grpc.pb.h"
#include "tandem/v1/worker.grpc.pb.h"

namespace tandem::cli {

namespace {

using Clock = std::chrono::steady_clock;

// Client-observed time to the first chunk of a one-token request, and its usage.
struct Ttft {
  double ms = 0;
  int32_t cached_tokens = 0;
  bool ok = false;
  std::string error;
};

Ttft FirstToken(v1::Generation::Stub* stub, const std::vector<int32_t>& prompt) {
  const v1::GenerateRequest req = GreedyTokenRequest(prompt, 1);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(900));
  Ttft t;
  const auto t0 = Clock::now();
  auto reader = stub->Generate(&ctx, req);
  v1::GenerateResponse msg;
  while (reader->Read(&msg)) {
    if (msg.has_chunk() && t.ms == 0) {
      t.ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    }
    if (msg.has_complete()) t.cached_tokens = msg.complete().usage().cached_tokens();
  }
  const grpc::Status s = reader->Finish();
  t.ok = s.ok();
  t.error = s.error_message();
  return t;
}

bool WorkerStats(const std::string& address, v1::WorkerStats* out) {
  auto stub = v1::PrefillWorker::NewStub(rpc::MakeChannel(address));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  return stub->GetWorkerStats(&ctx, v1::GetWorkerStatsRequest(), out).ok();
}

}  // namespace

std::pair<CLI::App*, CLI::App*> AddCacheBenchCommands(CLI::App* bench, CacheBenchOptions* o) {
  CLI::App* p = bench->add_subcommand(
      "prefix-cache", "Shared system prompt: prefix cache + cache-aware routing vs no cache");
  CLI::App* c = bench->add_subcommand(
      "chunked-prefill", "A short prompt behind a long one: chunked vs whole-prompt prefill");
  for (CLI::App* cmd : {p, c}) {
    cmd->add_option("--model,-m", o->model, "GGUF model")->required();
    cmd->add_option("--threads-per-worker,-t", o->threads_per_worker)->capture_default_str();
    cmd->add_flag("--json", o->json, "Print one JSON object");
  }
  p->add_option("--requests", o->requests)->capture_default_str();
  p->add_option("--system-tokens", o->system_tokens)->capture_default_str();
  p->add_option("--question-tokens", o->question_tokens)->capture_default_str();
  c->add_option("--long-tokens", o->long_tokens)->capture_default_str();
  c->add_option("--short-tokens", o->short_tokens)->capture_default_str();
  c->add_option("--chunk", o->chunk, "--max-prefill-chunk of the chunked run")
      ->capture_default_str();
  c->add_option("--delay-ms", o->delay_ms, "How long after the long prompt the short one is sent")
      ->capture_default_str();
  return {p, c};
}

// The model's vocabulary size (prompts are random ids below it).
absl::StatusOr<int32_t> VocabOf(const std::string& model) {
  auto m = engine::OpenModelFile(model);
  if (!m.ok()) return m.status();
  return static_cast<int32_t>(m->config.vocab_size);
}

int RunPrefixCacheBench(const CacheBenchOptions& o) {
  auto vocab = VocabOf(o.model);
  if (!vocab.ok()) return Fail(vocab.status());
  const int32_t kVocab = *vocab;
  const std::vector<int32_t> system = BenchPrompt(o.system_tokens, kVocab, 4242);
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < o.requests; ++i) {
    std::vector<int32_t> p = system;
    const std::vector<int32_t> q = BenchPrompt(o.question_tokens, kVocab, 7000 + i);
    p.insert(p.end(), q.begin(), q.end());
    prompts.push_back(std::move(p));
  }
  const int64_t prompt_tokens = o.system_tokens + o.question_tokens;
  nlohmann::json runs = nlohmann::json::array();
  for (bool cache : {true, false}) {
    std::vector<std::string> flags = {"--prefill-workers",    "2",
                                      "--decode-workers",     "1",
                                      "--threads-per-worker", std::to_string(o.threads_per_worker)};
    if (cache) {
      flags.insert(flags.end(), {"--routing-policy", "cache_aware"});
    } else {
      flags.insert(flags.end(), {"--no-prefix-caching", "--routing-policy", "least_loaded"});
    }
    auto cluster = LocalCluster::Start(o.model, flags);
    if (!cluster.ok()) return Fail(cluster.status());
    auto stub = v1::Generation::NewStub(rpc::MakeChannel((*cluster)->endpoint()));
    std::vector<Ttft> t(prompts.size());
    std::vector<std::thread> threads;
    const auto t0 = Clock::now();
    for (size_t i = 0; i < prompts.size(); ++i) {
      threads.emplace_back([&, i] { t[i] = FirstToken(stub.get(), prompts[i]); });
    }
    for (auto& th : threads) th.join();
    const double wall_s = std::chrono::duration<double>(Clock::now() - t0).count();
    std::vector<double> ms;
    int failed = 0;
    for (const Ttft& x : t) {
      if (!x.ok) ++failed;
      ms.push_back(x.ms);
    }
    int64_t queries = 0, hits = 0;
    int used = 0;
    for (const std::string& a : (*cluster)->prefill()) {
      v1::WorkerStats s;
      if (!WorkerStats(a, &s)) continue;
      queries += s.prefix_query_tokens_total();
      hits += s.prefix_hit_tokens_total();
      used += s.prefix_query_tokens_total() > 0 ? 1 : 0;
    }
    const int64_t after_first = queries - used * prompt_tokens;
    runs.push_back({{"prefix_cache", cache},
                    {"ttft_p50_ms", Quantile(ms, 0.5)},
                    {"ttft_p90_ms", Quantile(ms, 0.9)},
                    {"wall_s", wall_s},
                    {"failed", failed},
                    {"prefill_workers_used", used},
                    {"hit_rate", queries > 0 ? double(hits) / double(queries) : 0.0},
                    {"hit_rate_after_first_per_worker",
                     after_first > 0 ? double(hits) / double(after_first) : 0.0}});
  }
  const double ratio = runs[1]["ttft_p50_ms"].get<double>() / runs[0]["ttft_p50_ms"].get<double>();
  nlohmann::json j = {{"requests", o.requests},
                      {"system_tokens", o.system_tokens},
                      {"question_tokens", o.question_tokens},
                      {"threads_per_worker", o.threads_per_worker},
                      {"runs", runs},
                      {"ttft_p50_speedup", ratio}};
  if (o.json) {
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  std::printf(
      "tandem bench prefix-cache: %d requests at once, %d shared + %d own tokens, 2 prefill + 1 "
      "decode workers, %d thread(s) each\n\n",
      o.requests, o.system_tokens, o.question_tokens, o.threads_per_worker);
  std::printf("%-28s %12s %12s %9s %10s %22s\n", "", "TTFT p50", "TTFT p90", "wall", "hit rate",
              "hit rate after 1st/wkr");
  for (const auto& r : runs) {
    std::printf(
        "%-28s %9.0f ms %9.0f ms %7.1f s %9.1f%% %21.1f%%\n",
        r["prefix_cache"].get<bool>() ? "prefix cache, cache_aware" : "no cache, least_loaded",
        r["ttft_p50_ms"].get<double>(), r["ttft_p90_ms"].get<double>(), r["wall_s"].get<double>(),
        100 * r["hit_rate"].get<double>(),
        100 * r["hit_rate_after_first_per_worker"].get<double>());
  }
  std::printf("\nTTFT p50: %.1fx lower with the cache\n", ratio);
  return 0;
}

int RunChunkedPrefillBench(const CacheBenchOptions& o) {
  auto vocab = VocabOf(o.model);
  if (!vocab.ok()) return Fail(vocab.status());
  const int32_t kVocab = *vocab;
  const std::vector<int32_t> long_prompt = BenchPrompt(o.long_tokens, kVocab, 1);
  const std::vector<int32_t> short_prompt = BenchPrompt(o.short_tokens, kVocab, 2);
  nlohmann::json runs = nlohmann::json::array();
  for (int32_t chunk : {o.chunk, 0}) {
    auto cluster = LocalCluster::Start(
        o.model,
        {"--prefill-workers", "1", "--decode-workers", "1", "--threads-per-worker",
         std::to_string(o.threads_per_worker), "--max-prefill-chunk", std::to_string(chunk),
         "--prefill-kv-cache-bytes", std::to_string(int64_t{768} << 20)});
    if (!cluster.ok()) return Fail(cluster.status());
    auto stub = v1::Generation::NewStub(rpc::MakeChannel((*cluster)->endpoint()));
    Ttft long_t, short_t;
    std::thread l([&] { long_t = FirstToken(stub.get(), long_prompt); });
    std::this_thread::sleep_for(std::chrono::milliseconds(o.delay_ms));
    short_t = FirstToken(stub.get(), short_prompt);
    l.join();
    if (!long_t.ok || !short_t.ok) {
      return Fail(
          absl::InternalError(StrCat("a request failed: ", long_t.error, " / ", short_t.error)));
    }
    runs.push_back({{"max_prefill_chunk", chunk},
                    {"long_ttft_ms", long_t.ms},
                    {"short_first_token_since_long_sent_ms", short_t.ms + o.delay_ms},
                    {"short_ttft_after_send_ms", short_t.ms},
                    {"short_over_long", short_t.ms / long_t.ms}});
  }
  nlohmann::json j = {
      {"long_tokens", o.long_tokens}, {"short_tokens", o.short_tokens}, {"runs", runs}};
  if (o.json) {
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  std::printf(
      "tandem bench chunked-prefill: a %d-token prompt, then %d ms later a %d-token one; 1 prefill "
      "+ 1 decode worker, %d thread(s) each\n\n",
      o.long_tokens, o.delay_ms, o.short_tokens, o.threads_per_worker);
  std::printf("%-22s %16s %26s %12s\n", "", "long TTFT", "short TTFT (from its send)",
              "short/long");
  for (const auto& r : runs) {
    std::printf("%-22s %13.0f ms %23.0f ms %11.1f%%\n",
                r["max_prefill_chunk"].get<int>() > 0
                    ? ("chunks of " + std::to_string(r["max_prefill_chunk"].get<int>())).c_str()
                    : "whole prompt",
                r["long_ttft_ms"].get<double>(), r["short_ttft_after_send_ms"].get<double>(),
                100 * r["short_over_long"].get<double>());
  }
  return 0;
}

}  // namespace tandem::cli
