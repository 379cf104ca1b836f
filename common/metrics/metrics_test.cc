#include "common/metrics/metrics.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <sstream>

namespace tandem::metrics {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// name{labels} → value, from the text exposition. Reading a series that is absent
// fails the test (it is not read as 0).
struct Scraped {
  std::map<std::string, double> samples;
  double operator[](const std::string& key) const {
    auto it = samples.find(key);
    if (it == samples.end()) {
      ADD_FAILURE() << "no series " << key;
      return std::nan("");
    }
    return it->second;
  }
};

Scraped Samples(const std::string& text) {
  Scraped out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    const size_t space = line.rfind(' ');
    out.samples[line.substr(0, space)] = std::stod(line.substr(space + 1));
  }
  return out;
}

TEST(Metrics, RouterExportsVllmNamesWithPrefixAndLabels) {
  Metrics m({"tandem:", "smol", Role::kRouter});
  m.SetLoadGauges({.running = 3, .waiting = 5});
  RequestRecord r;
  r.finished_reason = "length";
  r.prompt_tokens = 10;
  r.generation_tokens = 4;
  r.ttft = 0.03;  // between the 0.02 and 0.04 bucket bounds
  r.e2e = 1.2;
  m.RequestFinished(r);
  r.finished_reason = "stop";
  r.ttft = 0.5;
  m.RequestFinished(r);
  m.RequestFailed("UNAVAILABLE");
  m.RequestFailed("UNAVAILABLE");
  m.TokensArrived(0.2, 4);  // four gaps of 0.05
  const std::string text = m.Scrape();
  auto s = Samples(text);
  const std::string l = R"(model_name="smol",role="router")";
  EXPECT_EQ(s["tandem:num_requests_running{" + l + "}"], 3);
  EXPECT_EQ(s["tandem:num_requests_waiting{" + l + "}"], 5);
  EXPECT_EQ(s["tandem:prompt_tokens_total{" + l + "}"], 20);
  EXPECT_EQ(s["tandem:generation_tokens_total{" + l + "}"], 8);
  EXPECT_EQ(s["tandem:request_success_total{" + l + R"(,finished_reason="length"})"], 1);
  EXPECT_EQ(s["tandem:request_success_total{" + l + R"(,finished_reason="stop"})"], 1);
  EXPECT_EQ(s["tandem:request_errors_total{" + l + R"(,code="UNAVAILABLE"})"], 2);
  // Cumulative buckets: 0.03 falls in le=0.04 and above, 0.5 in le=0.5 and above.
  EXPECT_EQ(s["tandem:time_to_first_token_seconds_bucket{" + l + R"(,le="0.02"})"], 0);
  EXPECT_EQ(s["tandem:time_to_first_token_seconds_bucket{" + l + R"(,le="0.04"})"], 1);
  EXPECT_EQ(s["tandem:time_to_first_token_seconds_bucket{" + l + R"(,le="0.25"})"], 1);
  EXPECT_EQ(s["tandem:time_to_first_token_seconds_bucket{" + l + R"(,le="0.5"})"], 2);
  EXPECT_EQ(s["tandem:time_to_first_token_seconds_bucket{" + l + R"(,le="+Inf"})"], 2);
  EXPECT_EQ(s["tandem:time_to_first_token_seconds_count{" + l + "}"], 2);
  EXPECT_DOUBLE_EQ(s["tandem:time_to_first_token_seconds_sum{" + l + "}"], 0.53);
  EXPECT_EQ(s["tandem:inter_token_latency_seconds_count{" + l + "}"], 4);
  EXPECT_EQ(s["tandem:inter_token_latency_seconds_bucket{" + l + R"(,le="0.05"})"], 4);
  EXPECT_EQ(s["tandem:e2e_request_latency_seconds_bucket{" + l + R"(,le="1.5"})"], 2);
  for (const char* h : {"request_queue_time_seconds", "request_prefill_time_seconds",
                        "request_decode_time_seconds"}) {
    EXPECT_EQ(s["tandem:" + std::string(h) + "_count{" + l + "}"], 2) << h;
  }
  // Worker metrics are not the router's to export; the decode pool's KV is (a gateway's
  // third signal), with its configuration, relabelled when the pool changes.
  EXPECT_THAT(text, Not(HasSubstr("prefix_cache_hits_total")));
  EXPECT_EQ(s["tandem:kv_cache_usage_perc{" + l + "}"], 0);
  m.SetLoadGauges({.running = 3, .waiting = 5, .kv_usage = 0.5});
  m.SetCacheConfig(16, 200);
  m.SetCacheConfig(16, 300);
  const auto again = Samples(m.Scrape());
  EXPECT_EQ(again["tandem:kv_cache_usage_perc{" + l + "}"], 0.5);
  EXPECT_EQ(again.samples.count("tandem:cache_config_info{" + l +
                                R"(,block_size="16",num_gpu_blocks="200"})"),
            0u);
  EXPECT_EQ(again["tandem:cache_config_info{" + l + R"(,block_size="16",num_gpu_blocks="300"})"],
            1);
  m.ClearCacheConfig();
  EXPECT_THAT(m.Scrape(), Not(HasSubstr("cache_config_info{")));
  EXPECT_THAT(text, HasSubstr("# TYPE tandem:time_to_first_token_seconds histogram"));
  EXPECT_THAT(text, HasSubstr("# TYPE tandem:prompt_tokens_total counter"));
}

