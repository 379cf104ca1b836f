// RunBatch: `n` requests submitted to an in-process engine at once and run to the end —
// how `bench engine` and `bench batch-sweep` time prefill and decode without any server
// in between (as llama-batched-bench does).
#ifndef TANDEM_CLI_ENGINE_BATCH_H_
#define TANDEM_CLI_ENGINE_BATCH_H_

#include <cstdint>

#include "common/engine/engine.h"

namespace tandem::cli {

struct BatchRun {
  double first_token_s = 0;  // from submission to the first token of every request
  double decode_s = 0;       // from then until the last token
  int64_t generated = 0;
  int32_t peak_used_blocks = 0;  // KV blocks held by sequences at the fullest step
  int64_t preemptions = 0;       // during this run
};

// Greedy, ignore_eos, prompts from BenchPrompt(prompt_len, vocab, salt + i).
BatchRun RunBatch(engine::Engine& e, int n, int32_t prompt_len, int32_t gen, int32_t vocab,
                  uint32_t salt);

}  // namespace tandem::cli

#endif  // TANDEM_CLI_ENGINE_BATCH_H_
