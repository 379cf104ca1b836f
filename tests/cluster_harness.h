// Cluster: a router with P prefill and D decode workers on loopback, started and
// stopped by a test, with the handles tests need — stubs, per-worker stats, kill -9,
// and the leak oracle (every worker's KV blocks back to their starting count). The
// binaries come from the build's bin/ (or $TANDEM_BIN_DIR: the GPU bundle's).
#ifndef TANDEM_TESTS_CLUSTER_HARNESS_H_
#define TANDEM_TESTS_CLUSTER_HARNESS_H_

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/util/subprocess.h"
#include "tandem/v1/generation.grpc.pb.h"
#include "tandem/v1/kv_transfer.grpc.pb.h"
#include "tandem/v1/worker.grpc.pb.h"

namespace tandem::testing {

struct ClusterConfig {
  int prefill = 1;
  int decode = 1;
  int threads = 1;
  int64_t decode_kv_bytes = int64_t{128} << 20;
  int64_t prefill_kv_bytes = int64_t{128} << 20;
  std::string model;                       // empty: DefaultModelPath()
  std::string device;                      // the workers' --device; empty: TestDevice()
  std::vector<std::string> router_flags;   // extra flags for tandem-router
  std::vector<std::string> prefill_flags;  // ... for every prefill worker
  std::vector<std::string> decode_flags;   // ... for every decode worker
  std::vector<std::string> prefill_env;    // NAME=VALUE added to every prefill worker's
  std::vector<std::string> decode_env;     // ... every decode worker's environment
  // Start waits for the router to be ready; false: only for every worker to answer it
  // (a cluster whose workers cannot pair is never ready).
  bool wait_until_ready = true;
};

class Cluster {
 public:
  enum Role { kPrefill, kDecode };

  // Starts everything and waits until the router sees every worker healthy (and is
  // ready, unless config.wait_until_ready is false); null (and a message
  // in *error) on failure.
  static std::unique_ptr<Cluster> Start(const ClusterConfig& config, std::string* error);
  ~Cluster();  // router first, then workers

  const std::string& endpoint() const { return endpoint_; }
  v1::Generation::Stub* generation() { return generation_.get(); }
  std::string address(Role role, int i) const;
  v1::DecodeWorker::Stub* decode_stub(int i) { return decode_stubs_[i].get(); }
  v1::PrefillWorker::Stub* prefill_stub(int i) { return prefill_stubs_[i].get(); }
  v1::KvTransfer::Stub* kv_stub(int i) { return kv_stubs_[i].get(); }

  // GetWorkerStats of one worker (2 s deadline); false if it did not answer.
  bool Stats(Role role, int i, v1::WorkerStats* out);
  void Kill(Role role, int i);             // SIGKILL, reaped
  void Signal(Role role, int i, int sig);  // e.g. SIGSTOP / SIGCONT
  bool alive(Role role, int i) const;

  // Waits up to `timeout` for every live worker to hold no blocks and no reservation;
  // "" when they do, else what is still held.
  std::string WaitForBaseline(std::chrono::milliseconds timeout = std::chrono::seconds(5));

 private:
  struct Proc {
    Subprocess process;
    int port = 0;
  };
  Cluster() = default;
  Proc* proc(Role role, int i) { return role == kPrefill ? prefill_[i].get() : decode_[i].get(); }
  const Proc* proc(Role role, int i) const {
    return role == kPrefill ? prefill_[i].get() : decode_[i].get();
  }

  std::string dir_;
  std::vector<std::unique_ptr<Proc>> prefill_, decode_;
  std::unique_ptr<Proc> router_;
  std::string endpoint_;
  std::unique_ptr<v1::Generation::Stub> generation_;
  std::vector<std::unique_ptr<v1::PrefillWorker::Stub>> prefill_stubs_;
  std::vector<std::unique_ptr<v1::DecodeWorker::Stub>> decode_stubs_;
  std::vector<std::unique_ptr<v1::KvTransfer::Stub>> kv_stubs_;
};

// One Generate call, read to the end.
struct GenerateResult {
  grpc::Status status;
  std::vector<int32_t> token_ids;
  std::string text;
  int chunks = 0;
  bool completed = false;
  v1::GenerateComplete complete;
  std::vector<std::chrono::steady_clock::time_point> chunk_times;
  std::chrono::steady_clock::time_point end;
};

// `on_chunk(i, ctx)` runs after chunk i arrives (e.g. to cancel). Every call has a
// deadline (`timeout`).
GenerateResult Generate(v1::Generation::Stub* stub, const v1::GenerateRequest& req,
                        std::chrono::milliseconds timeout = std::chrono::seconds(120),
                        const std::function<void(int, grpc::ClientContext*)>& on_chunk = {});

}  // namespace tandem::testing

#endif  // TANDEM_TESTS_CLUSTER_HARNESS_H_
