// `tandem bench engine`: the single-process engine's speed on one model, measured the
// way llama-bench and llama-batched-bench measure it, plus this machine's limits.
#ifndef TANDEM_CLI_BENCH_COMMAND_H_
#define TANDEM_CLI_BENCH_COMMAND_H_

#include <cstdint>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "common/kv/kv_layout.h"
#include "kernels/backend.h"

namespace tandem::cli {

struct BenchOptions {
  std::string model;
  std::string synthetic;  // a SyntheticConfig shape instead of --model (random weights)
  std::string synthetic_type = "q8_0";  // f32 | q8_0
  int threads = 0;
  std::string device = "cpu";
  int gpu = 0;                   // --gpu: the CUDA device
  bool batch_invariant = false;  // --batch-invariant
  bool enforce_eager = false;    // --enforce-eager
  kv::KvDtype kv_dtype = kv::KvDtype::kF32;
  kernels::CpuMath cpu_math = kernels::DefaultCpuMath();  // --cpu-math
  int repetitions = 3;
  int32_t prompt_tokens = 512;  // pp
  int32_t gen_tokens = 128;     // tg
  int32_t batch = 16;           // concurrent sequences for the batched run
  int32_t batch_prompt = 128;
  int32_t batch_gen = 128;
  int64_t kv_cache_bytes = int64_t{256} << 20;
  // Prefill sweep: one request per length (medians of `repetitions`), a least-squares
  // line TTFT = intercept + slope · tokens, and MFU against `peak_tflops` when given.
  std::vector<int32_t> pp_sweep;
  double peak_tflops = 0;
  bool json = false;
};

// Adds `bench` and `bench engine`; returns `bench` (other benchmarks hang off it).
CLI::App* AddBenchCommand(CLI::App& app, BenchOptions* options);
int RunBench(const BenchOptions& options);

}  // namespace tandem::cli

#endif  // TANDEM_CLI_BENCH_COMMAND_H_
