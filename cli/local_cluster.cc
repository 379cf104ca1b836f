#include "cli/local_cluster.h"

#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "absl/strings/str_split.h"
#include "common/util/strings.h"

namespace tandem::cli {

absl::StatusOr<std::unique_ptr<LocalCluster>> LocalCluster::Start(
    const std::string& model, const std::vector<std::string>& flags) {
  std::unique_ptr<LocalCluster> c(new LocalCluster());
  char dir[] = "/tmp/tandem-bench-XXXXXX";
  if (mkdtemp(dir) == nullptr) return absl::InternalError("mkdtemp failed");
  c->dir_ = dir;
  const std::string log = c->dir_ + "/serve.log";
  std::error_code ec;
  const std::string self = std::filesystem::read_symlink("/proc/self/exe", ec).string();
  std::vector<std::string> args = {self, "serve", "--model", model, "--grpc-port", "0"};
  args.insert(args.end(), flags.begin(), flags.end());
  c->serve_.Start(args, log);
  // "tandem serve ready: gRPC HOST:PORT  (prefill A,B; decode C,D; N threads per worker)"
  for (int i = 0; i < 6000 && c->serve_.running(); ++i) {
    std::ifstream in(log);
    std::stringstream text;
    text << in.rdbuf();
    const std::string out = text.str();
    const size_t at = out.find("ready: gRPC ");
    const size_t p = out.find("(prefill ");
    const size_t d = out.find("; decode ");
    if (at != std::string::npos && p != std::string::npos && d != std::string::npos) {
      c->endpoint_ = out.substr(at + 12, out.find(' ', at + 12) - at - 12);
      const std::string prefill = out.substr(p + 9, d - p - 9);
      const std::string decode = out.substr(d + 9, out.find(';', d + 9) - d - 9);
      c->prefill_ = absl::StrSplit(prefill, ',');
      c->decode_ = absl::StrSplit(decode, ',');
      return c;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return absl::UnavailableError("tandem serve did not start; see " + log);
}

v1::GenerateRequest GreedyTokenRequest(const std::vector<int32_t>& prompt, int32_t max_tokens) {
  v1::GenerateRequest req;
  req.mutable_token_ids()->mutable_ids()->Assign(prompt.begin(), prompt.end());
  req.mutable_sampling_params()->set_max_tokens(max_tokens);
  req.mutable_sampling_params()->set_temperature(0);
  req.mutable_sampling_params()->set_ignore_eos(true);
  req.set_stream(true);
  return req;
}

LocalCluster::~LocalCluster() {
  serve_.Stop(std::chrono::seconds(30));
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
}

}  // namespace tandem::cli
