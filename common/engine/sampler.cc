#include "common/engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "absl/container/flat_hash_map.h"
#include "common/engine/philox.h"

namespace tandem::engine {

void Sampler::ApplyPenalties(std::span<float> logits, const SamplingParams& p,
                             std::span<const int32_t> prompt, std::span<const int32_t> output) {
  const int32_t vocab = static_cast<int32_t>(logits.size());
  for (const auto& [t, bias] : p.logit_bias) {
    if (t >= 0 && t < vocab) logits[t] += bias;
  }
  if (p.repetition_penalty != 1.0) {
    const float r = static_cast<float>(p.repetition_penalty);
    std::vector<bool> seen(vocab, false);
    for (auto ids : {prompt, output})
      for (int32_t t : ids)
        if (t >= 0 && t < vocab) seen[t] = true;
    // A tiny penalty divides a positive logit past float's range: it stays the largest
    // finite value instead of becoming +inf (inf − inf would make every probability NaN).
    constexpr float kMax = std::numeric_limits<float>::max();
    for (int32_t t = 0; t < vocab; ++t) {
      if (!seen[t]) continue;
      logits[t] = std::clamp(logits[t] > 0 ? logits[t] / r : logits[t] * r, -kMax, kMax);
    }
  }
  if (p.frequency_penalty != 0.0 || p.presence_penalty != 0.0) {
    absl::flat_hash_map<int32_t, int32_t> count;
    for (int32_t t : output) ++count[t];
    for (auto [t, n] : count) {
      if (t < 0 || t >= vocab) continue;
      logits[t] -= static_cast<float>(p.frequency_penalty * n + p.presence_penalty);
    }
  }
}

std::vector<std::pair<int32_t, double>> Sampler::Distribution(std::span<const float> logits,
                                                              const SamplingParams& p) {
  const int32_t vocab = static_cast<int32_t>(logits.size());
  const double inv_t = 1.0 / p.temperature;
  double mx = -INFINITY;
  for (float l : logits) mx = std::max(mx, static_cast<double>(l));
  std::vector<std::pair<int32_t, double>> probs(vocab);
  double total = 0;
  for (int32_t t = 0; t < vocab; ++t) {
    const double e = std::exp((logits[t] - mx) * inv_t);
    probs[t] = {t, e};
    total += e;
  }
  for (auto& [t, q] : probs) q /= total;
  auto better = [](const auto& a, const auto& b) {
    return a.second != b.second ? a.second > b.second : a.first < b.first;
  };
  size_t keep = probs.size();
  if (p.top_k > 0 && static_cast<size_t>(p.top_k) < keep) {
    keep = p.top_k;
    std::nth_element(probs.begin(), probs.begin() + keep, probs.end(), better);
    probs.resize(keep);
  }
  std::sort(probs.begin(), probs.end(), better);
  if (p.top_p < 1.0) {
    double cum = 0;
    size_t n = 0;
    while (n < probs.size() && cum < p.top_p) cum += probs[n++].second;
    probs.resize(std::max<size_t>(n, 1));
  }
  if (p.min_p > 0.0) {
    const double floor = p.min_p * probs.front().second;
    size_t n = 0;
    while (n < probs.size() && probs[n].second >= floor) ++n;
    probs.resize(std::max<size_t>(n, 1));
  }
  double kept = 0;
  for (const auto& [t, q] : probs) kept += q;
  for (auto& [t, q] : probs) q /= kept;
  return probs;
}

SampleResult Sampler::Sample(std::span<const float> raw, const SamplingParams& p, uint64_t seed,
                             int64_t position, std::span<const int32_t> prompt,
                             std::span<const int32_t> output, std::span<const uint64_t> allowed) {
  std::vector<float> logits(raw.begin(), raw.end());
  ApplyPenalties(logits, p, prompt, output);
  SampleResult r;
  if (!allowed.empty()) {
    constexpr float kMasked = -std::numeric_limits<float>::infinity();
    bool any = false;
    for (size_t w = 0; w * 64 < logits.size(); ++w) {  // a word of 64 tokens at a time
      const uint64_t bits = w < allowed.size() ? allowed[w] : 0;
      const size_t end = std::min(logits.size(), (w + 1) * 64);
      any = any || bits != 0;
      if (bits == ~uint64_t{0}) continue;
      for (size_t t = w * 64; t < end; ++t) {
        if (!((bits >> (t & 63)) & 1)) logits[t] = kMasked;
      }
    }
    if (!any) return r;  // token −1: nothing to sample
  }
  if (p.temperature == 0.0) {
    r.token = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  } else {
    const auto dist = Distribution(logits, p);
    const double u = PhiloxUniform(seed, static_cast<uint64_t>(position));
    double cum = 0;
    // Rounding may leave the sum short of u: the last token with any probability then.
    for (const auto& [t, q] : dist) {
      if (q > 0) r.token = t;
    }
    for (const auto& [t, q] : dist) {
      cum += q;
      if (u < cum && q > 0) {
        r.token = t;
        break;
      }
    }
    if (r.token < 0) {
      // No token has a probability (the logits were not finite): the arg-max, NaN lowest.
      r.token = static_cast<int32_t>(std::max_element(logits.begin(), logits.end(),
                                                      [](float a, float b) {
                                                        return std::isnan(a)
                                                                   ? !std::isnan(b)
                                                                   : !std::isnan(b) && a < b;
                                                      }) -
                                     logits.begin());
    }
  }
  if (p.logprobs >= 0) {
    double mx = *std::max_element(logits.begin(), logits.end());
    double sum = 0;
    for (float l : logits) sum += std::exp(l - mx);
    const double lse = mx + std::log(sum);
    r.logprob = static_cast<float>(logits[r.token] - lse);
    if (p.logprobs > 0) {
      std::vector<int32_t> ids(logits.size());
      std::iota(ids.begin(), ids.end(), 0);
      const size_t n = std::min<size_t>(p.logprobs, ids.size());
      std::partial_sort(ids.begin(), ids.begin() + n, ids.end(), [&](int32_t a, int32_t b) {
        return logits[a] != logits[b] ? logits[a] > logits[b] : a < b;
      });
      for (size_t i = 0; i < n; ++i)
        r.top.push_back({ids[i], static_cast<float>(logits[ids[i]] - lse)});
    }
  }
  return r;
}

bool Sampler::IsPlainGreedy(const SamplingParams& p) {
  return p.temperature == 0.0 && p.repetition_penalty == 1.0 && p.frequency_penalty == 0.0 &&
         p.presence_penalty == 0.0 && p.logprobs < 0 && p.logit_bias.empty();
}

absl::StatusOr<std::vector<SampleResult>> Sampler::SampleRows(kernels::Backend& backend,
                                                              const kernels::Tensor& logits,
                                                              const kernels::Tensor& ids,
                                                              std::span<const SampleRow> rows) {
  const int64_t vocab = logits.cols;
  thread_local std::vector<float> host;  // [rows][vocab], only the rows sampled here
  thread_local std::vector<int32_t> greedy;
  host.resize(static_cast<size_t>(logits.elements()));
  greedy.assign(rows.size(), -1);
  bool any_greedy = false;
  for (size_t r = 0; r < rows.size(); ++r) {
    if (IsPlainGreedy(*rows[r].params) && rows[r].allowed.empty()) {
      any_greedy = true;
    } else {
      backend.CopyToHost(*logits.buffer,
                         logits.offset + static_cast<int64_t>(r) * logits.RowBytes(),
                         logits.RowBytes(), host.data() + r * vocab);
    }
  }
  if (any_greedy) {
    const kernels::Tensor out = {ids.buffer, ids.offset, ids.type, 1,
                                 static_cast<int64_t>(rows.size())};
    backend.ArgMax(logits, out);
    backend.CopyToHost(*ids.buffer, ids.offset, out.bytes(), greedy.data());
  }
  if (absl::Status st = backend.Synchronize(); !st.ok()) return st;
  std::vector<SampleResult> out;
  out.reserve(rows.size());
  for (size_t r = 0; r < rows.size(); ++r) {
    const SampleRow& row = rows[r];
    if (IsPlainGreedy(*row.params) && row.allowed.empty()) {
      SampleResult greedy_result;
      greedy_result.token = greedy[r];
      out.push_back(std::move(greedy_result));
      continue;
    }
    out.push_back(Sample({host.data() + r * vocab, static_cast<size_t>(vocab)}, *row.params,
                         row.seed, row.position, row.prompt, row.output, row.allowed));
  }
  return out;
}

}  // namespace tandem::engine
