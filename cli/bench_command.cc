#include "cli/bench_command.h"

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <numeric>
#include <thread>
#include <vector>

#include "cli/bench_prompts.h"
#include "cli/bench_stats.h"
#include "cli/engine_batch.h"
#include "cli/exit_status.h"
#include "cli/machine_limits.h"
#include "common/engine/engine.h"
#include "common/engine/loaded_model.h"
#include "common/engine/synthetic_model.h"
#include "common/model/gguf_file.h"
#include "common/rpc/worker_main.h"
#include "common/util/strings.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/matmul_q8.h"
#include "kernels/cpu/thread_pool.h"
#include "nlohmann/json.hpp"

namespace tandem::cli {

namespace {

double Median(std::vector<double> v) { return Quantile(std::move(v), 0.5); }

}  // namespace

CLI::App* AddBenchCommand(CLI::App& app, BenchOptions* o) {
  CLI::App* bench = app.add_subcommand("bench", "Benchmarks");
  bench->require_subcommand(1);
  CLI::App* cmd =
      bench->add_subcommand("engine", "Single-process engine: prefill, decode, batched decode");
  CLI::Option* model = cmd->add_option("--model,-m", o->model, "GGUF model");
  CLI::Option* synthetic =
      cmd->add_option("--synthetic", o->synthetic,
                      StrCat("Random weights of a named shape instead of a file: ",
                             Join(engine::SyntheticShapes(), ", ")))
          ->excludes(model);
  cmd->add_option("--synthetic-type", o->synthetic_type, "Synthetic weights' type: f32, q8_0")
      ->check(CLI::IsMember({"f32", "q8_0"}))
      ->capture_default_str();
  model->excludes(synthetic);
  cmd->add_option("--threads,-t", o->threads, "Compute threads (default: all cores)");
  cmd->add_option("--repetitions,-r", o->repetitions)->capture_default_str();
  cmd->add_option("--prompt-tokens,-p", o->prompt_tokens)->capture_default_str();
  cmd->add_option("--gen-tokens,-n", o->gen_tokens)->capture_default_str();
  cmd->add_option("--batch", o->batch)->capture_default_str();
  cmd->add_option("--batch-prompt", o->batch_prompt)->capture_default_str();
  cmd->add_option("--batch-gen", o->batch_gen)->capture_default_str();
  cmd->add_option("--kv-cache-bytes", o->kv_cache_bytes)->capture_default_str();
  cmd->add_option("--pp-sweep", o->pp_sweep,
                  "Prompt lengths for a prefill line fit (TTFT against tokens), e.g. "
                  "128,512,2048,8192")
      ->delimiter(',');
  cmd->add_option("--peak-tflops", o->peak_tflops,
                  "The device's peak (dense bf16) for the sweep's MFU, e.g. 989 for an H200");
  cmd->add_flag("--json", o->json, "Print one JSON object");
  cmd->add_flag("--enforce-eager", o->enforce_eager, "No CUDA graphs for decode steps");
  rpc::AddDeviceFlags(*cmd, &o->device, &o->gpu, &o->batch_invariant, &o->kv_dtype, &o->cpu_math);
  return bench;
}

int RunBench(const BenchOptions& o) {
  if (o.model.empty() == o.synthetic.empty()) {
    return Fail(absl::InvalidArgumentError("bench engine: give --model or --synthetic"));
  }
  absl::StatusOr<engine::LoadedModel> loaded;
  std::unique_ptr<engine::ModelWeights> synthetic;
  const engine::ModelWeights* weights = nullptr;
  if (!o.synthetic.empty()) {
    auto c = engine::SyntheticConfig(o.synthetic);
    if (!c.ok()) return Fail(c.status());
    auto w = engine::ModelWeights::Random(
        *c, o.synthetic_type == "f32" ? model::GgmlType::kF32 : model::GgmlType::kQ8_0, 1);
    if (!w.ok()) return Fail(w.status());
    synthetic = *std::move(w);
    weights = synthetic.get();
  } else {
    loaded = engine::LoadModel(o.model, {.residence = engine::ResidenceFor(o.device)});
    if (!loaded.ok()) return Fail(loaded.status());
    weights = loaded->weights.get();
  }
  const model::ModelConfig* config = &weights->config();
  const std::string model_name = o.synthetic.empty() ? o.model : StrCat("synthetic:", o.synthetic);
  engine::EngineOptions eo;
  eo.num_threads = o.threads;
  eo.kv_cache_bytes = o.kv_cache_bytes;
  eo.device = o.device;
  eo.gpu = o.gpu;
  eo.batch_invariant = o.batch_invariant;
  eo.enforce_eager = o.enforce_eager;
  eo.kv_dtype = o.kv_dtype;
  eo.cpu_math = o.cpu_math;
  eo.scheduler.max_running = std::max(64, o.batch);
  // Every prompt in one pass, unchunked (the prefill figures are single passes).
  int32_t longest = std::max({2048, o.batch * o.batch_prompt, o.prompt_tokens});
  for (int32_t n : o.pp_sweep) longest = std::max(longest, n);
  eo.scheduler.max_batched_tokens = longest;
  eo.scheduler.max_prefill_chunk = longest;
  auto eng = engine::Engine::Create(*weights, eo);
  if (!eng.ok()) return Fail(eng.status());
  engine::Engine& e = **eng;
  const int32_t vocab = static_cast<int32_t>(config->vocab_size);
  const int threads = e.num_threads();

  RunBatch(e, 1, 16, 4, vocab, 99);  // warm-up
  std::vector<double> pp, tg, batched_tg, batched_pp;
  for (int r = 0; r < o.repetitions; ++r) {
    BatchRun a = RunBatch(e, 1, o.prompt_tokens, 1, vocab, 1000 + r);
    pp.push_back(o.prompt_tokens / a.first_token_s);
    BatchRun b = RunBatch(e, 1, 1, o.gen_tokens + 1, vocab, 2000 + r);
    tg.push_back(o.gen_tokens / b.decode_s);
  }
  BatchRun c = RunBatch(e, o.batch, o.batch_prompt, o.batch_gen + 1, vocab, 3000);
  const double s_pp = double(o.batch) * o.batch_prompt / c.first_token_s;
  const double s_tg = double(o.batch) * o.batch_gen / c.decode_s;
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  const double peak_rss_mib = ru.ru_maxrss / 1024.0;
  // A decode step reads every weight once, except the experts a token does not pick.
  const double weight_mb = e.token_read_bytes() / 1e6;
  // This machine's ceilings are the host's: they bound the CPU engine only (a GPU's are
  // measured by tests/gpu/ceilings.py in the same run).
  const bool on_host = e.device() != "cuda";
  const double bw = on_host ? ReadBandwidthGBs(threads) : 0;
  const double gemm = on_host ? GemmGflops(threads) : 0;
  // Prefill FLOPs per token ≈ 2 × parameters in the matmuls (attention excluded).
  const double params = MatmulParams(*config);
  const double pp_gflops = Median(pp) * 2 * params / 1e9;

  // The prefill line, as the source document measures it: TTFT of one request per
  // length, a least-squares fit, the slope's FLOP/s against the peak.
  nlohmann::json sweep = nlohmann::json::array();
  nlohmann::json fit;
  if (!o.pp_sweep.empty()) {
    std::vector<double> xs, ys;
    for (int32_t n : o.pp_sweep) {
      std::vector<double> t;
      for (int r = 0; r < o.repetitions; ++r) {
        t.push_back(RunBatch(e, 1, n, 1, vocab, 5000 + 97 * r + n).first_token_s);
      }
      xs.push_back(n);
      ys.push_back(Median(t));
      sweep.push_back({{"tokens", n}, {"ttft_ms", Median(t) * 1e3}});
    }
    if (auto line = FitLine(xs, ys); line.ok()) {
      const double tflops = 2 * params / line->slope / 1e12;
      fit = {{"intercept_ms", line->intercept * 1e3},
             {"slope_us_per_token", line->slope * 1e6},
             {"tokens_per_s", 1 / line->slope},
             {"tflops", tflops},
             {"r2", line->r2}};
      if (o.peak_tflops > 0) fit["mfu"] = tflops / o.peak_tflops;
    }
  }

  nlohmann::json j = {
      {"model", model_name},
      {"threads", threads},
      {"isa", kernels::MatMulIsa()},
      {"cpu_math", std::string(kernels::CpuMathName(o.cpu_math))},
      {"cpu_math_isa", kernels::MatMulQ8Isa()},
      // Where the weights live: a copy in huge-page memory, or the file mapped.
      {"weights_memory", !loaded.ok() || loaded->file == nullptr ? "synthetic"
                         : loaded->file->huge_pages()            ? "huge-pages"
                                                                 : "mapped"},
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
      {"device", std::string(e.device())},
      {"kv_dtype", std::string(kv::KvDtypeName(o.kv_dtype))},
      {"kv_bytes_per_token", e.kv_layout().BytesPerToken()},
      {"peak_rss_mib", peak_rss_mib},
      {"weight_mb_read_per_token", weight_mb},
      {"weight_mb", e.weight_bytes() / 1e6},
      {"params", config->Parameters().total},
      {"params_per_token", config->Parameters().per_token},
  };
  if (on_host) {
    j["machine_read_gb_per_s"] = bw;
    j["machine_gemm_gflops"] = gemm;
    j["tg_bandwidth_bound_tokens_per_s"] = bw * 1e3 / weight_mb;
    // How far decode is from its roof: the weights it streamed per second against what
    // the machine streams.
    j["tg_weight_gb_per_s"] = Median(tg) * weight_mb / 1e3;
    j["tg_roof_fraction"] = Median(tg) * weight_mb / 1e3 / bw;
    j["pp_gemm_bound_tokens_per_s"] = gemm * 1e9 / (2 * params);
  }
  if (!sweep.empty()) {
    j["pp_sweep"] = sweep;
    j["pp_fit"] = fit;
  }
  if (o.json) {
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf(
        "tandem bench engine: %s, %s, %d threads, %s kernels, %s math (integer path %s), "
        "%s KV\n",
        model_name.c_str(), std::string(e.device()).c_str(), threads, kernels::MatMulIsa(),
        std::string(kernels::CpuMathName(o.cpu_math)).c_str(), kernels::MatMulQ8Isa(),
        std::string(kv::KvDtypeName(o.kv_dtype)).c_str());
    if (config->moe.experts > 0) {
      const model::ModelConfig::ParameterCount n = config->Parameters();
      std::printf(
          "  experts    %lld of %lld per token: %.3g B parameters, %.3g B read per token; "
          "weights %.0f MB, %.0f MB read per token\n",
          static_cast<long long>(config->moe.used), static_cast<long long>(config->moe.experts),
          n.total / 1e9, n.per_token / 1e9, e.weight_bytes() / 1e6, weight_mb);
    }
    if (on_host) {
      std::printf(
          "  pp%-5d %8.1f tokens/s  (%.0f GFLOP/s; GEMM bound %.0f tokens/s at %.0f GFLOP/s)\n",
          o.prompt_tokens, Median(pp), pp_gflops, gemm * 1e9 / (2 * params), gemm);
      std::printf(
          "  tg%-5d %8.1f tokens/s  (weights read at %.1f GB/s, %.0f %% of the machine's %.1f "
          "GB/s; bandwidth bound %.0f tokens/s over %.0f MB)\n",
          o.gen_tokens, Median(tg), Median(tg) * weight_mb / 1e3,
          100 * Median(tg) * weight_mb / 1e3 / bw, bw, bw * 1e3 / weight_mb, weight_mb);
    } else {
      std::printf("  pp%-5d %8.1f tokens/s  (%.0f GFLOP/s)\n", o.prompt_tokens, Median(pp),
                  pp_gflops);
      std::printf("  tg%-5d %8.1f tokens/s  (%.3f ms/token over %.0f MB of weights)\n",
                  o.gen_tokens, Median(tg), 1e3 / Median(tg), weight_mb);
    }
    std::printf("  B=%d, %d+%d: S_PP %.1f tokens/s, S_TG %.1f tokens/s\n", o.batch, o.batch_prompt,
                o.batch_gen, s_pp, s_tg);
    std::printf("  peak RSS %.0f MiB with a %lld MiB KV pool\n", peak_rss_mib,
                static_cast<long long>(o.kv_cache_bytes >> 20));
    for (const auto& p : sweep) {
      std::printf("  prefill %6d tokens: TTFT %.2f ms\n", p["tokens"].get<int>(),
                  p["ttft_ms"].get<double>());
    }
    if (!fit.is_null()) std::printf("  prefill line: %s\n", fit.dump().c_str());
  }
  return 0;
}

}  // namespace tandem::cli
