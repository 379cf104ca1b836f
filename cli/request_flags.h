// The flags that describe one generation request, shared by `tandem generate` (runs
// it in process) and `tandem client` (sends it to a cluster), so the same flags mean
// the same request — and, at a fixed seed, the same tokens — in both.
#ifndef TANDEM_CLI_REQUEST_FLAGS_H_
#define TANDEM_CLI_REQUEST_FLAGS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "common/engine/sampling_params.h"

namespace tandem::cli {

struct RequestFlags {
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
};

void AddRequestFlags(CLI::App* cmd, RequestFlags* flags);
engine::SamplingParams ToSamplingParams(const RequestFlags& flags);
// --prompt, or all of stdin.
std::string ReadPrompt(const RequestFlags& flags);

}  // namespace tandem::cli

#endif  // TANDEM_CLI_REQUEST_FLAGS_H_
