// MeteredSink: a ResponseSink that records a request's metrics (time to first token,
// inter-token gaps, end-to-end and per-stage latency, tokens, finish reason or error
// code) on its way to the real sink. The Router wraps every sink in one.
#ifndef TANDEM_ROUTER_METERED_SINK_H_
#define TANDEM_ROUTER_METERED_SINK_H_

#include <chrono>
#include <memory>

#include "common/metrics/metrics.h"
#include "router/response.h"

namespace tandem::router {

class MeteredSink : public ResponseSink {
 public:
  MeteredSink(std::shared_ptr<ResponseSink> inner, metrics::Metrics* metrics)
      : inner_(std::move(inner)), metrics_(metrics) {}

  void OnChunk(OutputChunk chunk) override;
  void OnComplete(const Completion& completion) override;
  void OnError(const absl::Status& status) override;

 private:
  std::shared_ptr<ResponseSink> inner_;
  metrics::Metrics* metrics_;
  std::chrono::steady_clock::time_point last_token_{};
  bool seen_token_ = false;
};

}  // namespace tandem::router

#endif  // TANDEM_ROUTER_METERED_SINK_H_
