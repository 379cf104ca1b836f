// `tandem bench serve`: a load generator for tandem's gRPC API or any OpenAI-compatible
// HTTP server, after vLLM's benchmark_serving: arrivals all at once (--request-rate inf),
// Poisson (--burstiness 1) or gamma, capped by --max-concurrency; prompts of random
// token ids (vLLM's --random-input-len / --random-output-len / --random-range-ratio:
// lengths uniform in [len·(1−r), len·(1+r)]) or a JSONL file ({"prompt": ..., optional
// "max_tokens": N} per line); warm-up requests first. Reports TTFT, TPOT, ITL and E2E
// (mean, p50, p90, p99), request and token throughput, and goodput under --goodput, as a
// table and as JSON (bench_stats.h has the definitions).
#ifndef TANDEM_CLI_SERVE_BENCH_COMMAND_H_
#define TANDEM_CLI_SERVE_BENCH_COMMAND_H_

#include <cstdint>
#include <string>

#include "CLI/CLI.hpp"
#include "cli/load_target.h"

namespace tandem::cli {

struct ServeBenchOptions {
  TargetOptions target;
  std::string tokenizer;  // GGUF whose vocabulary random prompts draw from
  int num_prompts = 100;
  double request_rate = 0;  // requests/s; 0 or inf: all at once
  double burstiness = 1.0;  // gamma shape; 1: Poisson
  int max_concurrency = 0;  // 0: unbounded
  int32_t random_input_len = 512;
  int32_t random_output_len = 128;
  double random_range_ratio = 0;
  std::string dataset_path;  // JSONL; empty: random prompts
  bool ignore_eos = false;
  int num_warmups = 1;
  uint32_t seed = 0;
  std::string goodput;
  std::string result_json;  // also write the JSON here
  bool json = false;        // print JSON instead of the table
  std::string label;        // free text recorded in the JSON (e.g. "tandem-http")
};

CLI::App* AddServeBenchCommand(CLI::App* bench, ServeBenchOptions* options);
int RunServeBench(const ServeBenchOptions& options);

}  // namespace tandem::cli

#endif  // TANDEM_CLI_SERVE_BENCH_COMMAND_H_
