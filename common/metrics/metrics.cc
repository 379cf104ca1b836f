#include "common/metrics/metrics.h"

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include <algorithm>
#include <cctype>
#include <map>

#include "absl/container/flat_hash_map.h"
#include "common/util/strings.h"

namespace tandem::metrics {

namespace {

// vLLM's buckets (vllm/v1/metrics/loggers.py), so dashboards and SLO queries carry over.
const prometheus::Histogram::BucketBoundaries kTtftBuckets = {
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,  0.25, 0.5,   0.75,
    1.0,   2.5,   5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 160., 640.0, 2560.0};
const prometheus::Histogram::BucketBoundaries kItlBuckets = {
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2,  0.3,  0.4, 0.5,
    0.75, 1.0,   2.5,  5.0,   7.5, 10.0, 20.0, 40.0, 80.0};
const prometheus::Histogram::BucketBoundaries kRequestBuckets = {
    0.3,  0.5,  0.8,  1.0,  1.5,  2.0,   2.5,   5.0,   10.0,   15.0,  20.0,
    30.0, 40.0, 50.0, 60.0, 120., 240.0, 480.0, 960.0, 1920.0, 7680.0};
// KV transfers: from a fraction of a millisecond (a few blocks over NVLink) to seconds.
const prometheus::Histogram::BucketBoundaries kKvTransferBuckets = {
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0};
// A transfer's bytes: 64 KiB (a block of a small model) to 4 GiB (a long Llama-3-70B prompt).
const prometheus::Histogram::BucketBoundaries kKvSizeBuckets = {
    65536.0,    262144.0,    1048576.0,    4194304.0,   16777216.0,
    67108864.0, 268435456.0, 1073741824.0, 4294967296.0};

}  // namespace

std::string_view RoleName(Role role) {
  switch (role) {
    case Role::kRouter:
      return "router";
    case Role::kPrefill:
      return "prefill";
    case Role::kDecode:
      return "decode";
  }
  return "unknown";
}

absl::Status CheckPrefix(std::string_view prefix) {
  for (size_t i = 0; i < prefix.size(); ++i) {
    const unsigned char c = prefix[i];
    const bool ok = std::isalpha(c) || c == '_' || c == ':' || (i > 0 && std::isdigit(c));
    if (!ok) {
      return absl::InvalidArgumentError(
          StrCat("--metrics-prefix: '", prefix,
                 "' is not a metric-name prefix ([a-zA-Z_:][a-zA-Z0-9_:]*)"));
    }
  }
  return absl::OkStatus();
}

// A counter family whose samples are made on first use, by label values.
struct Metrics::LabeledCounters {
  prometheus::Family<prometheus::Counter>* family = nullptr;
  std::mutex mu;
  absl::flat_hash_map<std::string, prometheus::Counter*> by_labels;

  void Increment(const std::map<std::string, std::string>& labels) {
    std::string key;
    for (const auto& [k, v] : labels) key += k + "=" + v + ";";
    std::lock_guard<std::mutex> lock(mu);
    auto [it, inserted] = by_labels.try_emplace(key, nullptr);
    if (inserted) it->second = &family->Add(labels);
    it->second->Increment();
  }
};

// A histogram family with one sample per transport, made on first use.
struct Metrics::TransportHistograms {
  prometheus::Family<prometheus::Histogram>* family = nullptr;
  prometheus::Histogram::BucketBoundaries buckets;
  std::mutex mu;
  absl::flat_hash_map<std::string, prometheus::Histogram*> by_transport;

