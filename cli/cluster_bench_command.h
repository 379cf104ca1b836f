// `tandem bench cluster`: what disaggregation costs on this machine. Starts `tandem
// serve` (1 prefill + 1 decode worker) and measures, against the single-process
// engine with the same threads per process:
//   - TTFT of a P-token prompt through the cluster vs the same prefill in one process
//     (the difference is RPC + queueing + the KV transfer compute did not hide);
//   - host-transport KV throughput on loopback (a prefill-side sender pushing a
//     P-token reservation's blocks, nothing computing) and its share of TTFT;
//   - inter-token latency p50/p99 through the cluster at batch B vs the engine's
//     decode step at batch B.
#ifndef TANDEM_CLI_CLUSTER_BENCH_COMMAND_H_
#define TANDEM_CLI_CLUSTER_BENCH_COMMAND_H_

#include <cstdint>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "common/kv/kv_layout.h"

namespace tandem::cli {

struct ClusterBenchOptions {
  std::string model;
  int threads_per_worker = 0;  // 0: half the cores (one prefill + one decode worker)
  int repetitions = 5;
  int32_t prompt_tokens = 512;
  std::vector<int32_t> batches = {1, 4, 8};
  int32_t gen_tokens = 64;
  kv::KvDtype kv_dtype = kv::KvDtype::kF32;  // of the cluster, the baseline and the push
  bool json = false;
};

void AddClusterBenchCommand(CLI::App* bench, ClusterBenchOptions* options);
int RunClusterBench(const ClusterBenchOptions& options);

}  // namespace tandem::cli

#endif  // TANDEM_CLI_CLUSTER_BENCH_COMMAND_H_
