#include "cli/bench_stats.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

namespace tandem::cli {
namespace {

TEST(BenchStats, PercentilesInterpolateLikeNumpy) {
  // numpy.percentile([1, 2, 3, 4], [0, 50, 90, 99, 100]) = 1, 2.5, 3.7, 3.97, 4
  const std::vector<double> v = {4, 1, 3, 2};
  EXPECT_DOUBLE_EQ(Percentile(v, 0), 1);
  EXPECT_DOUBLE_EQ(Percentile(v, 50), 2.5);
  EXPECT_NEAR(Percentile(v, 90), 3.7, 1e-12);
  EXPECT_NEAR(Percentile(v, 99), 3.97, 1e-12);
  EXPECT_DOUBLE_EQ(Percentile(v, 100), 4);
  EXPECT_DOUBLE_EQ(Percentile({7}, 99), 7);
  EXPECT_DOUBLE_EQ(Percentile({}, 50), 0);
  const Summary s = Summarize({1, 2, 3, 4, 10});
  EXPECT_EQ(s.n, 5u);
  EXPECT_DOUBLE_EQ(s.mean, 4);
  EXPECT_DOUBLE_EQ(s.p50, 3);
  EXPECT_DOUBLE_EQ(s.min, 1);
  EXPECT_DOUBLE_EQ(s.max, 10);
  EXPECT_NEAR(s.p90, 7.6, 1e-12);  // numpy: 4 + 0.6 * 6
}

TEST(BenchStats, LineFitRecoversInterceptAndSlope) {
  // A prefill sweep's shape: 40 ms fixed cost, 1.5 ms per token, lengths to 8192.
  std::vector<double> x, y;
  for (double n = 64; n <= 8192; n *= 2) {
    x.push_back(n);
    y.push_back(0.040 + 0.0015 * n);
  }
  auto f = FitLine(x, y);
  ASSERT_TRUE(f.ok());
  EXPECT_NEAR(f->intercept, 0.040, 1e-9);
  EXPECT_NEAR(f->slope, 0.0015, 1e-12);
  EXPECT_NEAR(f->r2, 1.0, 1e-12);

  // With noise the estimate stays close and r2 drops below 1.
  std::mt19937 gen(1);
  std::normal_distribution<double> noise(0, 0.01);
  std::vector<double> xn, yn;
  for (int rep = 0; rep < 5; ++rep) {
    for (double n : x) {
      xn.push_back(n);
      yn.push_back(0.040 + 0.0015 * n + noise(gen));
    }
  }
  auto g = FitLine(xn, yn);
  ASSERT_TRUE(g.ok());
  EXPECT_NEAR(g->slope, 0.0015, 2e-6);
  EXPECT_NEAR(g->intercept, 0.040, 0.01);
  EXPECT_LT(g->r2, 1.0);
  EXPECT_GT(g->r2, 0.999);
}

TEST(BenchStats, QuadraticFitSeesTheAttentionTerm) {
  std::vector<double> x, y;
  for (double n = 256; n <= 65536; n *= 2) {
    x.push_back(n);
    y.push_back(0.05 + 2e-4 * n + 3e-9 * n * n);
  }
  auto f = FitQuadratic(x, y);
  ASSERT_TRUE(f.ok());
  EXPECT_NEAR(f->c0, 0.05, 1e-6);
  EXPECT_NEAR(f->c1, 2e-4, 1e-10);
  EXPECT_NEAR(f->c2, 3e-9, 1e-14);
  EXPECT_NEAR(f->r2, 1.0, 1e-9);
}

TEST(BenchStats, FitsRefuseTooFewOrDegeneratePoints) {
  EXPECT_FALSE(FitLine({1}, {2}).ok());
  EXPECT_FALSE(FitLine({3, 3, 3}, {1, 2, 3}).ok());
  EXPECT_FALSE(FitQuadratic({1, 2}, {1, 2}).ok());
  EXPECT_FALSE(FitLine({1, 2}, {1}).ok());
}

RequestResult Request(double ttft, double e2e, int64_t tokens) {
  RequestResult r;
  r.ok = true;
  r.ttft = ttft;
  r.e2e = e2e;
  r.output_tokens = tokens;
  r.prompt_tokens = 100;
  return r;
}

TEST(BenchStats, TpotAndGoodput) {
  EXPECT_DOUBLE_EQ(Request(0.5, 1.5, 11).Tpot(), 0.1);
  EXPECT_DOUBLE_EQ(Request(0.5, 0.5, 1).Tpot(), 0);

  auto slo = ParseSlo("ttft:600 tpot:50");
  ASSERT_TRUE(slo.ok());
  EXPECT_EQ(*slo->ttft_ms, 600);
  EXPECT_EQ(*slo->tpot_ms, 50);
  EXPECT_FALSE(slo->e2e_ms.has_value());
  EXPECT_FALSE(ParseSlo("ttft").ok());
  EXPECT_FALSE(ParseSlo("speed:5").ok());
  EXPECT_FALSE(ParseSlo("ttft:-1").ok());
  EXPECT_FALSE(ParseSlo("").ok());

  std::vector<RequestResult> rs = {
      Request(0.5, 0.5 + 0.04 * 9, 10),  // meets both
      Request(0.7, 0.7 + 0.04 * 9, 10),  // TTFT too slow
      Request(0.5, 0.5 + 0.06 * 9, 10),  // TPOT too slow
      Request(0.1, 0.1 + 0.01 * 9, 10),  // meets both
  };
  RequestResult failed;
  failed.error = "UNAVAILABLE";
  rs.push_back(failed);
  const ServingMetrics m = ComputeServingMetrics(rs, 2.0, *slo);
  EXPECT_EQ(m.completed, 4);
  EXPECT_EQ(m.failed, 1);
  EXPECT_DOUBLE_EQ(m.goodput, 1.0);  // 2 good requests in 2 s
  EXPECT_DOUBLE_EQ(m.request_throughput, 2.0);
  EXPECT_DOUBLE_EQ(m.output_throughput, 20.0);
  EXPECT_DOUBLE_EQ(m.input_throughput, 200.0);
  EXPECT_DOUBLE_EQ(m.ttft_ms.p50, 500);
  EXPECT_NEAR(m.tpot_ms.mean, (40 + 40 + 60 + 10) / 4.0, 1e-9);
  EXPECT_DOUBLE_EQ(ComputeServingMetrics(rs, 2.0, std::nullopt).goodput, 0);
}

}  // namespace
}  // namespace tandem::cli
