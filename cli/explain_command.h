// `tandem bench explain`: the roofline of one model on this machine — parameters, KV
// bytes per token (and without GQA), arithmetic intensity of prefill at n tokens and of
// decode at batch b, the measured ridge point (GEMM FLOP/s ÷ read bandwidth), which phase
// is compute- or memory-bound, and each of the source document's misconceptions
// answered with a number from this model on this machine.
#ifndef TANDEM_CLI_EXPLAIN_COMMAND_H_
#define TANDEM_CLI_EXPLAIN_COMMAND_H_

#include <cstdint>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"

namespace tandem::cli {

struct ExplainOptions {
  std::string model;
  int threads = 0;  // 0: every core
  std::vector<int32_t> prefill_tokens = {1, 64, 512, 2048, 8192};
  std::vector<int32_t> batches = {1, 8, 64};
  int32_t context = 1024;  // tokens each decoding sequence has in its KV cache
  std::string result_json;
  bool json = false;
};

CLI::App* AddExplainCommand(CLI::App* bench, ExplainOptions* options);
int RunExplain(const ExplainOptions& options);

}  // namespace tandem::cli

#endif  // TANDEM_CLI_EXPLAIN_COMMAND_H_
