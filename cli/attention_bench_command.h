// `tandem bench attention`: one backend's paged attention op alone, on random K/V, the
// way the CUDA backend issue measures it:
//   decode   --batch B sequences of --context C cached tokens, one query row each:
//            time per call and the KV bytes it must read ÷ time (GB/s), to set against
//            the device's measured bandwidth;
//   prefill  --prefill N: one sequence's N-token causal prompt over an empty cache:
//            time per call and FLOP/s (4 · heads · head_dim · N² / 2), to set against
//            torch's scaled_dot_product_attention on the same shape.
// The KV cache is written once through the backend (random bf16/f16/f32 values); the
// timed calls are the Attention op and a Synchronize.
#ifndef TANDEM_CLI_ATTENTION_BENCH_COMMAND_H_
#define TANDEM_CLI_ATTENTION_BENCH_COMMAND_H_

#include <cstdint>
#include <string>

#include "CLI/CLI.hpp"
#include "common/kv/kv_layout.h"

namespace tandem::cli {

struct AttentionBenchOptions {
  std::string device = "cpu";
  int gpu = 0;
  bool batch_invariant = false;
  kv::KvDtype kv_dtype = kv::KvDtype::kBF16;
  int32_t batch = 32;
  int32_t context = 8192;
  int32_t prefill = 0;  // > 0: the prefill case instead of decode
  int32_t heads = 32;
  int32_t kv_heads = 8;
  int32_t head_dim = 128;
  int32_t block_size = 16;
  int repetitions = 10;
  int threads = 0;
  bool json = false;
};

CLI::App* AddAttentionBenchCommand(CLI::App* bench, AttentionBenchOptions* options);
int RunAttentionBench(const AttentionBenchOptions& options);

}  // namespace tandem::cli

#endif  // TANDEM_CLI_ATTENTION_BENCH_COMMAND_H_
