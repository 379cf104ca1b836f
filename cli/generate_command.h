// `tandem generate`: one prompt through the single-process engine, streamed to stdout.
#ifndef TANDEM_CLI_GENERATE_COMMAND_H_
#define TANDEM_CLI_GENERATE_COMMAND_H_

#include <cstdint>
#include <string>

#include "CLI/CLI.hpp"
#include "cli/request_flags.h"
#include "common/kv/kv_layout.h"
#include "kernels/backend.h"

namespace tandem::cli {

struct GenerateOptions {
  std::string model;
  RequestFlags request;
  int threads = 0;
  int64_t kv_cache_bytes = int64_t{256} << 20;
  int32_t block_size = 16;
  std::string device = "cpu";
  int gpu = 0;                   // --gpu: the CUDA device
  bool batch_invariant = false;  // --batch-invariant
  kv::KvDtype kv_dtype = kv::KvDtype::kF32;
  kernels::CpuMath cpu_math = kernels::DefaultCpuMath();  // --cpu-math
};

void AddGenerateCommand(CLI::App& app, GenerateOptions* options);

// Process exit code: 0 on success, 1 on error (message on stderr).
int RunGenerate(const GenerateOptions& options);

}  // namespace tandem::cli

#endif  // TANDEM_CLI_GENERATE_COMMAND_H_
