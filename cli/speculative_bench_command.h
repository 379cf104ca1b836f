// `tandem bench speculative`: what speculative decoding does to decode speed (issue #21).
//
// Decodes the same requests with the in-process engine twice — plain, and speculating
// (prompt lookup, or a draft model) with up to --num-speculative-tokens per draft — at
// each batch size, on two kinds of prompt: repetitive (copying a text back, editing
// code, quoting), where the output repeats the prompt, and open-ended ones, where it
// does not. Per kind and batch: TPOT (decode time per generated token of one sequence)
// plain and speculating, the speed-up (median of --repeat alternating pairs, and its
// range), the acceptance rate (kept ÷ proposed tokens), tokens kept per draft, and
// whether the outputs were identical (greedy, or seeded sampling with --temperature).
// The engine's defaults apply (adaptive k; no drafts while more than
// --speculative-disable-by-batch-size sequences decode).
#ifndef TANDEM_CLI_SPECULATIVE_BENCH_COMMAND_H_
#define TANDEM_CLI_SPECULATIVE_BENCH_COMMAND_H_

#include <cstdint>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "common/engine/engine.h"
#include "common/rpc/worker_main.h"

namespace tandem::cli {

struct SpeculativeBenchOptions {
  std::string model;
  rpc::SpeculativeFlags speculative{.method = "", .draft_model = "", .otherwise = "ngram"};
  engine::EngineOptions engine;  // device, threads, KV and the speculative numbers
  std::vector<int> batches = {1, 16};
  int32_t tokens = 128;
  int repeat = 3;
  double temperature = 0;
  std::string result_json;
  bool json = false;
};

CLI::App* AddSpeculativeBenchCommand(CLI::App* bench, SpeculativeBenchOptions* options);
int RunSpeculativeBench(const SpeculativeBenchOptions& options);

}  // namespace tandem::cli

#endif  // TANDEM_CLI_SPECULATIVE_BENCH_COMMAND_H_
