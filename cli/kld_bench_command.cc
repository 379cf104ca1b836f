#include "cli/kld_bench_command.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <vector>

#include "cli/exit_status.h"
#include "common/engine/loaded_model.h"
#include "common/engine/scorer.h"
#include "common/util/status_macros.h"
#include "common/util/strings.h"
#include "kernels/backend_factory.h"
#include "kernels/cpu/matmul_q8.h"
#include "nlohmann/json.hpp"

namespace tandem::cli {

namespace {

// A scorer on the CPU backend with `math`.
absl::StatusOr<std::unique_ptr<engine::Scorer>> CpuScorer(const engine::ModelWeights& w,
                                                          kernels::CpuMath math, int threads,
                                                          int32_t ctx) {
  ASSIGN_OR_RETURN(std::unique_ptr<kernels::Backend> backend,
                   kernels::MakeBackend({.num_threads = threads, .cpu_math = math}));
  return engine::Scorer::Create(w, std::move(backend), ctx);
}

// log Σ exp(x), in double.
double LogSumExp(const float* x, int64_t n) {
  const double m = *std::max_element(x, x + n);
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += std::exp(double{x[i]} - m);
  return m + std::log(s);
}

// One row of llama-perplexity's --kl-divergence-base file from `logits` (the header's
// format): the range [max − 16, max] of the logits in 65,535 steps.
void WriteLogProbRow(const float* logits, int32_t vocab, std::vector<uint16_t>& row,
                     std::ofstream& out) {
  const auto [lo_it, hi_it] = std::minmax_element(logits, logits + vocab);
  const float hi = *hi_it, lo = std::max(*lo_it, hi - 16.0f);
  double z = 0;
  for (int32_t v = 0; v < vocab; ++v) z += std::exp(logits[v] - hi);
  const float log_z = static_cast<float>(std::log(z));
  const float step = (hi - lo) / 65535.0f, min_log_prob = lo - hi - log_z;
  row.assign(static_cast<size_t>(2 * ((vocab + 1) / 2) + 4), 0);
  std::memcpy(row.data(), &step, 4);
  std::memcpy(row.data() + 2, &min_log_prob, 4);
  if (step != 0) {
    const float inv = 1.0f / step;
    for (int32_t v = 0; v < vocab; ++v) {
      if (logits[v] > lo)
        row[static_cast<size_t>(4 + v)] = static_cast<uint16_t>(std::lrint(inv * (logits[v] - lo)));
    }
  }
  out.write(reinterpret_cast<const char*>(row.data()),
            static_cast<std::streamsize>(row.size() * 2));
}

// The q-quantile of `sorted` (ascending, not empty).
double Percentile(const std::vector<double>& sorted, double q) {
  return sorted[static_cast<size_t>(q * static_cast<double>(sorted.size() - 1))];
}

}  // namespace

CLI::App* AddKldBenchCommand(CLI::App* bench, KldBenchOptions* o) {
  CLI::App* cmd = bench->add_subcommand(
      "kld", "--cpu-math fast against exact: KL divergence and top-token agreement on a text");
  cmd->add_option("--model,-m", o->model, "GGUF model")->required();
  cmd->add_option("--text", o->text, "UTF-8 text to score")->capture_default_str();
  cmd->add_option("--ctx", o->ctx, "Tokens per window (the second half of each is scored)")
      ->check(CLI::Range(32, 8192))
      ->capture_default_str();
  cmd->add_option("--max-tokens", o->max_tokens, "Tokens of the text to use (0: all)")
      ->capture_default_str();
  cmd->add_option("--threads,-t", o->threads, "Compute threads (default: all cores)");
  cmd->add_flag("--json", o->json, "Print one JSON object");
  cmd->add_option("--save-logits", o->save_logits,
                  "Also write exact's log-probabilities as llama-perplexity's "
                  "--kl-divergence-base file");
  return cmd;
}

int RunKldBench(const KldBenchOptions& o) {
  std::ifstream in(o.text, std::ios::binary);
  if (!in) return Fail(absl::NotFoundError(StrCat("bench kld: cannot read --text ", o.text)));
  std::stringstream text;
  text << in.rdbuf();
  absl::StatusOr<engine::LoadedModel> model = engine::LoadModel(o.model);
  if (!model.ok()) return Fail(model.status());
  absl::StatusOr<std::vector<int32_t>> tokens = model->tokenizer->Encode(text.str());
  if (!tokens.ok()) return Fail(tokens.status());
  if (o.max_tokens > 0 && static_cast<int64_t>(tokens->size()) > o.max_tokens) {
    tokens->resize(static_cast<size_t>(o.max_tokens));
  }
  const int32_t ctx = o.ctx, scored = ctx / 2;
  const int64_t windows = static_cast<int64_t>(tokens->size()) / ctx;
  if (windows == 0) {
    return Fail(absl::InvalidArgumentError(
        StrCat("bench kld: ", tokens->size(), " tokens, fewer than one window of ", ctx)));
  }
  auto exact = CpuScorer(*model->weights, kernels::CpuMath::kExact, o.threads, ctx);
  if (!exact.ok()) return Fail(exact.status());
  auto fast = CpuScorer(*model->weights, kernels::CpuMath::kFast, o.threads, ctx);
  if (!fast.ok()) return Fail(fast.status());
  const int64_t vocab = model->config.vocab_size;
  std::ofstream base;
  std::vector<uint16_t> row;
  if (!o.save_logits.empty()) {
    base.open(o.save_logits, std::ios::binary | std::ios::trunc);
    if (!base) {
      return Fail(absl::PermissionDeniedError(
          StrCat("bench kld: cannot write --save-logits ", o.save_logits)));
    }
    const uint32_t n_ctx = static_cast<uint32_t>(ctx);
    const int32_t n_vocab = static_cast<int32_t>(vocab), n_chunk = static_cast<int32_t>(windows);
    base.write("_logits_", 8);
    base.write(reinterpret_cast<const char*>(&n_ctx), 4);
    base.write(reinterpret_cast<const char*>(&n_vocab), 4);
    base.write(reinterpret_cast<const char*>(&n_chunk), 4);
    base.write(reinterpret_cast<const char*>(tokens->data()),
               static_cast<std::streamsize>(windows * ctx * 4));
  }
  const tokenizer::Vocab& voc = model->tokenizer->vocab();
  const int32_t bos = voc.add_bos ? voc.bos_id : -1;
  std::vector<double> kld;
  int64_t same_top = 0;
  double nll_exact = 0, nll_fast = 0;
  int64_t nll_count = 0;
  std::vector<float> le, lf;
  for (int64_t win = 0; win < windows; ++win) {
    std::vector<int32_t> window(tokens->begin() + win * ctx, tokens->begin() + (win + 1) * ctx);
    if (bos >= 0) window[0] = bos;
    if (absl::Status st = (*exact)->Logits(window, scored, &le); !st.ok()) return Fail(st);
    if (absl::Status st = (*fast)->Logits(window, scored, &lf); !st.ok()) return Fail(st);
    for (int32_t r = 0; r < scored; ++r) {
      const float* e = le.data() + static_cast<int64_t>(r) * vocab;
      const float* f = lf.data() + static_cast<int64_t>(r) * vocab;
      const double ze = LogSumExp(e, vocab), zf = LogSumExp(f, vocab);
      double kl = 0;
      for (int64_t v = 0; v < vocab; ++v) {
        const double lp = e[v] - ze, lq = f[v] - zf;
        kl += std::exp(lp) * (lp - lq);
      }
      kld.push_back(std::max(kl, 0.0));
      if (base.is_open() && r + 1 < scored)
        WriteLogProbRow(e, static_cast<int32_t>(vocab), row, base);
      same_top += std::max_element(e, e + vocab) - e == std::max_element(f, f + vocab) - f;
      const int32_t pos = ctx - scored + r;  // this row predicts token pos + 1
      if (pos + 1 < ctx) {
        const int32_t next = window[static_cast<size_t>(pos + 1)];
        nll_exact += ze - e[next];
        nll_fast += zf - f[next];
        ++nll_count;
      }
    }
  }
  if (base.is_open() && !base.flush()) {
    return Fail(absl::DataLossError(StrCat("bench kld: writing ", o.save_logits, " failed")));
  }
  std::sort(kld.begin(), kld.end());
  double mean = 0;
  for (double k : kld) mean += k;
  mean /= static_cast<double>(kld.size());
  const double n = static_cast<double>(kld.size());
  const nlohmann::json j = {
      {"model", o.model},
      {"text", o.text},
      {"ctx", ctx},
      {"windows", windows},
      {"scored_tokens", kld.size()},
      {"kld_mean", mean},
      {"kld_median", Percentile(kld, 0.5)},
      {"kld_p99", Percentile(kld, 0.99)},
      {"kld_max", kld.back()},
      {"same_top_token", static_cast<double>(same_top) / n},
      {"ppl_exact", std::exp(nll_exact / static_cast<double>(nll_count))},
      {"ppl_fast", std::exp(nll_fast / static_cast<double>(nll_count))},
      {"fast_isa", kernels::MatMulQ8Isa()},
  };
  if (o.json) {
    std::printf("%s\n", j.dump().c_str());
    return 0;
  }
  std::printf(
      "tandem bench kld: %s, %s: %lld windows of %d, %zu positions scored\n"
      "  KL(exact || fast)   mean %.6f  median %.6f  p99 %.6f  max %.6f\n"
      "  same top token      %.2f %%\n"
      "  perplexity          exact %.4f  fast %.4f\n",
      o.model.c_str(), o.text.c_str(), static_cast<long long>(windows), ctx, kld.size(), mean,
      j["kld_median"].get<double>(), j["kld_p99"].get<double>(), kld.back(),
      100.0 * j["same_top_token"].get<double>(), j["ppl_exact"].get<double>(),
      j["ppl_fast"].get<double>());
  return 0;
}

}  // namespace tandem::cli
