// Statistics the benchmarks report, in one place so every tool computes them alike:
// percentiles (linear interpolation between ranks, as numpy and vLLM's benchmark do),
// summaries (mean, p50, p90, p99), least-squares line and quadratic fits (the prefill
// sweep), and per-request serving metrics with goodput.
//
// Definitions (as vLLM's benchmark_serving defines them):
//   TTFT  arrival of the first output token − send time
//   TPOT  (E2E − TTFT) / (output tokens − 1), per request with ≥ 2 output tokens
//   ITL   every gap between consecutive output chunks, pooled over requests
//   E2E   arrival of the last token − send time
//   goodput: requests per second that finished and met every given SLO
//            (TTFT ≤ ttft_ms, TPOT ≤ tpot_ms, E2E ≤ e2e_ms).
// Pure functions.
#ifndef TANDEM_CLI_BENCH_STATS_H_
#define TANDEM_CLI_BENCH_STATS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace tandem::cli {

// The p-th percentile (0..100) of `v`; 0 for an empty `v`.
double Percentile(std::vector<double> v, double p);

struct Summary {
  size_t n = 0;
  double mean = 0, p50 = 0, p90 = 0, p99 = 0, min = 0, max = 0;
};
Summary Summarize(const std::vector<double>& v);

// y ≈ intercept + slope · x, least squares; r2 is the coefficient of determination.
struct LineFit {
  double intercept = 0, slope = 0, r2 = 0;
};
// y ≈ c0 + c1 · x + c2 · x².
struct QuadraticFit {
  double c0 = 0, c1 = 0, c2 = 0, r2 = 0;
};
// InvalidArgument with fewer points than parameters or all x equal.
absl::StatusOr<LineFit> FitLine(const std::vector<double>& x, const std::vector<double>& y);
absl::StatusOr<QuadraticFit> FitQuadratic(const std::vector<double>& x,
                                          const std::vector<double>& y);

// One request as a load generator saw it (seconds from its send time).
struct RequestResult {
  bool ok = false;
  std::string error;
  int64_t prompt_tokens = 0;
  int64_t output_tokens = 0;
  double ttft = 0;
  double e2e = 0;
  std::vector<double> itl;  // gaps between output chunks
  double Tpot() const;      // 0 with fewer than 2 output tokens
};

struct Slo {
  std::optional<double> ttft_ms, tpot_ms, e2e_ms;
};
// "ttft:500 tpot:50 e2e:10000" (any subset, any order) → Slo.
absl::StatusOr<Slo> ParseSlo(std::string_view spec);
bool MeetsSlo(const RequestResult& r, const Slo& slo);

struct ServingMetrics {
  int completed = 0, failed = 0;
  double duration_s = 0;
  int64_t input_tokens = 0, output_tokens = 0;
  double request_throughput = 0;  // completed requests / s
  double input_throughput = 0;    // prompt tokens / s
  double output_throughput = 0;   // output tokens / s
  double goodput = 0;             // requests meeting the SLO / s (0 without an SLO)
  Summary ttft_ms, tpot_ms, itl_ms, e2e_ms;
};
ServingMetrics ComputeServingMetrics(const std::vector<RequestResult>& results, double duration_s,
                                     const std::optional<Slo>& slo);

}  // namespace tandem::cli

#endif  // TANDEM_CLI_BENCH_STATS_H_
