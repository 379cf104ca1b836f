// Metrics: one process's Prometheus metrics (docs/api.md, "Metrics"), as text exposition.
//
// Names are vLLM's with a configurable prefix (`tandem:` by default, `vllm:` makes
// tandem a drop-in for dashboards written for vLLM); counters end in `_total`; the
// request histograms use vLLM's buckets. Every sample carries two constant labels:
// `model_name` and `role` (router, prefill or decode), so label cardinality stays
// fixed — the only other labels are `finished_reason` (stop, length), `code` (a
// gRPC status name), `transport` (host, nccl, cuda-ipc), `where` (local, remote) and
// `cache_config_info`'s two.
//
// Each role registers only what it measures:
//   router  — requests running (past the queue) / waiting (admission queue), prompt and
//             generation tokens, request_success_total, request_errors_total, where
//             prompts were prefilled (prefill_placement_total), and the
//             TTFT, inter-token, E2E, queue, prefill and decode histograms;
//   workers — their engine's running / waiting sequences, KV usage, cache config,
//             prefix-cache queries and hits (tokens), preemptions, KV-transfer bytes
//             and failures, rebuilt peer communicators; the prefill worker also,
//             by transport, the KV-transfer latency and size histograms and the
//             failed transfers by code.
// Gauges and worker counters are refreshed from the process's own stats when scraped
// (SetRefresh), so a scrape costs one stats snapshot plus serialisation.
//
// Thread-safe.
#ifndef TANDEM_COMMON_METRICS_METRICS_H_
#define TANDEM_COMMON_METRICS_METRICS_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"

namespace prometheus {
class Counter;
class Gauge;
class Histogram;
class Registry;
template <typename T>
class Family;
}  // namespace prometheus

namespace tandem::metrics {

enum class Role { kRouter, kPrefill, kDecode };
std::string_view RoleName(Role role);

// The prefix must itself be a valid start of a metric name ([a-zA-Z_:][a-zA-Z0-9_:]*).
absl::Status CheckPrefix(std::string_view prefix);

struct MetricsOptions {
  std::string prefix = "tandem:";
  std::string model_name;
  Role role = Role::kRouter;
};

// One finished request, as the router saw it (seconds).
struct RequestRecord {
  std::string_view finished_reason;  // "stop" or "length"
  int64_t prompt_tokens = 0;
  int64_t generation_tokens = 0;
  double ttft = 0, e2e = 0, queue = 0, prefill = 0, decode = 0;
};

// Monotonic totals a worker keeps; exported as counters.
struct WorkerTotals {
  int64_t prefix_queries = 0;  // prompt tokens looked up in the prefix cache
  int64_t prefix_hits = 0;     // of those, found
  int64_t preemptions = 0;
  int64_t kv_transfer_bytes = 0;
  int64_t kv_transfer_failures = 0;
  int64_t kv_comm_rebuilds = 0;  // peer communicators (NCCL, CUDA IPC) built again
  // Speculative decoding (decode workers), as vLLM counts it.
  int64_t spec_drafts = 0;
  int64_t spec_draft_tokens = 0;
  int64_t spec_accepted_tokens = 0;
  std::vector<int64_t> spec_accepted_per_position = {};  // [i]: draft tokens kept at position i
};

// A process's instantaneous load; exported as gauges. A worker: its engine's running and
// waiting sequences and its KV pool. The router: requests past and in its admission
// queue, and the decode pool it fronts (the Gateway API Inference Extension's signals).
struct LoadGauges {
  int32_t running = 0;
  int32_t waiting = 0;
  double kv_usage = 0;  // 0..1: blocks held by sequences / all blocks
};

class Metrics {
 public:
  explicit Metrics(const MetricsOptions& options);
  ~Metrics();
  Metrics(const Metrics&) = delete;
  Metrics& operator=(const Metrics&) = delete;

  const MetricsOptions& options() const { return options_; }

  // Called at the start of every Scrape, to set gauges and sync totals.
  void SetRefresh(std::function<void(Metrics&)> refresh);

