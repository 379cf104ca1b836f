#include "cli/serve_bench_command.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <fstream>
#include <limits>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "cli/bench_prompts.h"
#include "cli/exit_status.h"
#include "common/engine/model_file.h"
#include "common/util/strings.h"

namespace tandem::cli {

namespace {

using Clock = std::chrono::steady_clock;

// The requests to send: random token ids, or prompts from a JSONL file.
absl::StatusOr<std::vector<BenchRequest>> MakeRequests(const ServeBenchOptions& o, int count,
                                                       uint32_t seed) {
  std::vector<BenchRequest> out;
  if (!o.dataset_path.empty()) {
    std::ifstream in(o.dataset_path);
    if (!in)
      return absl::InvalidArgumentError(StrCat("--dataset-path: cannot read ", o.dataset_path));
    std::string line;
    std::vector<BenchRequest> all;
    for (int n = 1; std::getline(in, line); ++n) {
      if (line.empty()) continue;
      nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
      if (j.is_discarded() || !j.contains("prompt") || !j["prompt"].is_string()) {
        return absl::InvalidArgumentError(
            StrCat("--dataset-path: line ", n, " is not {\"prompt\": \"...\"}"));
      }
      BenchRequest r;
      r.prompt_text = j["prompt"].get<std::string>();
      r.max_tokens = j.value("max_tokens", o.random_output_len);
      r.ignore_eos = o.ignore_eos;
      all.push_back(std::move(r));
    }
    if (all.empty()) return absl::InvalidArgumentError("--dataset-path: no prompts");
    for (int i = 0; i < count; ++i) out.push_back(all[static_cast<size_t>(i) % all.size()]);
    return out;
  }
  auto model = engine::OpenModelFile(o.tokenizer);
  if (!model.ok()) return model.status();
  const tokenizer::Vocab& vocab = model->tokenizer->vocab();
  const std::vector<int32_t> ordinary = OrdinaryTokens(vocab);
  std::mt19937 gen(seed);
  auto length = [&](int32_t len) {
    const auto lo_len = static_cast<int32_t>(std::floor(len * (1 - o.random_range_ratio)));
    const auto hi_len = static_cast<int32_t>(std::ceil(len * (1 + o.random_range_ratio)));
    return std::uniform_int_distribution<int32_t>(std::max(1, lo_len), std::max(1, hi_len))(gen);
  };
  std::uniform_int_distribution<size_t> pick(0, ordinary.size() - 1);
  for (int i = 0; i < count; ++i) {
    BenchRequest r;
    r.prompt_ids.resize(static_cast<size_t>(length(o.random_input_len)));
    for (auto& id : r.prompt_ids) id = ordinary[pick(gen)];
    r.max_tokens = length(o.random_output_len);
    r.ignore_eos = o.ignore_eos;
    out.push_back(std::move(r));
  }
  return out;
}

class Semaphore {
 public:
  explicit Semaphore(int n) : free_(n) {}
  void Acquire() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return free_ > 0; });
    --free_;
  }
  void Release() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++free_;
    }
    cv_.notify_one();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int free_;
};

nlohmann::json SummaryJson(const Summary& s) {
  return {{"mean", s.mean}, {"p50", s.p50}, {"p90", s.p90}, {"p99", s.p99}, {"n", s.n}};
}

