// `tandem bench batch-sweep`: decode at batch 1 … 64 (or as far as the KV pool allows)
// on the in-process engine: time per output token, aggregate tokens/s and the KV memory
// in use at each batch size, and the knee — the smallest batch that already reaches 90 %
// of the best aggregate throughput (past it, a bigger batch buys little but TPOT and KV).
#ifndef TANDEM_CLI_BATCH_SWEEP_COMMAND_H_
#define TANDEM_CLI_BATCH_SWEEP_COMMAND_H_

#include <cstdint>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "common/kv/kv_layout.h"
#include "kernels/backend.h"

namespace tandem::cli {

struct BatchSweepOptions {
  std::string model;
  std::string device = "cpu";
  int gpu = 0;                   // --gpu: the CUDA device
  bool batch_invariant = false;  // --batch-invariant
  kv::KvDtype kv_dtype = kv::KvDtype::kF32;
  kernels::CpuMath cpu_math = kernels::DefaultCpuMath();  // --cpu-math
  int threads = 0;
  std::vector<int> batches = {1, 2, 4, 8, 16, 32, 64};
  int32_t prompt_tokens = 128;
  int32_t gen_tokens = 64;
  int64_t kv_cache_bytes = int64_t{512} << 20;
  std::string result_json;
  bool json = false;
};

CLI::App* AddBatchSweepCommand(CLI::App* bench, BatchSweepOptions* options);
int RunBatchSweep(const BatchSweepOptions& options);

}  // namespace tandem::cli

#endif  // TANDEM_CLI_BATCH_SWEEP_COMMAND_H_
