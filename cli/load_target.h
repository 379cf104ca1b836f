// LoadTarget: where `tandem bench serve` sends its requests — tandem's gRPC API, or any
// OpenAI-compatible HTTP server (tandem's front, llama.cpp's llama-server, vLLM, ...),
// through /v1/completions (token-id or text prompts) or /v1/chat/completions.
//
// Send() streams one request and times it on the client's clock: TTFT at the first chunk
// that carries output, each gap between output chunks (ITL), E2E at the end. Token counts
// come from the server's usage when it reports one (tandem always does; OpenAI servers
// with stream_options.include_usage), otherwise prompt = the ids sent and output = the
// number of output chunks.
//
// Thread-safe: one Send per thread, any number of threads.
#ifndef TANDEM_CLI_LOAD_TARGET_H_
#define TANDEM_CLI_LOAD_TARGET_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "cli/bench_stats.h"

namespace tandem::cli {

struct BenchRequest {
  std::vector<int32_t> prompt_ids;  // used when not empty
  std::string prompt_text;          // otherwise
  int32_t max_tokens = 128;
  bool ignore_eos = false;
};

class LoadTarget {
 public:
  virtual ~LoadTarget() = default;
  virtual RequestResult Send(const BenchRequest& request) = 0;
};

struct TargetOptions {
  std::string backend = "grpc";  // grpc | openai | openai-chat
  std::string endpoint;          // grpc: host:port; openai: http(s)://host:port
  std::string model;             // openai: the `model` field (empty: not sent)
  std::string api_key;
  double timeout_s = 3600;
};

absl::StatusOr<std::unique_ptr<LoadTarget>> MakeLoadTarget(const TargetOptions& options);

}  // namespace tandem::cli

#endif  // TANDEM_CLI_LOAD_TARGET_H_
