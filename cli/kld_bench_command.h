// `tandem bench kld`: how far --cpu-math fast's next-token distributions are from
// exact's on the same weights and tokens, measured as llama.cpp's
// `llama-perplexity --kl-divergence` measures a quantization: the text is cut into
// windows of `ctx` tokens, each window runs teacher-forced through both (one pass), and
// the second half of each window is scored — mean, median and 99th-percentile KL(exact ‖
// fast), the share of positions where both pick the same top token, and each one's
// perplexity. Both on the CPU backend, one after the other, with the same threads.
// As llama-perplexity does, a window whose vocabulary adds BOS starts with BOS in place
// of its first token.
//
// `--save-logits FILE` also writes exact's distributions in the format of
// `llama-perplexity --kl-divergence-base` ("_logits_", n_ctx u32, n_vocab i32, windows
// i32, every window's tokens i32; then per window and scored position but the last, two
// floats — the step (max − min) / 65535 with min clamped to max − 16, and the smallest
// log-probability — and each token's logit above min in those steps as u16, rounded to
// nearest; rows padded to an even count + 4 u16), so that `llama-perplexity -m <same
// file> -c <ctx> -b <ctx> --kl-divergence --kl-divergence-base FILE` measures llama.cpp's
// distributions against tandem's exact ones on the same tokens.
#ifndef TANDEM_CLI_KLD_BENCH_COMMAND_H_
#define TANDEM_CLI_KLD_BENCH_COMMAND_H_

#include <cstdint>
#include <string>

#include "CLI/CLI.hpp"

namespace tandem::cli {

struct KldBenchOptions {
  std::string model;
  std::string text = "tests/data/kld_corpus.txt";  // license texts, ~28,600 SmolLM2 tokens
  int32_t ctx = 512;       // tokens per window; the second half of each is scored
  int64_t max_tokens = 0;  // of the text to use (0: all of it)
  int threads = 0;
  bool json = false;
  std::string save_logits;  // exact's log-probabilities, llama-perplexity's format ("": none)
};

CLI::App* AddKldBenchCommand(CLI::App* bench, KldBenchOptions* o);
int RunKldBench(const KldBenchOptions& o);

}  // namespace tandem::cli

#endif  // TANDEM_CLI_KLD_BENCH_COMMAND_H_
