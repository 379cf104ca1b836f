// `tandem inspect`: prints a GGUF file's model config, tokenizer summary and tensors, and
// whether tandem can serve it (every reason when not: config, tensor types it cannot
// decode, features it lacks) with the memory its weights will take.
#ifndef TANDEM_CLI_INSPECT_COMMAND_H_
#define TANDEM_CLI_INSPECT_COMMAND_H_

#include <string>

#include "CLI/CLI.hpp"

namespace tandem::cli {

struct InspectOptions {
  std::string model;
  bool metadata = false;  // also dump every metadata key
};

void AddInspectCommand(CLI::App& app, InspectOptions* options);

// Process exit code: 0 on success, 1 if the file cannot be read.
int RunInspect(const InspectOptions& options);

}  // namespace tandem::cli

#endif  // TANDEM_CLI_INSPECT_COMMAND_H_
