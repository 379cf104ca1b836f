// `tandem bench prefill-sweep`: the source document's way to measure prefill. One
// request at a time with one output token, prompt lengths swept (fresh random tokens
// every time, so no prefix cache helps), several repeats; a least-squares line through
// (prompt tokens, TTFT) gives the intercept (fixed cost: network, tokenization,
// scheduling), the slope (time per prompt token) and 1/slope (prefill throughput); a
// quadratic shows the attention term. MFU compares 2 × parameters ÷ slope with the GEMM
// FLOP/s measured in the same run on the same backend.
#ifndef TANDEM_CLI_PREFILL_SWEEP_COMMAND_H_
#define TANDEM_CLI_PREFILL_SWEEP_COMMAND_H_

#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "cli/load_target.h"

namespace tandem::cli {

struct PrefillSweepOptions {
  TargetOptions target;
  std::string model;  // the GGUF the server runs: vocabulary and parameter count
  std::vector<int32_t> lengths = {64, 128, 256, 512, 1024, 2048};
  int repeats = 3;
  int gemm_threads = 1;  // threads of the GEMM measurement: the prefill worker's count
  std::string result_json;
  bool json = false;
};

CLI::App* AddPrefillSweepCommand(CLI::App* bench, PrefillSweepOptions* options);
int RunPrefillSweep(const PrefillSweepOptions& options);

}  // namespace tandem::cli

#endif  // TANDEM_CLI_PREFILL_SWEEP_COMMAND_H_
