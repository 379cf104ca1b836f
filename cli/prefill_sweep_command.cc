#include "cli/prefill_sweep_command.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "cli/bench_prompts.h"
#include "cli/bench_stats.h"
#include "cli/exit_status.h"
#include "cli/machine_limits.h"
#include "common/engine/loaded_model.h"
#include "common/util/strings.h"

namespace tandem::cli {

CLI::App* AddPrefillSweepCommand(CLI::App* bench, PrefillSweepOptions* o) {
  CLI::App* cmd = bench->add_subcommand(
      "prefill-sweep", "TTFT of one-token requests over prompt lengths; line fit, MFU");
  cmd->add_option("--backend", o->target.backend, "grpc, openai")->capture_default_str();
  cmd->add_option("--endpoint", o->target.endpoint, "The server")->required();
  cmd->add_option("--model,-m", o->model, "The GGUF the server runs")->required();
  cmd->add_option("--served-model-name", o->target.model, "OpenAI `model` field");
  cmd->add_option("--api-key", o->target.api_key)->envname("TANDEM_API_KEY");
  cmd->add_option("--lengths", o->lengths, "Prompt lengths")->delimiter(',')->capture_default_str();
  cmd->add_option("--repeats", o->repeats)->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--gemm-threads", o->gemm_threads,
                  "Threads for the GEMM FLOP/s measurement (the prefill worker's)")
      ->capture_default_str();
  cmd->add_option("--result-json", o->result_json, "Also write the results here");
  cmd->add_flag("--json", o->json, "Print JSON instead of the table");
  return cmd;
}

int RunPrefillSweep(const PrefillSweepOptions& o) {
  auto model = engine::LoadModel(o.model);
  if (!model.ok()) return Fail(model.status());
  auto target = MakeLoadTarget(o.target);
  if (!target.ok()) return Fail(target.status());
  const tokenizer::Vocab& vocab = model->tokenizer->vocab();
  const std::vector<int32_t> ordinary = OrdinaryTokens(vocab);
  std::mt19937 gen(12345);
  std::uniform_int_distribution<size_t> pick(0, ordinary.size() - 1);
  auto request = [&](int32_t n) {
    BenchRequest r;
    r.prompt_ids.resize(static_cast<size_t>(n));
    for (auto& id : r.prompt_ids) id = ordinary[pick(gen)];  // fresh: no cached prefix
    r.max_tokens = 1;
    r.ignore_eos = true;
    return r;
  };
  (void)(*target)->Send(request(32));  // warm-up

  const bool tty = isatty(STDERR_FILENO) != 0;
  std::vector<double> x, y;
  nlohmann::json points = nlohmann::json::array();
  for (int rep = 0; rep < o.repeats; ++rep) {
    for (int32_t n : o.lengths) {
      const RequestResult r = (*target)->Send(request(n));
      if (!r.ok) return Fail(absl::UnavailableError(StrCat("prompt of ", n, ": ", r.error)));
      x.push_back(n);
      y.push_back(r.ttft);
      points.push_back({{"prompt_tokens", n}, {"ttft_s", r.ttft}, {"repeat", rep}});
      if (tty) {
        std::fprintf(stderr, "\r  repeat %d/%d, %d tokens: %.3f s     ", rep + 1, o.repeats, n,
                     r.ttft);
      }
    }
  }
  if (tty) std::fprintf(stderr, "\n");
  auto line = FitLine(x, y);
  if (!line.ok()) return Fail(line.status());
  auto quad = FitQuadratic(x, y);
  const double params = MatmulParams(model->config);
  // The ceiling: the model's own matmul kernels on its own weight types, same threads.
  const double gemm_gflops = ModelGemmGflops(*model->weights, o.gemm_threads);
  const double f32_gemm_gflops = GemmGflops(o.gemm_threads);
  const double achieved_gflops = line->slope > 0 ? 2 * params / line->slope / 1e9 : 0;
  const double mfu = gemm_gflops > 0 ? achieved_gflops / gemm_gflops : 0;

  nlohmann::json j = {{"endpoint", o.target.endpoint},
                      {"backend", o.target.backend},
                      {"model", o.model},
                      {"matmul_params", params},
                      {"points", points},
                      {"fit",
                       {{"intercept_s", line->intercept},
                        {"slope_s_per_token", line->slope},
                        {"prefill_tokens_per_s", line->slope > 0 ? 1 / line->slope : 0},
                        {"r2", line->r2}}},
                      {"gemm_threads", o.gemm_threads},
                      {"machine_gemm_gflops", gemm_gflops},
                      {"f32_gemm_gflops", f32_gemm_gflops},
                      {"achieved_gflops", achieved_gflops},
                      {"mfu", mfu}};
  if (quad.ok()) {
    j["quadratic"] = {{"c0_s", quad->c0},
                      {"c1_s_per_token", quad->c1},
                      {"c2_s_per_token2", quad->c2},
                      {"r2", quad->r2}};
  }
  nlohmann::json estimate = nlohmann::json::array();
  for (int32_t n : o.lengths) {
    estimate.push_back({{"prompt_tokens", n},
                        {"quick_estimate_s", 2 * params * n / (gemm_gflops * 1e9)},
                        {"fit_s", line->intercept + line->slope * n}});
  }
  j["estimates"] = estimate;
  if (!o.result_json.empty()) std::ofstream(o.result_json) << j.dump(1) << "\n";
  if (o.json) {
    std::printf("%s\n", j.dump(1).c_str());
    return 0;
  }
  std::printf("prefill sweep: %s (%s), %zu points\n", o.target.endpoint.c_str(),
              o.target.backend.c_str(), x.size());
  std::printf("  TTFT ≈ %.1f ms + %.4f ms × prompt tokens   (r² = %.4f)\n", line->intercept * 1e3,
              line->slope * 1e3, line->r2);
  std::printf("  fixed cost (intercept):       %.1f ms\n", line->intercept * 1e3);
  std::printf("  time per prompt token:        %.4f ms\n", line->slope * 1e3);
  std::printf("  prefill throughput (1/slope): %.0f tokens/s\n", 1 / line->slope);
  if (quad.ok()) {
    std::printf("  quadratic: %.1f ms + %.4f ms·n + %.3g ms·n²   (r² = %.4f)\n", quad->c0 * 1e3,
                quad->c1 * 1e3, quad->c2 * 1e3, quad->r2);
  }
  std::printf(
      "  2 × %.1fM parameters / slope = %.1f GFLOP/s; the model's matmuls on %d thread(s)"
      " = %.1f GFLOP/s (float32 GEMM %.1f)  → MFU %.0f %%\n",
      params / 1e6, achieved_gflops, o.gemm_threads, gemm_gflops, f32_gemm_gflops, mfu * 100);
  if (quad.ok() && quad->c1 > 0) {
    std::printf(
        "  linear term of the quadratic: %.4f ms/token = %.1f GFLOP/s → MFU %.0f %% without"
        " the attention term\n",
        quad->c1 * 1e3, 2 * params / quad->c1 / 1e9,
        2 * params / quad->c1 / 1e9 / gemm_gflops * 100);
  }
  std::printf("  %8s %12s %12s\n", "tokens", "fit (s)", "2PN/FLOPs (s)");
  for (const auto& e : estimate) {
    std::printf("  %8d %12.3f %12.3f\n", e["prompt_tokens"].get<int>(), e["fit_s"].get<double>(),
                e["quick_estimate_s"].get<double>());
  }
  return 0;
}

}  // namespace tandem::cli