void PrintTable(const ServeBenchOptions& o, const ServingMetrics& m) {
  std::printf("============ Serving Benchmark Result ============\n");
  std::printf("%-40s %s\n", "Target:", StrCat(o.target.backend, " ", o.target.endpoint).c_str());
  std::printf("%-40s %d\n", "Successful requests:", m.completed);
  std::printf("%-40s %d\n", "Failed requests:", m.failed);
  std::printf("%-40s %.2f\n", "Benchmark duration (s):", m.duration_s);
  std::printf("%-40s %lld\n", "Total input tokens:", static_cast<long long>(m.input_tokens));
  std::printf("%-40s %lld\n", "Total generated tokens:", static_cast<long long>(m.output_tokens));
  std::printf("%-40s %.3f\n", "Request throughput (req/s):", m.request_throughput);
  if (m.goodput > 0 || !o.goodput.empty()) {
    std::printf("%-40s %.3f\n", "Request goodput (req/s):", m.goodput);
  }
  std::printf("%-40s %.2f\n", "Input token throughput (tok/s):", m.input_throughput);
  std::printf("%-40s %.2f\n", "Output token throughput (tok/s):", m.output_throughput);
  auto block = [](const char* title, const char* name, const Summary& s) {
    std::printf("%s\n", title);
    std::printf("%-40s %.2f\n", StrCat("Mean ", name, " (ms):").c_str(), s.mean);
    std::printf("%-40s %.2f\n", StrCat("P50 ", name, " (ms):").c_str(), s.p50);
    std::printf("%-40s %.2f\n", StrCat("P90 ", name, " (ms):").c_str(), s.p90);
    std::printf("%-40s %.2f\n", StrCat("P99 ", name, " (ms):").c_str(), s.p99);
  };
  block("---------------Time to First Token----------------", "TTFT", m.ttft_ms);
  block("-----Time per Output Token (excl. 1st token)------", "TPOT", m.tpot_ms);
  block("---------------Inter-token Latency----------------", "ITL", m.itl_ms);
  block("----------------End-to-end Latency----------------", "E2E", m.e2e_ms);
  std::printf("==================================================\n");
}

}  // namespace

CLI::App* AddServeBenchCommand(CLI::App* bench, ServeBenchOptions* o) {
  CLI::App* cmd = bench->add_subcommand(
      "serve", "Load-test a running server (tandem gRPC or any OpenAI-compatible HTTP API)");
  cmd->add_option("--backend", o->target.backend, "grpc, openai (/v1/completions), openai-chat")
      ->capture_default_str();
  cmd->add_option("--endpoint", o->target.endpoint,
                  "grpc: host:port; openai: base URL, e.g. http://127.0.0.1:8000")
      ->required();
  cmd->add_option("--model", o->target.model, "The `model` field of OpenAI requests");
  cmd->add_option("--api-key", o->target.api_key, "Bearer key")->envname("TANDEM_API_KEY");
  cmd->add_option("--tokenizer", o->tokenizer, "GGUF whose vocabulary random prompts use")
      ->capture_default_str();
  cmd->add_option("--num-prompts", o->num_prompts)
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--request-rate", o->request_rate, "Requests/s (0 or inf: all at once)")
      ->capture_default_str();
  cmd->add_option("--burstiness", o->burstiness, "Gamma shape of arrivals (1: Poisson)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--max-concurrency", o->max_concurrency, "Requests in flight at most (0: no cap)")
      ->capture_default_str();
  cmd->add_option("--random-input-len", o->random_input_len)->capture_default_str();
  cmd->add_option("--random-output-len", o->random_output_len)->capture_default_str();
  cmd->add_option("--random-range-ratio", o->random_range_ratio,
                  "Lengths uniform in [len*(1-r), len*(1+r)]")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--dataset-path", o->dataset_path, "JSONL of {\"prompt\", \"max_tokens\"?}");
  cmd->add_flag("--ignore-eos", o->ignore_eos, "Generate exactly the requested output lengths");
  cmd->add_option("--num-warmups", o->num_warmups)->capture_default_str();
  cmd->add_option("--seed", o->seed)->capture_default_str();
  cmd->add_option("--goodput", o->goodput, "SLOs in ms, e.g. \"ttft:2000 tpot:50\"");
  cmd->add_option("--result-json", o->result_json, "Also write the results here");
  cmd->add_option("--label", o->label, "Name of this run in the JSON");
  cmd->add_flag("--json", o->json, "Print JSON instead of the table");
  return cmd;
}

