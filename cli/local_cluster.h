// LocalCluster: `tandem serve` started by a benchmark — the same binary as this one —
// with extra flags, its endpoints parsed from the ready line, stopped on destruction.
#ifndef TANDEM_CLI_LOCAL_CLUSTER_H_
#define TANDEM_CLI_LOCAL_CLUSTER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/util/subprocess.h"
#include "tandem/v1/generation.pb.h"

namespace tandem::cli {

class LocalCluster {
 public:
  // Starts `tandem serve --model M --grpc-port 0 FLAGS...` and waits until ready.
  static absl::StatusOr<std::unique_ptr<LocalCluster>> Start(const std::string& model,
                                                             const std::vector<std::string>& flags);
  ~LocalCluster();

  const std::string& endpoint() const { return endpoint_; }
  const std::vector<std::string>& prefill() const { return prefill_; }
  const std::vector<std::string>& decode() const { return decode_; }

 private:
  LocalCluster() = default;
  std::string dir_;
  Subprocess serve_;
  std::string endpoint_;
  std::vector<std::string> prefill_, decode_;
};

// A streaming greedy request for `prompt` (token ids) that generates `max_tokens`
// tokens, ignoring end-of-sequence: what the benchmarks send.
v1::GenerateRequest GreedyTokenRequest(const std::vector<int32_t>& prompt, int32_t max_tokens);

}  // namespace tandem::cli

#endif  // TANDEM_CLI_LOCAL_CLUSTER_H_