TEST(Metrics, WorkerTotalsBecomeMonotonicCountersAndGaugesRefreshOnScrape) {
  Metrics m({"vllm:", "smol", Role::kPrefill});
  m.SetCacheConfig(16, 100);
  int64_t queries = 0;
  m.SetRefresh([&](Metrics& self) {
    queries += 32;
    self.SetLoadGauges({.running = 2, .waiting = 1, .kv_usage = 0.25});
    self.SyncTotals({.prefix_queries = queries,
                     .prefix_hits = 16,
                     .preemptions = 1,
                     .kv_transfer_bytes = 4096,
                     .kv_transfer_failures = 0,
                     .kv_comm_rebuilds = 2});
  });
  m.KvTransferDone("nccl", 0.003, 4096);
  m.KvTransferDone("host", 0.2, 1 << 20);
  m.KvTransferFailed("nccl", "DEADLINE_EXCEEDED");
  Samples(m.Scrape());
  auto s = Samples(m.Scrape());  // refreshed twice: totals 64 and 16, not summed again
  const std::string l = R"(model_name="smol",role="prefill")";
  EXPECT_EQ(s["vllm:prefix_cache_queries_total{" + l + "}"], 64);
  EXPECT_EQ(s["vllm:prefix_cache_hits_total{" + l + "}"], 16);
  EXPECT_EQ(s["vllm:num_preemptions_total{" + l + "}"], 1);
  EXPECT_EQ(s["vllm:kv_transfer_bytes_total{" + l + "}"], 4096);
  EXPECT_EQ(s["vllm:kv_transfer_failures_total{" + l + "}"], 0);
  EXPECT_EQ(s["vllm:kv_cache_usage_perc{" + l + "}"], 0.25);
  EXPECT_EQ(s["vllm:num_requests_running{" + l + "}"], 2);
  EXPECT_EQ(s["vllm:cache_config_info{" + l + R"(,block_size="16",num_gpu_blocks="100"})"], 1);
  EXPECT_EQ(s["vllm:kv_transfer_comm_rebuilds_total{" + l + "}"], 2);
  EXPECT_EQ(s["vllm:kv_transfer_latency_seconds_count{" + l + R"(,transport="nccl"})"], 1);
  EXPECT_EQ(s["vllm:kv_transfer_latency_seconds_bucket{" + l + R"(,transport="nccl",le="0.005"})"],
            1);
  EXPECT_EQ(s["vllm:kv_transfer_latency_seconds_bucket{" + l + R"(,transport="host",le="0.1"})"],
            0);
  EXPECT_EQ(s["vllm:kv_transfer_size_bytes_sum{" + l + R"(,transport="host"})"], 1 << 20);
  EXPECT_EQ(s["vllm:kv_transfer_size_bytes_bucket{" + l + R"(,transport="nccl",le="65536"})"], 1);
  EXPECT_EQ(
      s["vllm:kv_transfer_errors_total{" + l + R"(,code="DEADLINE_EXCEEDED",transport="nccl"})"],
      1);
  // A total that goes backwards (a restarted counter source) never decrements.
  m.SetRefresh([](Metrics& self) { self.SyncTotals({.prefix_queries = 1}); });
  s = Samples(m.Scrape());
  EXPECT_EQ(s["vllm:prefix_cache_queries_total{" + l + "}"], 64);
}

TEST(Metrics, PrefixMustBeAMetricNamePrefix) {
  EXPECT_TRUE(CheckPrefix("tandem:").ok());
  EXPECT_TRUE(CheckPrefix("vllm:").ok());
  EXPECT_TRUE(CheckPrefix("").ok());
  EXPECT_FALSE(CheckPrefix("9x").ok());
  EXPECT_FALSE(CheckPrefix("a-b").ok());
}

}  // namespace
}  // namespace tandem::metrics
