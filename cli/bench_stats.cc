#include "cli/bench_stats.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <numeric>

#include "common/util/strings.h"

namespace tandem::cli {

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double rank = std::clamp(p, 0.0, 100.0) / 100.0 * static_cast<double>(v.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(rank));
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (rank - static_cast<double>(lo));
}

Summary Summarize(const std::vector<double>& v) {
  Summary s;
  s.n = v.size();
  if (v.empty()) return s;
  s.mean = std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
  s.p50 = Percentile(v, 50);
  s.p90 = Percentile(v, 90);
  s.p99 = Percentile(v, 99);
  s.min = *std::min_element(v.begin(), v.end());
  s.max = *std::max_element(v.begin(), v.end());
  return s;
}

namespace {

double RSquared(const std::vector<double>& y, const std::vector<double>& predicted) {
  const double mean = std::accumulate(y.begin(), y.end(), 0.0) / static_cast<double>(y.size());
  double ss_res = 0, ss_tot = 0;
  for (size_t i = 0; i < y.size(); ++i) {
    ss_res += (y[i] - predicted[i]) * (y[i] - predicted[i]);
    ss_tot += (y[i] - mean) * (y[i] - mean);
  }
  return ss_tot == 0 ? 1.0 : 1.0 - ss_res / ss_tot;
}

// Solves the n×n system a·x = b by Gaussian elimination with partial pivoting; false if
// singular.
bool Solve(std::vector<std::vector<double>> a, std::vector<double> b, std::vector<double>* x) {
  const size_t n = b.size();
  for (size_t c = 0; c < n; ++c) {
    size_t pivot = c;
    for (size_t r = c + 1; r < n; ++r) {
      if (std::fabs(a[r][c]) > std::fabs(a[pivot][c])) pivot = r;
    }
    if (std::fabs(a[pivot][c]) < 1e-300) return false;
    std::swap(a[c], a[pivot]);
    std::swap(b[c], b[pivot]);
    for (size_t r = c + 1; r < n; ++r) {
      const double f = a[r][c] / a[c][c];
      for (size_t k = c; k < n; ++k) a[r][k] -= f * a[c][k];
      b[r] -= f * b[c];
    }
  }
  x->assign(n, 0);
  for (size_t c = n; c-- > 0;) {
    double s = b[c];
    for (size_t k = c + 1; k < n; ++k) s -= a[c][k] * (*x)[k];
    (*x)[c] = s / a[c][c];
  }
  return true;
}

// Least squares for y ≈ Σ coef[k] · x^k, k < degree + 1 (normal equations on x scaled
// to [0, 1] for conditioning).
absl::StatusOr<std::vector<double>> FitPolynomial(const std::vector<double>& x,
                                                  const std::vector<double>& y, int degree) {
  const size_t terms = static_cast<size_t>(degree) + 1;
  if (x.size() != y.size() || x.size() < terms) {
    return absl::InvalidArgumentError(
        StrCat("fit: need at least ", terms, " points with as many x as y"));
  }
  double scale = 0;
  for (double v : x) scale = std::max(scale, std::fabs(v));
  if (scale == 0) scale = 1;
  std::vector<std::vector<double>> a(terms, std::vector<double>(terms, 0));
  std::vector<double> b(terms, 0);
  for (size_t i = 0; i < x.size(); ++i) {
    std::vector<double> pw(2 * terms, 1);
    for (size_t k = 1; k < pw.size(); ++k) pw[k] = pw[k - 1] * (x[i] / scale);
    for (size_t r = 0; r < terms; ++r) {
      for (size_t c = 0; c < terms; ++c) a[r][c] += pw[r + c];
      b[r] += pw[r] * y[i];
    }
  }
  std::vector<double> coef;
  if (!Solve(a, b, &coef)) return absl::InvalidArgumentError("fit: the x values are degenerate");
  for (size_t k = 0; k < terms; ++k) coef[k] /= std::pow(scale, static_cast<double>(k));
  return coef;
}

}  // namespace

absl::StatusOr<LineFit> FitLine(const std::vector<double>& x, const std::vector<double>& y) {
  auto coef = FitPolynomial(x, y, 1);
  if (!coef.ok()) return coef.status();
  LineFit f{(*coef)[0], (*coef)[1], 0};
  std::vector<double> predicted;
  for (double v : x) predicted.push_back(f.intercept + f.slope * v);
  f.r2 = RSquared(y, predicted);
  return f;
}