int RunServeBench(const ServeBenchOptions& o) {
  std::optional<Slo> slo;
  if (!o.goodput.empty()) {
    auto parsed = ParseSlo(o.goodput);
    if (!parsed.ok()) return Fail(parsed.status());
    slo = *parsed;
  }
  auto target = MakeLoadTarget(o.target);
  if (!target.ok()) return Fail(target.status());
  auto requests = MakeRequests(o, o.num_prompts, o.seed);
  if (!requests.ok()) return Fail(requests.status());
  auto warmups = MakeRequests(o, o.num_warmups, o.seed + 7919);
  if (!warmups.ok()) return Fail(warmups.status());
  for (const BenchRequest& w : *warmups) {
    BenchRequest r = w;
    r.max_tokens = std::min(r.max_tokens, 8);
    const RequestResult res = (*target)->Send(r);
    if (!res.ok) return Fail(absl::UnavailableError(StrCat("warm-up request failed: ", res.error)));
  }

  // Arrival times: all at once, or gamma-distributed gaps with mean 1 / rate.
  std::mt19937_64 gen(o.seed);
  const bool at_once = o.request_rate <= 0 || std::isinf(o.request_rate);
  std::gamma_distribution<double> gap(o.burstiness,
                                      at_once ? 1.0 : 1.0 / (o.request_rate * o.burstiness));
  std::vector<double> offsets;
  double t = 0;
  for (size_t i = 0; i < requests->size(); ++i) {
    offsets.push_back(at_once ? 0 : t);
    if (!at_once) t += gap(gen);
  }

  const int limit = o.max_concurrency > 0 ? o.max_concurrency : std::numeric_limits<int>::max() / 2;
  Semaphore slots(limit);
  std::vector<RequestResult> results(requests->size());
  std::atomic<int> done{0};
  const bool tty = isatty(STDERR_FILENO) != 0;
  const auto t0 = Clock::now();
  std::vector<std::thread> threads;
  for (size_t i = 0; i < requests->size(); ++i) {
    std::this_thread::sleep_until(t0 + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(offsets[i])));
    slots.Acquire();
    threads.emplace_back([&, i] {
      results[i] = (*target)->Send((*requests)[i]);
      slots.Release();
      const int n = ++done;
      if (tty) {
        const int width = 40;
        const int filled = static_cast<int>(width * static_cast<double>(n) / requests->size());
        std::fprintf(stderr, "\r  [%s%s] %d/%zu", std::string(filled, '#').c_str(),
                     std::string(width - filled, ' ').c_str(), n, requests->size());
        std::fflush(stderr);
      }
    });
  }
  for (auto& th : threads) th.join();
  const double duration = std::chrono::duration<double>(Clock::now() - t0).count();
  if (tty) std::fprintf(stderr, "\n");

  const ServingMetrics m = ComputeServingMetrics(results, duration, slo);
  nlohmann::json j = {{"label", o.label},
                      {"backend", o.target.backend},
                      {"endpoint", o.target.endpoint},
                      {"num_prompts", o.num_prompts},
                      {"request_rate", at_once ? "inf" : std::to_string(o.request_rate)},
                      {"burstiness", o.burstiness},
                      {"max_concurrency", o.max_concurrency},
                      {"random_input_len", o.random_input_len},
                      {"random_output_len", o.random_output_len},
                      {"ignore_eos", o.ignore_eos},
                      {"completed", m.completed},
                      {"failed", m.failed},
                      {"duration_s", m.duration_s},
                      {"total_input_tokens", m.input_tokens},
                      {"total_output_tokens", m.output_tokens},
                      {"request_throughput", m.request_throughput},
                      {"input_throughput", m.input_throughput},
                      {"output_throughput", m.output_throughput},
                      {"goodput", m.goodput},
                      {"ttft_ms", SummaryJson(m.ttft_ms)},
                      {"tpot_ms", SummaryJson(m.tpot_ms)},
                      {"itl_ms", SummaryJson(m.itl_ms)},
                      {"e2e_ms", SummaryJson(m.e2e_ms)}};
  nlohmann::json per_request = nlohmann::json::array();
  for (const RequestResult& r : results) {
    per_request.push_back({{"ok", r.ok},
                           {"ttft_s", r.ttft},
                           {"e2e_s", r.e2e},
                           {"prompt_tokens", r.prompt_tokens},
                           {"output_tokens", r.output_tokens},
                           {"error", r.error}});
  }
  j["requests"] = std::move(per_request);
  for (const RequestResult& r : results) {
    if (!r.ok) {
      std::fprintf(stderr, "first failure: %s\n", r.error.c_str());
      break;
    }
  }
  if (!o.result_json.empty()) std::ofstream(o.result_json) << j.dump(1) << "\n";
  if (o.json) {
    std::printf("%s\n", j.dump(1).c_str());
  } else {
    PrintTable(o, m);
  }
  return m.failed == 0 ? 0 : 1;
}

}  // namespace tandem::cli