  void Observe(std::string_view transport, double value) {
    std::lock_guard<std::mutex> lock(mu);
    auto [it, inserted] = by_transport.try_emplace(std::string(transport), nullptr);
    if (inserted) it->second = &family->Add({{"transport", std::string(transport)}}, buckets);
    it->second->Observe(value);
  }
};

struct Metrics::CacheConfigFamily {
  prometheus::Family<prometheus::Gauge>* family = nullptr;
  std::mutex mu;
  prometheus::Gauge* gauge = nullptr;
  int32_t block_size = 0;  // the gauge's labels
  int64_t num_blocks = 0;
};

// A family named prefix + `name` with the process's constant labels.
template <typename Builder>
auto& Metrics::Register(Builder builder, const std::string& name, const std::string& help) {
  return builder.Name(options_.prefix + name)
      .Help(help)
      .Labels({{"model_name", options_.model_name}, {"role", std::string(RoleName(options_.role))}})
      .Register(*registry_);
}

Metrics::Metrics(const MetricsOptions& options)
    : options_(options), registry_(std::make_shared<prometheus::Registry>()) {
  const bool router = options_.role == Role::kRouter;
  running_ = AddGauge("num_requests_running",
                      router ? "Requests past the router's queue (prefilling or decoding)."
                             : "Sequences in the engine's running batch.");
  waiting_ = AddGauge("num_requests_waiting", router ? "Requests in the router's admission queue."
                                                     : "Sequences waiting for the engine.");
  // The gateway's third signal and the pool's shape: a worker's own pool, or on the
  // router the decode pool it fronts (the Gateway API Inference Extension reads these).
  kv_usage_ = AddGauge("kv_cache_usage_perc",
                       router ? "Fraction of the healthy decode workers' KV blocks held by "
                                "sequences (0-1; cached free blocks excluded)."
                              : "Fraction of KV blocks held by sequences (0-1; cached free "
                                "blocks excluded).");
  cache_config_ = std::make_unique<CacheConfigFamily>();
  cache_config_->family = &Register(prometheus::BuildGauge(), "cache_config_info",
                                    router ? "KV cache configuration of the decode pool: block "
                                             "size and blocks over its healthy workers (value 1)."
                                           : "KV cache configuration (value 1).");
  auto histogram = [&](const std::string& name, const std::string& help,
                       const prometheus::Histogram::BucketBoundaries& buckets) {
    return &Register(prometheus::BuildHistogram(), name, help).Add({}, buckets);
  };
  if (router) {
    prompt_tokens_ = AddCounter("prompt_tokens_total", "Prompt tokens of finished requests.");
    generation_tokens_ =
        AddCounter("generation_tokens_total", "Tokens generated for finished requests.");
    auto& success = Register(prometheus::BuildCounter(), "request_success_total",
                             "Requests that finished, by finish reason.");
    success_stop_ = &success.Add({{"finished_reason", "stop"}});
    success_length_ = &success.Add({{"finished_reason", "length"}});
    errors_ = std::make_unique<LabeledCounters>();
    errors_->family = &Register(prometheus::BuildCounter(), "request_errors_total",
                                "Requests that ended with an error, by gRPC status code.");
    auto& placement = Register(prometheus::BuildCounter(), "prefill_placement_total",
                               "Requests started, by where their prompt is prefilled: on a "
                               "prefill worker (remote) or on their decode worker (local).");
    placed_remote_ = &placement.Add({{"where", "remote"}});
    placed_local_ = &placement.Add({{"where", "local"}});
    ttft_ = histogram("time_to_first_token_seconds",
                      "From arrival at the router to the first token leaving it.", kTtftBuckets);
    itl_ = histogram("inter_token_latency_seconds", "Time between consecutive output tokens.",
                     kItlBuckets);
    e2e_ = histogram("e2e_request_latency_seconds", "From arrival to the last token.",
                     kRequestBuckets);
    queue_ = histogram("request_queue_time_seconds", "Time in the router's admission queue.",
                       kRequestBuckets);
    prefill_ = histogram("request_prefill_time_seconds",
                         "Reservation, prefill compute and KV transfer.", kRequestBuckets);
    decode_ = histogram("request_decode_time_seconds", "From the first token to the last.",
                        kRequestBuckets);
    return;
  }
  prefix_queries_ =
      AddCounter("prefix_cache_queries_total", "Prompt tokens looked up in the prefix cache.");
  prefix_hits_ = AddCounter("prefix_cache_hits_total", "Prompt tokens found in the prefix cache.");
  preemptions_ = AddCounter("num_preemptions_total", "Sequences preempted for KV memory.");
  kv_bytes_ =
      AddCounter("kv_transfer_bytes_total", options_.role == Role::kPrefill
                                                ? "KV bytes pushed to decode workers."
                                                : "KV bytes received from prefill workers.");
  kv_failures_ = AddCounter("kv_transfer_failures_total", "KV transfers that failed.");
  if (options_.role == Role::kDecode) {
    spec_drafts_ = AddCounter("spec_decode_num_drafts_total", "Speculative drafts checked.");
    spec_draft_tokens_ =
        AddCounter("spec_decode_num_draft_tokens_total", "Tokens proposed by speculative drafts.");
    spec_accepted_tokens_ =
        AddCounter("spec_decode_num_accepted_tokens_total", "Draft tokens the target model kept.");
    spec_per_position_ =
        &Register(prometheus::BuildCounter(), "spec_decode_num_accepted_tokens_per_pos_total",
                  "Draft tokens kept, by position in the draft.");
  }
  kv_rebuilds_ = AddCounter(
      "kv_transfer_comm_rebuilds_total",
      "Peer communicators (NCCL, CUDA IPC) built again after one broke (a stalled or failed "
      "transfer).");
  if (options_.role == Role::kPrefill) {
    kv_latency_ = std::make_unique<TransportHistograms>();
    kv_latency_->family = &Register(
        prometheus::BuildHistogram(), "kv_transfer_latency_seconds",
        "KV transfer time left after the forward pass (end of compute to acknowledgement), by "
        "transport.");
    kv_latency_->buckets = kKvTransferBuckets;
    kv_size_ = std::make_unique<TransportHistograms>();
    kv_size_->family = &Register(prometheus::BuildHistogram(), "kv_transfer_size_bytes",
                                 "Bytes of one KV transfer, by transport.");
    kv_size_->buckets = kKvSizeBuckets;
    kv_errors_ = std::make_unique<LabeledCounters>();
    kv_errors_->family = &Register(prometheus::BuildCounter(), "kv_transfer_errors_total",
                                   "Failed KV transfers, by transport and gRPC status code.");
  }
}

Metrics::~Metrics() = default;

prometheus::Counter* Metrics::AddCounter(const std::string& name, const std::string& help) {
  return &Register(prometheus::BuildCounter(), name, help).Add({});
}

prometheus::Gauge* Metrics::AddGauge(const std::string& name, const std::string& help) {
  return &Register(prometheus::BuildGauge(), name, help).Add({});
}

void Metrics::SetRefresh(std::function<void(Metrics&)> refresh) {
  std::lock_guard<std::mutex> lock(refresh_mu_);
  refresh_ = std::move(refresh);
}

void Metrics::RequestFinished(const RequestRecord& r) {
  if (ttft_ == nullptr) return;
  prompt_tokens_->Increment(static_cast<double>(r.prompt_tokens));
  generation_tokens_->Increment(static_cast<double>(r.generation_tokens));
  (r.finished_reason == "length" ? success_length_ : success_stop_)->Increment();
  ttft_->Observe(r.ttft);
  e2e_->Observe(r.e2e);
  queue_->Observe(r.queue);
  prefill_->Observe(r.prefill);
  decode_->Observe(r.decode);
}

void Metrics::RequestFailed(std::string_view code) {
  if (errors_ != nullptr) errors_->Increment({{"code", std::string(code)}});
}

void Metrics::PrefillPlaced(bool local) {
  if (placed_local_ != nullptr) (local ? placed_local_ : placed_remote_)->Increment();
}

void Metrics::TokensArrived(double seconds, int32_t tokens) {
  if (itl_ == nullptr || tokens <= 0) return;
  const double each = seconds / tokens;
  for (int32_t i = 0; i < tokens; ++i) itl_->Observe(each);
}

void Metrics::ClearCacheConfig() {
  std::lock_guard<std::mutex> lock(cache_config_->mu);
  if (cache_config_->gauge != nullptr) cache_config_->family->Remove(cache_config_->gauge);
  cache_config_->gauge = nullptr;
}

void Metrics::SetCacheConfig(int32_t block_size, int64_t num_blocks) {
  std::lock_guard<std::mutex> lock(cache_config_->mu);
  if (cache_config_->gauge != nullptr && cache_config_->block_size == block_size &&
      cache_config_->num_blocks == num_blocks) {
    return;
  }
  cache_config_->block_size = block_size;
  cache_config_->num_blocks = num_blocks;
  if (cache_config_->gauge != nullptr) cache_config_->family->Remove(cache_config_->gauge);
  cache_config_->gauge = &cache_config_->family->Add(
      {{"block_size", std::to_string(block_size)}, {"num_gpu_blocks", std::to_string(num_blocks)}});
  cache_config_->gauge->Set(1);
}

void Metrics::SetLoadGauges(const LoadGauges& g) {
  running_->Set(g.running);
  waiting_->Set(g.waiting);
  kv_usage_->Set(g.kv_usage);
}

void Metrics::SyncTotals(const WorkerTotals& t) {
  if (prefix_queries_ == nullptr) return;
  std::lock_guard<std::mutex> lock(totals_mu_);
  auto sync = [](prometheus::Counter* c, int64_t total, int64_t& seen) {
    if (total > seen) c->Increment(static_cast<double>(total - seen));
    seen = std::max(seen, total);
  };
  sync(prefix_queries_, t.prefix_queries, synced_.prefix_queries);
  sync(prefix_hits_, t.prefix_hits, synced_.prefix_hits);
  sync(preemptions_, t.preemptions, synced_.preemptions);
  sync(kv_bytes_, t.kv_transfer_bytes, synced_.kv_transfer_bytes);
  sync(kv_failures_, t.kv_transfer_failures, synced_.kv_transfer_failures);
  sync(kv_rebuilds_, t.kv_comm_rebuilds, synced_.kv_comm_rebuilds);
  if (spec_drafts_ == nullptr) return;
  sync(spec_drafts_, t.spec_drafts, synced_.spec_drafts);
  sync(spec_draft_tokens_, t.spec_draft_tokens, synced_.spec_draft_tokens);
  sync(spec_accepted_tokens_, t.spec_accepted_tokens, synced_.spec_accepted_tokens);
  for (size_t i = 0; i < t.spec_accepted_per_position.size(); ++i) {
    if (i >= spec_per_position_counters_.size()) {
      spec_per_position_counters_.push_back(
          &spec_per_position_->Add({{"position", std::to_string(i)}}));
      synced_.spec_accepted_per_position.push_back(0);
    }
    sync(spec_per_position_counters_[i], t.spec_accepted_per_position[i],
         synced_.spec_accepted_per_position[i]);
  }
}

void Metrics::KvTransferDone(std::string_view transport, double seconds, int64_t bytes) {
  if (kv_latency_ == nullptr) return;
  kv_latency_->Observe(transport, seconds);
  kv_size_->Observe(transport, static_cast<double>(bytes));
}

void Metrics::KvTransferFailed(std::string_view transport, std::string_view code) {
  if (kv_errors_ != nullptr) {
    kv_errors_->Increment({{"transport", std::string(transport)}, {"code", std::string(code)}});
  }
}

std::string Metrics::Scrape() {
  std::lock_guard<std::mutex> lock(refresh_mu_);
  if (refresh_) refresh_(*this);
  return prometheus::TextSerializer().Serialize(registry_->Collect());
}

}  // namespace tandem::metrics