absl::StatusOr<QuadraticFit> FitQuadratic(const std::vector<double>& x,
                                          const std::vector<double>& y) {
  auto coef = FitPolynomial(x, y, 2);
  if (!coef.ok()) return coef.status();
  QuadraticFit f{(*coef)[0], (*coef)[1], (*coef)[2], 0};
  std::vector<double> predicted;
  for (double v : x) predicted.push_back(f.c0 + f.c1 * v + f.c2 * v * v);
  f.r2 = RSquared(y, predicted);
  return f;
}

double RequestResult::Tpot() const {
  if (output_tokens < 2) return 0;
  return (e2e - ttft) / static_cast<double>(output_tokens - 1);
}

absl::StatusOr<Slo> ParseSlo(std::string_view spec) {
  Slo slo;
  size_t i = 0;
  while (i < spec.size()) {
    if (spec[i] == ' ' || spec[i] == ',') {
      ++i;
      continue;
    }
    size_t end = spec.find_first_of(" ,", i);
    if (end == std::string_view::npos) end = spec.size();
    const std::string part(spec.substr(i, end - i));
    i = end;
    const size_t colon = part.find(':');
    char* rest = nullptr;
    const double ms = colon == std::string::npos ? 0 : std::strtod(part.c_str() + colon + 1, &rest);
    if (colon == std::string::npos || rest == nullptr || *rest != '\0' || !(ms > 0)) {
      return absl::InvalidArgumentError(
          StrCat("--goodput: '", part, "' is not NAME:MILLISECONDS (e.g. ttft:500)"));
    }
    const std::string name = part.substr(0, colon);
    if (name == "ttft") {
      slo.ttft_ms = ms;
    } else if (name == "tpot") {
      slo.tpot_ms = ms;
    } else if (name == "e2e") {
      slo.e2e_ms = ms;
    } else {
      return absl::InvalidArgumentError(
          StrCat("--goodput: unknown metric '", name, "' (ttft, tpot, e2e)"));
    }
  }
  if (!slo.ttft_ms && !slo.tpot_ms && !slo.e2e_ms) {
    return absl::InvalidArgumentError("--goodput: no SLO given");
  }
  return slo;
}

bool MeetsSlo(const RequestResult& r, const Slo& slo) {
  if (!r.ok) return false;
  if (slo.ttft_ms && r.ttft * 1e3 > *slo.ttft_ms) return false;
  if (slo.tpot_ms && r.Tpot() * 1e3 > *slo.tpot_ms) return false;
  if (slo.e2e_ms && r.e2e * 1e3 > *slo.e2e_ms) return false;
  return true;
}

ServingMetrics ComputeServingMetrics(const std::vector<RequestResult>& results, double duration_s,
                                     const std::optional<Slo>& slo) {
  ServingMetrics m;
  m.duration_s = duration_s;
  std::vector<double> ttft, tpot, itl, e2e;
  int good = 0;
  for (const RequestResult& r : results) {
    if (!r.ok) {
      ++m.failed;
      continue;
    }
    ++m.completed;
    m.input_tokens += r.prompt_tokens;
    m.output_tokens += r.output_tokens;
    ttft.push_back(r.ttft * 1e3);
    e2e.push_back(r.e2e * 1e3);
    if (r.output_tokens >= 2) tpot.push_back(r.Tpot() * 1e3);
    for (double g : r.itl) itl.push_back(g * 1e3);
    if (slo && MeetsSlo(r, *slo)) ++good;
  }
  if (duration_s > 0) {
    m.request_throughput = m.completed / duration_s;
    m.input_throughput = static_cast<double>(m.input_tokens) / duration_s;
    m.output_throughput = static_cast<double>(m.output_tokens) / duration_s;
    m.goodput = slo ? good / duration_s : 0;
  }
  m.ttft_ms = Summarize(ttft);
  m.tpot_ms = Summarize(tpot);
  m.itl_ms = Summarize(itl);
  m.e2e_ms = Summarize(e2e);
  return m;
}

}  // namespace tandem::cli