  // --- router and workers ------------------------------------------------------
  void SetLoadGauges(const LoadGauges& g);
  // A worker's KV pool, or (router) the decode pool it fronts: cache_config_info's
  // labels (replaced when they change).
  void SetCacheConfig(int32_t block_size, int64_t num_blocks);
  void ClearCacheConfig();  // no series until the next SetCacheConfig

  // --- router ---------------------------------------------------------------
  void RequestFinished(const RequestRecord& r);
  void RequestFailed(std::string_view grpc_code_name);
  // A request started: its prompt prefilled on its decode worker (`local`) or on a
  // prefill worker.
  void PrefillPlaced(bool local);
  // `tokens` tokens arrived `seconds` after the previous ones: each is observed with
  // seconds / tokens.
  void TokensArrived(double seconds, int32_t tokens);

  // --- workers ----------------------------------------------------------------
  void SyncTotals(const WorkerTotals& t);
  // Prefill: one KV transfer over `transport` ("host", "nccl", "cuda-ipc") ended.
  void KvTransferDone(std::string_view transport, double seconds, int64_t bytes);
  void KvTransferFailed(std::string_view transport, std::string_view grpc_code_name);

  // The text exposition format (version 0.0.4).
  std::string Scrape();

 private:
  template <typename Builder>
  auto& Register(Builder builder, const std::string& name, const std::string& help);
  prometheus::Counter* AddCounter(const std::string& name, const std::string& help);
  prometheus::Gauge* AddGauge(const std::string& name, const std::string& help);

  const MetricsOptions options_;
  std::shared_ptr<prometheus::Registry> registry_;
  std::function<void(Metrics&)> refresh_;
  std::mutex refresh_mu_;  // one refresh + serialisation at a time

  prometheus::Gauge* running_ = nullptr;
  prometheus::Gauge* waiting_ = nullptr;
  // router
  prometheus::Counter* prompt_tokens_ = nullptr;
  prometheus::Counter* generation_tokens_ = nullptr;
  prometheus::Counter* success_stop_ = nullptr;
  prometheus::Counter* success_length_ = nullptr;
  prometheus::Counter* placed_remote_ = nullptr;
  prometheus::Counter* placed_local_ = nullptr;
  prometheus::Histogram* ttft_ = nullptr;
  prometheus::Histogram* itl_ = nullptr;
  prometheus::Histogram* e2e_ = nullptr;
  prometheus::Histogram* queue_ = nullptr;
  prometheus::Histogram* prefill_ = nullptr;
  prometheus::Histogram* decode_ = nullptr;
  struct LabeledCounters;
  std::unique_ptr<LabeledCounters> errors_;
  // workers
  prometheus::Gauge* kv_usage_ = nullptr;
  struct CacheConfigFamily;
  std::unique_ptr<CacheConfigFamily> cache_config_;
  prometheus::Counter* prefix_queries_ = nullptr;
  prometheus::Counter* prefix_hits_ = nullptr;
  prometheus::Counter* preemptions_ = nullptr;
  prometheus::Counter* kv_bytes_ = nullptr;
  prometheus::Counter* kv_failures_ = nullptr;
  prometheus::Counter* spec_drafts_ = nullptr;
  prometheus::Counter* spec_draft_tokens_ = nullptr;
  prometheus::Counter* spec_accepted_tokens_ = nullptr;
  prometheus::Family<prometheus::Counter>* spec_per_position_ = nullptr;
  std::vector<prometheus::Counter*> spec_per_position_counters_ ABSL_GUARDED_BY(totals_mu_);
  prometheus::Counter* kv_rebuilds_ = nullptr;
  struct TransportHistograms;
  std::unique_ptr<TransportHistograms> kv_latency_, kv_size_;  // prefill
  std::unique_ptr<LabeledCounters> kv_errors_;                 // prefill
  std::mutex totals_mu_;
  WorkerTotals synced_ ABSL_GUARDED_BY(totals_mu_);
};

}  // namespace tandem::metrics

#endif  // TANDEM_COMMON_METRICS_METRICS_H_
