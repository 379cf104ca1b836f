// `tandem generate`: one prompt through the single-process engine, streamed to stdout.
#ifndef TANDEM_CLI_GENERATE_COMMAND_H_
#define TANDEM_CLI_GENERATE_COMMAND_H_

#include <cstdint>
#include <optional>
#include <string>

#include "CLI/CLI.hpp"

namespace tandem::cli {

struct GenerateOptions {
  std::string model;
  std::optional<std::string> prompt;  // stdin when absent
  bool chat = false;                  // wrap the prompt in the model's chat template
  std::string system;                 // system message for --chat
  int32_t max_tokens = 256;
  double temperature = 0.8;
  int32_t top_k = 40;
  double top_p = 0.95;
  double min_p = 0.05;
  double repetition_penalty = 1.0;
  double presence_penalty = 0.0;
  double frequency_penalty = 0.0;
  std::optional<uint64_t> seed;
  bool ignore_eos = false;
  bool json = false;
  int threads = 0;
  int64_t kv_cache_bytes = int64_t{256} << 20;
  int32_t block_size = 16;
};

void AddGenerateCommand(CLI::App& app, GenerateOptions* options);

// Process exit code: 0 on success, 1 on error (message on stderr).
int RunGenerate(const GenerateOptions& options);

}  // namespace tandem::cli

#endif  // TANDEM_CLI_GENERATE_COMMAND_H_
