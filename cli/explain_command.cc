#include "cli/explain_command.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "cli/exit_status.h"
#include "cli/machine_limits.h"
#include "common/engine/loaded_model.h"
#include "common/engine/sampler.h"
#include "common/engine/speculative.h"
#include "common/kv/kv_layout.h"
#include "common/util/strings.h"

namespace tandem::cli {

namespace {

// Attention on random data two ways — the textbook softmax(q·Kᵀ)·V and the tiled online
// softmax FlashAttention uses (running max and sum, rescaled per tile) — in float32; the
// largest difference between their outputs.
// Speculative verification against plain sampling: at `draws` seeded positions of a
// random 64-token distribution (temperature 1, top-p 0.95), the token emitted after a
// random one-token draft, and the token plain decoding draws there. Returns how many
// are the same; *kept: how many drafts were kept.
int SpeculationMatchesPlain(int draws, int* kept) {
  const int vocab = 64;
  std::mt19937 gen(5);
  std::normal_distribution<float> dist(0, 1);
  std::vector<float> logits(2 * vocab);
  for (auto& x : logits) x = dist(gen);
  engine::SamplingParams p;
  p.temperature = 1.0;
  p.top_p = 0.95;
  int same = 0;
  *kept = 0;
  for (int i = 0; i < draws; ++i) {
    const int32_t plain =
        engine::Sampler::Sample(std::span(logits).first(vocab), p, 11, i, {}, {}).token;
    const std::vector<int32_t> draft = {static_cast<int32_t>(gen() % vocab)};
    const auto emitted = engine::VerifyDraft(logits, vocab, draft, p, 11, i, {}, {});
    same += emitted[0].token == plain;
    *kept += emitted.size() == 2;
  }
  return same;
}

double OnlineSoftmaxDifference() {
  const int n = 2048, d = 64, tile = 64;
  std::mt19937 gen(3);
  std::normal_distribution<float> dist(0, 1);
  std::vector<float> q(d), k(n * d), v(n * d);
  for (auto& x : q) x = dist(gen);
  for (auto& x : k) x = dist(gen);
  for (auto& x : v) x = dist(gen);
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  std::vector<float> s(n);
  for (int j = 0; j < n; ++j) {
    float dot = 0;
    for (int t = 0; t < d; ++t) dot += q[t] * k[j * d + t];
    s[j] = dot * scale;
  }
  const float mx = *std::max_element(s.begin(), s.end());
  float sum = 0;
  for (float x : s) sum += std::exp(x - mx);
  std::vector<float> naive(d, 0);
  for (int j = 0; j < n; ++j) {
    const float p = std::exp(s[j] - mx) / sum;
    for (int t = 0; t < d; ++t) naive[t] += p * v[j * d + t];
  }
  float m = -INFINITY, l = 0;
  std::vector<float> acc(d, 0);
  for (int j0 = 0; j0 < n; j0 += tile) {
    float tile_max = m;
    for (int j = j0; j < j0 + tile; ++j) tile_max = std::max(tile_max, s[j]);
    const float correction = std::exp(m - tile_max);
    l *= correction;
    for (float& a : acc) a *= correction;
    for (int j = j0; j < j0 + tile; ++j) {
      const float p = std::exp(s[j] - tile_max);
      l += p;
      for (int t = 0; t < d; ++t) acc[t] += p * v[j * d + t];
    }
    m = tile_max;
  }
  double worst = 0;
  for (int t = 0; t < d; ++t) worst = std::max(worst, double(std::fabs(acc[t] / l - naive[t])));
  return worst;
}

}  // namespace

CLI::App* AddExplainCommand(CLI::App* bench, ExplainOptions* o) {
  CLI::App* cmd = bench->add_subcommand(
      "explain", "Roofline of a model on this machine, and the misconceptions in numbers");
  cmd->add_option("--model,-m", o->model, "GGUF model")->required();
  cmd->add_option("--threads,-t", o->threads, "Threads for the measurements (0: every core)")
      ->capture_default_str();
  cmd->add_option("--prefill-tokens", o->prefill_tokens)->delimiter(',')->capture_default_str();
  cmd->add_option("--batches", o->batches)->delimiter(',')->capture_default_str();
  cmd->add_option("--context", o->context, "KV tokens per decoding sequence")
      ->capture_default_str();
  cmd->add_option("--result-json", o->result_json, "Also write the results here");
  cmd->add_flag("--json", o->json, "Print JSON instead of the report");
  return cmd;
}

int RunExplain(const ExplainOptions& o) {
  auto loaded = engine::LoadModel(o.model);
  if (!loaded.ok()) return Fail(loaded.status());
  const model::ModelConfig& c = loaded->config;
  const int threads = o.threads > 0
                          ? o.threads
                          : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const double params = MatmulParams(c);
  const double weight_bytes = static_cast<double>(loaded->weights->weight_bytes());
  const kv::KvLayout gqa{static_cast<int32_t>(c.n_layers), static_cast<int32_t>(c.n_kv_heads),
                         static_cast<int32_t>(c.head_dim)};
  const kv::KvLayout mha{static_cast<int32_t>(c.n_layers), static_cast<int32_t>(c.n_heads),
                         static_cast<int32_t>(c.head_dim)};
  const double kv_token = static_cast<double>(gqa.BytesPerToken());
  const double kv_token_mha = static_cast<double>(mha.BytesPerToken());
  const double bw = ReadBandwidthGBs(threads) * 1e9;
  // The compute ceiling: the model's own matmul kernels on its own weight types.
  const double flops = ModelGemmGflops(*loaded->weights, threads) * 1e9;
  const double ridge = flops / bw;
  // Causal attention FLOPs over a prompt of n tokens: QKᵀ and PV, half the n² pairs.
  const double attn_per_n2 = 2.0 * c.n_layers * c.n_heads * c.head_dim;
  auto prefill_ai = [&](double n) {
    return (2 * params * n + attn_per_n2 * n * n) / (weight_bytes + n * kv_token);
  };
  auto decode_ai = [&](double b) {
    const double ctx = o.context;
    return (2 * params * b + 2 * attn_per_n2 * ctx * b) / (weight_bytes + b * ctx * kv_token);
  };

  nlohmann::json j = {{"model", o.model},
                      {"threads", threads},
                      {"matmul_params", params},
                      {"weight_bytes", weight_bytes},
                      {"kv_bytes_per_token", kv_token},
                      {"kv_bytes_per_token_without_gqa", kv_token_mha},
                      {"kv_dtype", "float32"},
                      {"read_bandwidth_gb_s", bw / 1e9},
                      {"gemm_gflops", flops / 1e9},
                      {"ridge_flop_per_byte", ridge}};
  nlohmann::json pre = nlohmann::json::array(), dec = nlohmann::json::array();
  for (int32_t n : o.prefill_tokens) {
    const double ai = prefill_ai(n);
    pre.push_back(
        {{"tokens", n}, {"flop_per_byte", ai}, {"bound", ai > ridge ? "compute" : "memory"}});
  }
  for (int32_t b : o.batches) {
    const double ai = decode_ai(b);
    dec.push_back({{"batch", b},
                   {"flop_per_byte", ai},
                   {"bound", ai > ridge ? "compute" : "memory"},
                   {"kv_bytes", double(b) * o.context * kv_token}});
  }
  j["prefill"] = pre;
  j["decode"] = dec;
  // The batch at which decode's intensity reaches the ridge (weights only; KV reads push
  // it further out).
  const double batch_at_ridge = ridge * weight_bytes / (2 * params);
  const double attention_share_2k = attn_per_n2 * 2048 / (2 * params);
  const double attention_share_8k = attn_per_n2 * 8192 / (2 * params);
  const double gqa_flop_saving = 2.0 * c.n_layers * c.hidden_size * 2.0 *
                                 (c.n_heads - c.n_kv_heads) * c.head_dim /
                                 (2 * params + 2.0 * c.n_layers * c.hidden_size * 2.0 *
                                                   (c.n_heads - c.n_kv_heads) * c.head_dim);
  const double flash_diff = OnlineSoftmaxDifference();
  int spec_kept = 0;
  const int spec_draws = 10000;
  const int spec_same = SpeculationMatchesPlain(spec_draws, &spec_kept);
  j["misconceptions"] = {
      {"long_context_kv_bytes_one_sequence", double(c.context_length) * kv_token},
      {"decode_batch_at_ridge", batch_at_ridge},
      {"attention_flop_share_2k", attention_share_2k},
      {"attention_flop_share_8k", attention_share_8k},
      {"decode_b1_flop_per_byte", decode_ai(1)},
      {"gqa_kv_reduction", kv_token_mha / kv_token},
      {"gqa_flop_reduction", gqa_flop_saving},
      {"online_softmax_max_abs_difference", flash_diff},
      {"speculative_draws_identical_to_plain", spec_same},
      {"speculative_draws", spec_draws}};
  if (!o.result_json.empty()) std::ofstream(o.result_json) << j.dump(1) << "\n";
  if (o.json) {
    std::printf("%s\n", j.dump(1).c_str());
    return 0;
  }
  std::printf("tandem bench explain: %s on %d thread(s)\n", o.model.c_str(), threads);
  std::printf("  matmul parameters %.1fM, weights %.1f MB as stored (%s)\n", params / 1e6,
              weight_bytes / 1e6, "GGUF types, read once per forward pass");
  if (c.moe.experts > 0) {
    const model::ModelConfig::ParameterCount n = c.Parameters();
    std::printf(
        "  experts: %lld of %lld per token; %.3g B parameters in all, %.3g B per token (the "
        "matmul parameters above are one token's; a batch reads more experts than one token)\n",
        static_cast<long long>(c.moe.used), static_cast<long long>(c.moe.experts), n.total / 1e9,
        n.per_token / 1e9);
  }
  std::printf(
      "  KV per token: %.0f bytes (%d layers × %d KV heads × %d dims × K,V × 4 bytes);"
      " without GQA (%d heads): %.0f bytes\n",
      kv_token, static_cast<int>(c.n_layers), static_cast<int>(c.n_kv_heads),
      static_cast<int>(c.head_dim), static_cast<int>(c.n_heads), kv_token_mha);
  std::printf(
      "  machine: %.1f GB/s read, %.1f GFLOP/s in the model's matmuls → ridge %.1f"
      " FLOP/byte\n",
      bw / 1e9, flops / 1e9, ridge);
  std::printf("  prefill arithmetic intensity (FLOP/byte):\n");
  for (const auto& p : pre) {
    std::printf("    %6d tokens: %8.1f  %s-bound\n", p["tokens"].get<int>(),
                p["flop_per_byte"].get<double>(), p["bound"].get<std::string>().c_str());
  }
  std::printf("  decode arithmetic intensity at %d KV tokens per sequence:\n", o.context);
  for (const auto& d : dec) {
    std::printf("    batch %4d: %8.1f  %s-bound, KV read per step %.1f MB\n", d["batch"].get<int>(),
                d["flop_per_byte"].get<double>(), d["bound"].get<std::string>().c_str(),
                d["kv_bytes"].get<double>() / 1e6);
  }
  std::printf("\nThe misconceptions, in this model's numbers:\n");
  std::printf(
      "  \"128k context = uses 128k well\": the context here is %lld tokens; one sequence"
      " filling it holds %.0f MB of KV. What the model makes of it is a quality question"
      " this tool does not measure.\n",
      static_cast<long long>(c.context_length), c.context_length * kv_token / 1e6);
  std::printf(
      "  \"The bigger the batch the better\": decode reaches the ridge only near batch"
      " %.0f (weights alone); before that each step costs about the same, after it TPOT"
      " grows with the batch — and every sequence holds %.1f MB of KV at %d tokens"
      " (bench batch-sweep shows the knee).\n",
      batch_at_ridge, o.context * kv_token / 1e6, o.context);
  std::printf(
      "  \"Expensive mainly because attention is O(n²)\": attention adds %.0f %% to"
      " prefill FLOPs at 2k tokens and %.0f %% at 8k; at batch 64 with %d-token"
      " contexts decode reads %.0f MB of KV per step vs %.0f MB of weights.\n",
      attention_share_2k * 100, attention_share_8k * 100, o.context,
      64.0 * o.context * kv_token / 1e6, weight_bytes / 1e6);
  std::printf(
      "  \"Decode is short of compute\": at batch 1 it does %.1f FLOP per byte read,"
      " %.0f× below the ridge — it waits on memory.\n",
      decode_ai(1), ridge / decode_ai(1));
  std::printf(
      "  \"GQA reduces FLOPs\": GQA (%d query heads share %d KV heads) shrinks KV %.1f×"
      " but matmul FLOPs only %.1f %% (K,V projections), attention FLOPs not at all.\n",
      static_cast<int>(c.n_heads), static_cast<int>(c.n_kv_heads), kv_token_mha / kv_token,
      gqa_flop_saving * 100);
  std::printf(
      "  \"The cache stores Q and the scores\": it stores K and V, %.0f bytes per token;"
      " Q is used once and the scores are recomputed each step.\n",
      kv_token);
  std::printf(
      "  \"FlashAttention is an approximation\": tiled online softmax vs textbook softmax"
      " on 2,048 random keys: largest difference %.1e (float32 rounding).\n",
      flash_diff);
  std::printf(
      "  \"Speculative decoding changes the output\": a drafted token is kept only where plain"
      " sampling draws it; seeded draws at T = 1, top-p 0.95 with and without a random draft:"
      " %d of %d identical (%d drafts kept). Greedy and seeded outputs are the same with"
      " `--speculative ngram` or a draft model, which only change the speed"
      " (`tandem bench speculative` checks it on every run).\n",
      spec_same, spec_draws, spec_kept);
  std::printf(
      "  \"Cache the answers\": tandem caches the K/V of prompt prefixes; a cached"
      " 1,024-token prefix saves ≈ %.2f s of prefill at this GEMM rate (2 × %.0fM × 1024"
      " FLOPs).\n",
      2 * params * 1024 / flops, params / 1e6);
  return 0;
}

}  // namespace tandem::cli
