// `tandem bench prefix-cache` and `tandem bench chunked-prefill`: the two fixes for
// the cost of prefill, measured through a local cluster.
//   prefix-cache: N requests sharing a long system prompt, each with its own question,
//     sent at once to 2 prefill workers — cache on with cache-aware routing vs cache
//     off; TTFT percentiles and the prefix hit rate after each worker's first request.
//   chunked-prefill: a short prompt sent just after a long one starts prefilling —
//     chunked vs whole-prompt prefill; the short prompt's TTFT against the long one's.
#ifndef TANDEM_CLI_CACHE_BENCH_COMMAND_H_
#define TANDEM_CLI_CACHE_BENCH_COMMAND_H_

#include <cstdint>
#include <string>

#include "CLI/CLI.hpp"

namespace tandem::cli {

struct CacheBenchOptions {
  std::string model;
  int threads_per_worker = 1;
  // prefix-cache
  int requests = 64;
  int32_t system_tokens = 1024;
  int32_t question_tokens = 32;
  // chunked-prefill
  int32_t long_tokens = 8000;
  int32_t short_tokens = 50;
  int32_t chunk = 512;
  int delay_ms = 300;
  bool json = false;
};

// Adds both subcommands to `bench`; returns them (prefix-cache, chunked-prefill).
std::pair<CLI::App*, CLI::App*> AddCacheBenchCommands(CLI::App* bench, CacheBenchOptions* o);
int RunPrefixCacheBench(const CacheBenchOptions& o);
int RunChunkedPrefillBench(const CacheBenchOptions& o);

}  // namespace tandem::cli

#endif  // TANDEM_CLI_CACHE_BENCH_COMMAND_H_
