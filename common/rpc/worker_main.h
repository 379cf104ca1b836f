// What the main() of a process that runs an engine (the workers, `tandem serve`, the
// engine benchmarks) adds to process_main.h: the device and engine flags, and the
// engine's state as Prometheus metrics. The router links none of it.
#ifndef TANDEM_COMMON_RPC_WORKER_MAIN_H_
#define TANDEM_COMMON_RPC_WORKER_MAIN_H_

#include <cstdint>
#include <string>

#include "CLI/CLI.hpp"
#include "common/engine/engine.h"
#include "common/engine/loaded_model.h"
#include "common/kv/kv_layout.h"
#include "common/metrics/metrics.h"

namespace tandem::rpc {

// --kv-dtype (f32, bf16, f16).
void AddKvDtypeFlag(CLI::App& app, kv::KvDtype* kv_dtype);
// --device (cpu, cpu-fence, cuda; the default is $TANDEM_DEVICE where set), --gpu (the
// CUDA device index), --batch-invariant, --kv-dtype and, unless `cpu_math` is null,
// --cpu-math (exact, fast: kernels/backend.h).
void AddDeviceFlags(CLI::App& app, std::string* device, int* gpu, bool* batch_invariant,
                    kv::KvDtype* kv_dtype, kernels::CpuMath* cpu_math);

void AddEngineFlags(CLI::App& app, engine::EngineOptions* options);

// The decode worker's speculative decoding: --speculative ngram|draft|off,
// --draft-model (a path; implies draft), --num-speculative-tokens,
// --speculative-disable-by-batch-size.
struct SpeculativeFlags {
  std::string method;  // unset: draft with a --draft-model, else `otherwise`
  std::string draft_model;
  std::string otherwise = "off";
};
void AddSpeculativeFlags(CLI::App& app, SpeculativeFlags* flags,
                         engine::EngineOptions::Speculative* options);
// Loads the draft model the flags name (into *draft) and sets options->method and
// draft_weights; InvalidArgument for draft without a model or a model with ngram/off.
absl::Status ApplySpeculativeFlags(const SpeculativeFlags& flags, const engine::ModelFile& target,
                                   engine::LoadedModel* draft,
                                   engine::EngineOptions::Speculative* options);

// A worker engine's state as metrics: gauges (running, waiting, KV usage) and totals
// (prefix cache, preemptions, KV transfer bytes and failures, rebuilt peer
// communicators).
void ExportEngineStats(const engine::EngineStats& stats, int64_t kv_transfer_bytes,
                       int64_t kv_transfer_failures, int64_t kv_comm_rebuilds, metrics::Metrics* m);

}  // namespace tandem::rpc

#endif  // TANDEM_COMMON_RPC_WORKER_MAIN_H_
