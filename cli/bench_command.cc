#include "cli/bench_command.h"

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <numeric>
#include <thread>
#include <vector>

#include "cli/bench_prompts.h"
#include "cli/exit_status.h"
#include "common/engine/engine.h"
#include "common/engine/loaded_model.h"
#include "common/model/gguf_file.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/thread_pool.h"
#include "nlohmann/json.hpp"

namespace tandem::cli {

namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

struct Run {
  double first_token_s = 0;  // from submission to the first token of every request
  double decode_s = 0;       // from then until the last token
  int64_t generated = 0;
};

// Submits `n` requests at once and runs them to completion.
Run RunBatch(engine::Engine& e, int n, int32_t prompt_len, int32_t gen, int32_t vocab,
             uint32_t salt) {
  engine::SamplingParams p;
  p.temperature = 0;
  p.max_tokens = gen;
  p.ignore_eos = true;
  for (int i = 0; i < n; ++i) (void)e.AddRequest(BenchPrompt(prompt_len, vocab, salt + i), p);
  Run r;
  const auto t0 = Clock::now();
  int firsts = 0;
  Clock::time_point t_first = t0;
  while (e.HasWork()) {
    auto events = e.Step();
    if (!events.ok()) break;
    for (const auto& ev : *events) {
      if (ev.token < 0) continue;
      ++r.generated;
      if (++firsts == n) t_first = Clock::now();
    }
    if (firsts < n) t_first = Clock::now();
  }
  const auto t1 = Clock::now();
  r.first_token_s = Seconds(t0, t_first);
  r.decode_s = Seconds(t_first, t1);
  return r;
}

double Median(std::vector<double> v) { return Quantile(std::move(v), 0.5); }

// Read bandwidth: every thread sums its share of a 1 GiB buffer, best of 3.
double ReadBandwidthGBs(int threads) {
  const size_t n = size_t{1} << 28;  // floats
  std::vector<float> buf(n, 1.0f);
  kernels::ThreadPool pool(threads);
  std::vector<double> sums(threads);
  double best = 0;
  for (int rep = 0; rep < 3; ++rep) {
    const auto t0 = Clock::now();
    pool.ParallelFor(
        static_cast<int64_t>(n),
        [&](int64_t b, int64_t e, int t) {
          float acc[16] = {};
          for (int64_t i = b; i + 16 <= e; i += 16)
            for (int l = 0; l < 16; ++l) acc[l] += buf[i + l];
          sums[t] += std::accumulate(acc, acc + 16, 0.0);  // keeps the loads alive
        },
        1 << 16);
    best = std::max(best, n * sizeof(float) / Seconds(t0, Clock::now()) / 1e9);
  }
  return best;
}

// tandem's own float32 GEMM (the prefill kernel) on a 512 × 2048 × 2048 problem.
double GemmGflops(int threads) {
  const int64_t m = 512, n = 2048, k = 2048;
  std::vector<float> x(m * k, 0.5f), w(n * k, 0.25f), out(m * n);
  kernels::WeightMatrix wm{model::GgmlType::kF32, n, k, reinterpret_cast<const uint8_t*>(w.data())};
  kernels::ThreadPool pool(threads);
  double best = 0;
  for (int rep = 0; rep < 3; ++rep) {
    const auto t0 = Clock::now();
    kernels::MatMul(x.data(), m, wm, out.data(), &pool);
    best = std::max(best, 2.0 * m * n * k / Seconds(t0, Clock::now()) / 1e9);
  }
  return best;
}

}  // namespace

CLI::App* AddBenchCommand(CLI::App& app, BenchOptions* o) {
  CLI::App* bench = app.add_subcommand("bench", "Benchmarks");
  bench->require_subcommand(1);
  CLI::App* cmd =
      bench->add_subcommand("engine", "Single-process engine: prefill, decode, batched decode");
  cmd->add_option("--model,-m", o->model, "GGUF model")->required();
  cmd->add_option("--threads,-t", o->threads, "Compute threads (default: all cores)");
  cmd->add_option("--repetitions,-r", o->repetitions)->capture_default_str();
  cmd->add_option("--prompt-tokens,-p", o->prompt_tokens)->capture_default_str();
  cmd->add_option("--gen-tokens,-n", o->gen_tokens)->capture_default_str();
  cmd->add_option("--batch", o->batch)->capture_default_str();
  cmd->add_option("--batch-prompt", o->batch_prompt)->capture_default_str();
  cmd->add_option("--batch-gen", o->batch_gen)->capture_default_str();
  cmd->add_option("--kv-cache-bytes", o->kv_cache_bytes)->capture_default_str();
  cmd->add_flag("--json", o->json, "Print one JSON object");
  return bench;
}

