#include "cli/attention_bench_command.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>

#include "cli/exit_status.h"
#include "common/rpc/worker_main.h"
#include "common/util/half.h"
#include "common/util/strings.h"
#include "kernels/backend_factory.h"
#include "kernels/kv_storage.h"
#include "nlohmann/json.hpp"

namespace tandem::cli {

CLI::App* AddAttentionBenchCommand(CLI::App* bench, AttentionBenchOptions* o) {
  CLI::App* cmd = bench->add_subcommand("attention", "The paged attention op alone");
  cmd->add_option("--batch", o->batch, "Decode: sequences")->capture_default_str();
  cmd->add_option("--context", o->context, "Decode: cached tokens per sequence")
      ->capture_default_str();
  cmd->add_option("--prefill", o->prefill, "Prefill: one causal prompt of N tokens instead")
      ->capture_default_str();
  cmd->add_option("--heads", o->heads)->capture_default_str();
  cmd->add_option("--kv-heads", o->kv_heads)->capture_default_str();
  cmd->add_option("--head-dim", o->head_dim)->capture_default_str();
  cmd->add_option("--block-size", o->block_size)->capture_default_str();
  cmd->add_option("--repetitions,-r", o->repetitions)->capture_default_str();
  cmd->add_option("--threads,-t", o->threads, "CPU threads (0: every core)");
  cmd->add_flag("--json", o->json, "Print one JSON object");
  rpc::AddDeviceFlags(*cmd, &o->device, &o->gpu, &o->batch_invariant, &o->kv_dtype, nullptr);
  return cmd;
}

int RunAttentionBench(const AttentionBenchOptions& o) {
  if (o.heads < 1 || o.kv_heads < 1 || o.heads % o.kv_heads != 0 || o.head_dim < 2 || o.batch < 1 ||
      o.context < 1 || o.prefill < 0 || o.repetitions < 1 || o.block_size < 1) {
    return Fail(absl::InvalidArgumentError(
        "bench attention: heads must be a multiple of kv-heads, every size positive"));
  }
  auto made = kernels::MakeBackend({.device = o.device,
                                    .num_threads = o.threads,
                                    .gpu = o.gpu,
                                    .batch_invariant = o.batch_invariant});
  if (!made.ok()) return Fail(made.status());
  kernels::Backend& b = **made;
  const bool prefill = o.prefill > 0;
  const int32_t seqs = prefill ? 1 : o.batch, len = prefill ? o.prefill : o.context;
  const int32_t rows = prefill ? o.prefill : o.batch;
  const int32_t blocks_per_seq = (len + o.block_size - 1) / o.block_size;
  const kv::KvLayout layout{1, o.kv_heads, o.head_dim, o.block_size, o.kv_dtype};
  auto kv =
      kernels::KvStorage::Create(&b, layout, int64_t{seqs} * blocks_per_seq * layout.BlockBytes());
  if (!kv.ok()) return Fail(kv.status());
  const int64_t q_cols = int64_t{o.heads} * o.head_dim;
  if (absl::Status st = b.ReserveScratch({rows, q_cols, o.heads * (o.head_dim + 2LL)}); !st.ok())
    return Fail(st);

  // Random K/V, written in pieces of at most 64 MiB (uniform in [-1, 1), one LCG).
  uint64_t state = 12345;
  auto next = [&] {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<float>(static_cast<double>(state >> 11) * 0x1.0p-52 - 1.0);
  };
  const int64_t total = (*kv)->bytes(), piece = int64_t{64} << 20;
  std::vector<uint8_t> host(static_cast<size_t>(std::min(total, piece)));
  for (int64_t at = 0; at < total; at += piece) {
    const int64_t n = std::min(piece, total - at);
    for (int64_t i = 0; i + layout.ElementBytes() <= n; i += layout.ElementBytes()) {
      const float x = next();
      if (o.kv_dtype == kv::KvDtype::kF32) {
        std::memcpy(&host[i], &x, 4);
      } else {
        const uint16_t h = o.kv_dtype == kv::KvDtype::kBF16 ? FloatToBf16(x) : FloatToHalf(x);
        std::memcpy(&host[i], &h, 2);
      }
    }
    b.CopyToDevice(host.data(), (*kv)->buffer(), at, n);
    if (absl::Status st = b.Synchronize(); !st.ok()) return Fail(st);
  }

  // The step plan: positions, q_indptr, kv_len, block_indptr, block_ids.
  std::vector<int32_t> positions, q_indptr{0}, kv_len, block_indptr{0}, block_ids;
  for (int32_t s = 0; s < seqs; ++s) {
    const int32_t n = prefill ? len : 1;
    for (int32_t t = 0; t < n; ++t) positions.push_back(len - n + t);
    q_indptr.push_back(q_indptr.back() + n);
    kv_len.push_back(len);
    for (int32_t k = 0; k < blocks_per_seq; ++k) block_ids.push_back(s * blocks_per_seq + k);
    block_indptr.push_back(static_cast<int32_t>(block_ids.size()));
  }
  std::vector<int32_t> plan;
  std::vector<std::pair<int64_t, int64_t>> parts;
  for (const auto* v : {&positions, &q_indptr, &kv_len, &block_indptr, &block_ids}) {
    parts.push_back({static_cast<int64_t>(plan.size()), static_cast<int64_t>(v->size())});
    plan.insert(plan.end(), v->begin(), v->end());
  }
  const int64_t q_bytes = int64_t{rows} * q_cols * 4;
  auto ints = b.Allocate(kernels::MemoryKind::kActivations, static_cast<int64_t>(plan.size()) * 4);
  auto io = b.Allocate(kernels::MemoryKind::kActivations, 2 * q_bytes);
  if (!ints.ok()) return Fail(ints.status());
  if (!io.ok()) return Fail(io.status());
  b.CopyToDevice(plan.data(), **ints, 0, static_cast<int64_t>(plan.size()) * 4);
  std::vector<float> q(static_cast<size_t>(rows) * q_cols);
  for (float& x : q) x = next();
  b.CopyToDevice(q.data(), **io, 0, q_bytes);
  auto view = [&](int i) {
    return kernels::Tensor{ints->get(), parts[i].first * 4, model::GgmlType::kI32, 1,
                           parts[i].second};
  };
  kernels::StepView step;
  step.positions = view(0);
  step.q_indptr = view(1);
  step.kv_len = view(2);
  step.block_indptr = view(3);
  step.block_ids = view(4);
  step.max_new_tokens = prefill ? len : 1;
  const kernels::Tensor qt{io->get(), 0, model::GgmlType::kF32, rows, q_cols};
  const kernels::Tensor out{io->get(), q_bytes, model::GgmlType::kF32, rows, q_cols};
  const kernels::AttentionShape shape{o.heads, o.kv_heads, o.head_dim,
                                      1.0f / std::sqrt(static_cast<float>(o.head_dim))};

  std::vector<double> ms;
  for (int r = 0; r <= o.repetitions; ++r) {  // the first is a warm-up
    const auto t0 = std::chrono::steady_clock::now();
    b.Attention(qt, step, shape, 0, **kv, out);
    if (absl::Status st = b.Synchronize(); !st.ok()) return Fail(st);
    const double t =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (r > 0) ms.push_back(t);
  }
  std::sort(ms.begin(), ms.end());
  const double median = ms[ms.size() / 2];
  // Decode reads every cached K and V element once; prefill does 2 GEMMs of
  // N × N/2 (causal) × head_dim per head.
  const double kv_bytes = double(seqs) * len * layout.BytesPerToken();
  const double flops = 4.0 * o.heads * o.head_dim * double(len) * len / 2;
  nlohmann::json j = {{"device", std::string(b.name())},
                      {"case", prefill ? "prefill" : "decode"},
                      {"batch", seqs},
                      {"context", len},
                      {"heads", o.heads},
                      {"kv_heads", o.kv_heads},
                      {"head_dim", o.head_dim},
                      {"kv_dtype", std::string(kv::KvDtypeName(o.kv_dtype))},
                      {"median_ms", median},
                      {"best_ms", ms.front()}};
  if (prefill) {
    j["tflops"] = flops / (median * 1e-3) / 1e12;
  } else {
    j["kv_gb_per_s"] = kv_bytes / (median * 1e-3) / 1e9;
  }
  if (o.json) {
    std::printf("%s\n", j.dump().c_str());
  } else if (prefill) {
    std::printf(
        "tandem bench attention (%s): prefill %d tokens causal, %d/%d heads × %d: %.3f ms "
        "(best %.3f), %.1f TFLOP/s\n",
        std::string(b.name()).c_str(), len, o.heads, o.kv_heads, o.head_dim, median, ms.front(),
        j["tflops"].get<double>());
  } else {
    std::printf(
        "tandem bench attention (%s): decode batch %d × context %d, %d/%d heads × %d, %s "
        "KV: %.3f ms (best %.3f), %.1f GB/s of KV\n",
        std::string(b.name()).c_str(), seqs, len, o.heads, o.kv_heads, o.head_dim,
        std::string(kv::KvDtypeName(o.kv_dtype)).c_str(), median, ms.front(),
        j["kv_gb_per_s"].get<double>());
  }
  return 0;
}

}  // namespace tandem::cli