int RunBench(const BenchOptions& o) {
  auto loaded = engine::LoadModel(o.model);
  if (!loaded.ok()) return Fail(loaded.status());
  const model::ModelConfig* config = &loaded->config;
  const std::unique_ptr<engine::ModelWeights>& weights = loaded->weights;
  engine::EngineOptions eo;
  eo.num_threads = o.threads;
  eo.kv_cache_bytes = o.kv_cache_bytes;
  eo.scheduler.max_running = std::max(64, o.batch);
  eo.scheduler.max_batched_tokens = std::max(2048, o.batch * o.batch_prompt);
  auto eng = engine::Engine::Create(*weights, eo);
  if (!eng.ok()) return Fail(eng.status());
  engine::Engine& e = **eng;
  const int32_t vocab = static_cast<int32_t>(config->vocab_size);
  const int threads = e.num_threads();

  RunBatch(e, 1, 16, 4, vocab, 99);  // warm-up
  std::vector<double> pp, tg, batched_tg, batched_pp;
  for (int r = 0; r < o.repetitions; ++r) {
    Run a = RunBatch(e, 1, o.prompt_tokens, 1, vocab, 1000 + r);
    pp.push_back(o.prompt_tokens / a.first_token_s);
    Run b = RunBatch(e, 1, 1, o.gen_tokens + 1, vocab, 2000 + r);
    tg.push_back(o.gen_tokens / b.decode_s);
  }
  Run c = RunBatch(e, o.batch, o.batch_prompt, o.batch_gen + 1, vocab, 3000);
  const double s_pp = double(o.batch) * o.batch_prompt / c.first_token_s;
  const double s_tg = double(o.batch) * o.batch_gen / c.decode_s;
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  const double peak_rss_mib = ru.ru_maxrss / 1024.0;
  const double weight_mb = weights->weight_bytes() / 1e6;
  const double bw = ReadBandwidthGBs(threads);
  const double gemm = GemmGflops(threads);
  // Prefill FLOPs per token ≈ 2 × parameters in the matmuls (attention excluded).
  double params = 0;
  const auto& c0 = *config;
  params +=
      double(c0.n_layers) * c0.hidden_size *
      (2.0 * c0.n_heads * c0.head_dim + 2.0 * c0.n_kv_heads * c0.head_dim + 3.0 * c0.ffn_size);
  params += double(c0.vocab_size) * c0.hidden_size;
  const double pp_gflops = Median(pp) * 2 * params / 1e9;

  nlohmann::json j = {
      {"model", o.model},
      {"threads", threads},
      {"isa", kernels::MatMulIsa()},
      {"pp", o.prompt_tokens},
      {"pp_tokens_per_s", Median(pp)},
      {"pp_gflops", pp_gflops},
      {"tg", o.gen_tokens},
      {"tg_tokens_per_s", Median(tg)},
      {"batch", o.batch},
      {"batch_prompt", o.batch_prompt},
      {"batch_gen", o.batch_gen},
      {"batch_s_pp", s_pp},
      {"batch_s_tg", s_tg},
      {"kv_cache_bytes", o.kv_cache_bytes},
      {"peak_rss_mib", peak_rss_mib},
      {"weight_mb_read_per_token", weight_mb},
      {"machine_read_gb_per_s", bw},
      {"machine_gemm_gflops", gemm},
      {"tg_bandwidth_bound_tokens_per_s", bw * 1e3 / weight_mb},
      {"pp_gemm_bound_tokens_per_s", gemm * 1e9 / (2 * params)},
  };
  if (o.json) {
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("tandem bench engine: %s, %d threads, %s kernels\n", o.model.c_str(), threads,
                kernels::MatMulIsa());
    std::printf(
        "  pp%-5d %8.1f tokens/s  (%.0f GFLOP/s; GEMM bound %.0f tokens/s at %.0f GFLOP/s)\n",
        o.prompt_tokens, Median(pp), pp_gflops, gemm * 1e9 / (2 * params), gemm);
    std::printf(
        "  tg%-5d %8.1f tokens/s  (bandwidth bound %.0f tokens/s: %.1f GB/s over %.0f MB)\n",
        o.gen_tokens, Median(tg), bw * 1e3 / weight_mb, bw, weight_mb);
    std::printf("  B=%d, %d+%d: S_PP %.1f tokens/s, S_TG %.1f tokens/s\n", o.batch, o.batch_prompt,
                o.batch_gen, s_pp, s_tg);
    std::printf("  peak RSS %.0f MiB with a %lld MiB KV pool\n", peak_rss_mib,
                static_cast<long long>(o.kv_cache_bytes >> 20));
  }
  return 0;
}

}  // namespace tandem::cli
