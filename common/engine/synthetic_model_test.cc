// Synthetic models (named shapes, random weights) and the weights' conversion to bf16
// for a device backend, checked on the CPU.
#include "common/engine/synthetic_model.h"

#include <algorithm>
#include <cstring>
#include <numeric>

#include "common/engine/device_weights.h"
#include "common/engine/engine.h"
#include "common/engine/engine_test_util.h"
#include "common/model/dequantize.h"
#include "common/util/half.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/testing/recording_backend.h"

namespace tandem::engine {
namespace {

TEST(SyntheticModel, NamedShapes) {
  auto c = SyntheticConfig("llama3-8b");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->n_layers, 32);
  EXPECT_EQ(c->hidden_size, 4096);
  EXPECT_EQ(c->n_heads, 32);
  EXPECT_EQ(c->n_kv_heads, 8);
  EXPECT_EQ(c->ffn_size, 14336);
  EXPECT_EQ(c->vocab_size, 128256);
  EXPECT_EQ(c->head_dim, 128);
  auto moe = SyntheticConfig("tiny-moe");
  ASSERT_TRUE(moe.ok()) << moe.status();
  EXPECT_EQ(moe->moe.experts, 16);
  EXPECT_EQ(moe->moe.used, 4);
  EXPECT_TRUE(moe->LayerIsMoe(0));
  auto bad = SyntheticConfig("gpt5");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("llama3-8b"), std::string_view::npos);
}

TEST(SyntheticModel, WeightsAreDeterministicInTheSeed) {
  const model::ModelConfig c = *SyntheticConfig("tiny");
  for (model::GgmlType t : {model::GgmlType::kF32, model::GgmlType::kQ8_0}) {
    auto a = *ModelWeights::Random(c, t, 7), b = *ModelWeights::Random(c, t, 7),
         d = *ModelWeights::Random(c, t, 8);
    const WeightMatrix &wa = a->layers()[2].w_up, &wb = b->layers()[2].w_up,
                       &wd = d->layers()[2].w_up;
    const size_t bytes = static_cast<size_t>(wa.rows) * wa.RowBytes();
    EXPECT_EQ(std::memcmp(wa.data, wb.data, bytes), 0);
    EXPECT_NE(std::memcmp(wa.data, wd.data, bytes), 0);
    // Different tensors draw different values.
    EXPECT_NE(
        std::memcmp(a->layers()[0].wq.data, a->layers()[1].wq.data, a->layers()[0].wq.RowBytes()),
        0);
  }
}

// The tiny shape runs through the engine on either weight type, and the same seed gives
// the same tokens.
TEST(SyntheticModel, RunsThroughTheEngine) {
  const model::ModelConfig c = *SyntheticConfig("tiny");
  for (model::GgmlType t : {model::GgmlType::kF32, model::GgmlType::kQ8_0}) {
    auto w = *ModelWeights::Random(c, t, 3);
    std::vector<std::vector<int32_t>> runs;
    for (int run = 0; run < 2; ++run) {
      EngineOptions o;
      o.num_threads = 2;
      auto e = *Engine::Create(*w, o);
      SamplingParams sp;
      sp.temperature = 0;
      sp.max_tokens = 12;
      sp.ignore_eos = true;
      ASSERT_TRUE(e->AddRequest({1, 5, 900, 17, 3}, sp).ok());
      std::vector<int32_t> got;
      while (e->HasWork())
        for (const auto& ev : StepOk(*e)) got.push_back(ev.token);
      EXPECT_EQ(got.size(), 12u);
      runs.push_back(got);
    }
    EXPECT_EQ(runs[0], runs[1]);
  }
}

// The executor's graph path, exercised on the CPU through a backend that records ops
// as closures: decode steps are captured once per batch size (at its second step, after
// an eager warm-up) and replayed with each step's plan; the tokens equal eager passes', greedy and
// sampled, while requests of different lengths end and the batch shrinks.
TEST(ExecutorGraphs, ReplayedDecodeStepsGiveTheEagerTokens) {
  auto w = *ModelWeights::Random(*SyntheticConfig("tiny"), model::GgmlType::kF32, 4);
  for (double temperature : {0.0, 0.8}) {
    std::vector<std::vector<int32_t>> got[2];
    int captures = 0, replays = 0;
    for (int graphs = 0; graphs < 2; ++graphs) {
      kernels::testing::RecordingBackend* rec = nullptr;
      EngineOptions o;
      o.num_threads = 2;
      o.make_backend = [&]() -> absl::StatusOr<std::unique_ptr<kernels::Backend>> {
        auto b = std::make_unique<kernels::testing::RecordingBackend>(
            kernels::CpuBackendOptions{.num_threads = 2});
        rec = b.get();
        return std::unique_ptr<kernels::Backend>(std::move(b));
      };
      o.enforce_eager = graphs == 0;
      auto e = *Engine::Create(*w, o);
      std::vector<kv::SeqId> ids;
      for (int i = 0; i < 6; ++i) {
        SamplingParams sp;
        sp.temperature = temperature;
        sp.seed = 5 + i;
        sp.max_tokens = 3 + 4 * i;  // the batch shrinks from 6 to 1
        sp.ignore_eos = true;
        std::vector<int32_t> prompt;
        for (int t = 0; t < 1 + 9 * i; ++t) prompt.push_back((t * 37 + i) % 1024);
        ids.push_back(*e->AddRequest(prompt, sp));
      }
      got[graphs].resize(6);
      while (e->HasWork()) {
        for (const auto& ev : StepOk(*e)) {
          const size_t i = std::find(ids.begin(), ids.end(), ev.id) - ids.begin();
          if (ev.token >= 0) got[graphs][i].push_back(ev.token);
        }
      }
      if (graphs == 1) {
        captures = rec->captures();
        replays = rec->replays();
      } else {
        EXPECT_EQ(rec->captures(), 0);
      }
    }
    EXPECT_EQ(got[1], got[0]) << temperature;
    // Batch sizes 6 … 1 each last two or more decode steps: each runs eagerly once,
    // is captured at its second step and replayed after that.
    EXPECT_EQ(captures, 6);
    EXPECT_GE(replays, 2 * captures);
  }
}

// Two executors on one backend (a draft model's beside its target's): when the second
// makes the backend's scratch grow, the graphs the first captured point at memory that
// moved, so its next decode step is captured again instead of replayed; its logits equal
// an eager executor's throughout.
TEST(ExecutorGraphs, AScratchMovedByAnotherExecutorIsCapturedAgain) {
  const model::ModelConfig c = *SyntheticConfig("tiny");
  auto w = *ModelWeights::Random(c, model::GgmlType::kF32, 4);
  kernels::testing::RecordingBackend rec(kernels::CpuBackendOptions{.num_threads = 2});
  kernels::CpuBackend plain(kernels::CpuBackendOptions{.num_threads = 2});
  auto rec_weights = *DeviceWeights::Prepare(*w, &rec);
  auto plain_weights = *DeviceWeights::Prepare(*w, &plain);
  const kv::KvLayout layout{static_cast<int32_t>(c.n_layers), static_cast<int32_t>(c.n_kv_heads),
                            static_cast<int32_t>(c.head_dim), 16, kv::KvDtype::kF32};
  auto rec_kv = *kernels::KvStorage::Create(&rec, layout, int64_t{8} << 20);
  auto plain_kv = *kernels::KvStorage::Create(&plain, layout, int64_t{8} << 20);
  auto graphed = *ModelExecutor::Create(c, *rec_weights, &rec, rec_kv.get(), {64, 4});
  auto eager = *ModelExecutor::Create(c, *plain_weights, &plain, plain_kv.get(), {64, 4, false});
  const std::vector<int32_t> table = {0};
  // The logits of one pass of one sequence on `e`.
  auto pass = [&](ModelExecutor& e, kernels::Backend& b, std::vector<int32_t> tokens,
                  int32_t kv_len) {
    ForwardBatch batch;
    batch.AddSequence(tokens, kv_len, table, true);
    absl::StatusOr<kernels::Tensor> logits = e.Forward(batch);
    EXPECT_TRUE(logits.ok()) << logits.status();
    std::vector<float> host(static_cast<size_t>(logits->elements()));
    b.CopyToHost(*logits->buffer, logits->offset, logits->bytes(), host.data());
    EXPECT_TRUE(b.Synchronize().ok());
    return host;
  };
  int32_t len = 5;
  EXPECT_EQ(pass(*graphed, rec, {1, 5, 900, 17, 3}, len),
            pass(*eager, plain, {1, 5, 900, 17, 3}, len));
  // Decode steps: eager once, captured at the second, replayed at the third.
  for (int i = 0; i < 3; ++i) {
    ++len;
    EXPECT_EQ(pass(*graphed, rec, {7}, len), pass(*eager, plain, {7}, len)) << len;
  }
  ASSERT_EQ(rec.captures(), 1);
  ASSERT_EQ(rec.replays(), 2);
  // An executor for longer passes on the same backend grows its scratch.
  const int64_t epoch = rec.ScratchEpoch();
  auto longer = *ModelExecutor::Create(c, *rec_weights, &rec, rec_kv.get(), {512, 4});
  ASSERT_GT(rec.ScratchEpoch(), epoch);
  for (int i = 0; i < 2; ++i) {
    ++len;
    EXPECT_EQ(pass(*graphed, rec, {7}, len), pass(*eager, plain, {7}, len)) << len;
  }
  EXPECT_EQ(rec.captures(), 2);  // captured again over the new scratch, then replayed
  EXPECT_EQ(rec.replays(), 4);
  EXPECT_EQ(rec.stale_replays(), 0);
}

// --cpu-math fast on a Q8_0 model (the integer path): a request's tokens do not depend
// on what it is batched with nor on which engine computed its prompt — the invariance
// exact math has — and teacher-forced, fast and exact pick the same token almost
// everywhere (the quantization moves logits a little, never far). On the dense shape
// and on a mixture of experts (whose rows are grouped by expert differently in every
// batch).
class FastMath : public ::testing::TestWithParam<std::string> {};

TEST_P(FastMath, TokensDoNotDependOnBatchingOrWhereThePromptWasComputed) {
  const model::ModelConfig c = *SyntheticConfig(GetParam());
  auto w = *ModelWeights::Random(c, model::GgmlType::kQ8_0, 12);
  auto make = [&](kernels::CpuMath math) {
    EngineOptions o;
    o.num_threads = 2;
    o.cpu_math = math;
    return *Engine::Create(*w, o);
  };
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 7; ++i) {
    std::vector<int32_t> p;
    for (int t = 0; t < 1 + 23 * i; ++t) p.push_back((t * 131 + i * 17) % 1024);
    prompts.push_back(p);
  }
  SamplingParams sp;
  sp.temperature = 0;
  sp.max_tokens = 12;
  sp.ignore_eos = true;
  auto run = [&](Engine& e, const std::vector<std::vector<int32_t>>& ps) {
    std::vector<kv::SeqId> ids;
    for (const auto& p : ps) ids.push_back(*e.AddRequest(p, sp));
    std::vector<std::vector<int32_t>> out(ps.size());
    while (e.HasWork()) {
      for (const auto& ev : StepOk(e)) {
        const size_t i = std::find(ids.begin(), ids.end(), ev.id) - ids.begin();
        if (ev.token >= 0) out[i].push_back(ev.token);
      }
    }
    return out;
  };
  auto batched_engine = make(kernels::CpuMath::kFast);
  const auto together = run(*batched_engine, prompts);
  for (size_t i : {0, 3, 6}) {
    SCOPED_TRACE(i);
    auto alone = make(kernels::CpuMath::kFast);
    EXPECT_EQ(run(*alone, {prompts[i]})[0], together[i]);
    // Prefilled on one fast engine, its K/V moved layer by layer, decoded on another.
    auto prefill = make(kernels::CpuMath::kFast);
    auto decode = make(kernels::CpuMath::kFast);
    const kv::SeqId pid = *prefill->AddRequest(prompts[i], sp, RequestMode::kPrefillOnly);
    int32_t first = -1;
    while (prefill->HasWork()) {
      for (const auto& ev : StepOk(*prefill)) first = ev.token;
    }
    auto did = decode->Reserve(static_cast<int64_t>(prompts[i].size()) + 1);
    ASSERT_TRUE(did.ok()) << did.status();
    ASSERT_NO_FATAL_FAILURE(MoveKv(*prefill, pid, *decode, *did));
    EXPECT_TRUE(prefill->Release(pid));
    ASSERT_TRUE(decode->AdmitPrefilled(*did, prompts[i], first, sp).ok());
    std::vector<int32_t> got = {first};
    while (decode->HasWork()) {
      for (const auto& ev : StepOk(*decode)) {
        if (ev.token >= 0) got.push_back(ev.token);
      }
    }
    EXPECT_EQ(got, together[i]);
  }
  // Fast is not exact — the integer path really ran — yet close: over one pass of a
  // 96-token prompt, every row's logits within 5 % of the row's largest and the same
  // arg-max on at least 90 % of the rows. A mixture of experts may route a token to
  // other experts where the two maths move its router logits across a near-tie; there
  // (measured: 6 of 96 rows) the row moves further, so at least 88 rows within 5 %.
  auto logits = [&](kernels::CpuMath math) {
    kernels::CpuBackend backend(kernels::CpuBackendOptions{.num_threads = 2, .math = math});
    auto dw = *DeviceWeights::Prepare(*w, &backend);
    const kv::KvLayout layout{static_cast<int32_t>(c.n_layers), static_cast<int32_t>(c.n_kv_heads),
                              static_cast<int32_t>(c.head_dim), 16, kv::KvDtype::kF32};
    auto kv = *kernels::KvStorage::Create(&backend, layout, int64_t{8} << 20);
    auto exec = *ModelExecutor::Create(c, *dw, &backend, kv.get(), {128, 1, false});
    std::vector<int32_t> tokens;
    for (int t = 0; t < 96; ++t) tokens.push_back((t * 389 + 5) % 1024);
    ForwardBatch batch;
    std::vector<int32_t> table = {0, 1, 2, 3, 4, 5};
    batch.AddSequence(tokens, 96, table, true, 96);
    const kernels::Tensor out = *exec->Forward(batch);
    std::vector<float> host(static_cast<size_t>(out.elements()));
    backend.CopyToHost(*out.buffer, out.offset, out.bytes(), host.data());
    EXPECT_TRUE(backend.Synchronize().ok());
    return host;
  };
  const auto fast = logits(kernels::CpuMath::kFast), exact = logits(kernels::CpuMath::kExact);
  ASSERT_EQ(fast.size(), exact.size());
  EXPECT_NE(fast, exact) << "fast math gave exact math's bits: did the integer path run?";
  const int64_t vocab = c.vocab_size;
  int same = 0, within = 0;
  for (int64_t r = 0; r < 96; ++r) {
    const float* f = fast.data() + r * vocab;
    const float* e = exact.data() + r * vocab;
    float largest = 0, worst = 0;
    for (int64_t v = 0; v < vocab; ++v) {
      largest = std::max(largest, std::fabs(e[v]));
      worst = std::max(worst, std::fabs(f[v] - e[v]));
    }
    if (c.moe.experts == 0) EXPECT_LT(worst, 0.05f * largest) << "row " << r;
    within += worst < 0.05f * largest;
    same += std::max_element(f, f + vocab) - f == std::max_element(e, e + vocab) - e;
  }
  std::printf("%s: fast within 5 %% of exact on %d of 96 rows, same arg-max on %d\n",
              GetParam().c_str(), within, same);
  EXPECT_GE(within, c.moe.experts == 0 ? 96 : 88) << "of 96 rows";
  EXPECT_GE(same, 87) << "of 96 rows";
}

INSTANTIATE_TEST_SUITE_P(Shapes, FastMath, ::testing::Values("tiny", "tiny-moe"),
                         [](const auto& info) {
                           return info.param == "tiny" ? std::string("Dense") : std::string("Moe");
                         });

// A mixture of experts groups each step's rows by expert, differently in every batch:
// a request's tokens still do not depend on what it runs with, on its prompt being cut
// into chunks, nor on being preempted and recomputed — in both maths, greedy and
// sampled.
TEST(MoeInvariance, ChunkedPreemptedAndBatchedRequestsGiveTheTokensOfOneAlone) {
  const model::ModelConfig c = *SyntheticConfig("tiny-moe");
  auto w = *ModelWeights::Random(c, model::GgmlType::kQ8_0, 21);
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 12; ++i) {
    std::vector<int32_t> p;
    for (int t = 0; t < 3 + 13 * i; ++t) p.push_back((t * 211 + i * 37 + 1) % 1024);
    prompts.push_back(p);
  }
  for (kernels::CpuMath math : {kernels::CpuMath::kExact, kernels::CpuMath::kFast}) {
    for (double temperature : {0.0, 0.9}) {
      SCOPED_TRACE(testing::Message() << kernels::CpuMathName(math) << " t=" << temperature);
      auto make = [&](int64_t kv_bytes, int32_t chunk) {
        EngineOptions o;
        o.num_threads = 2;
        o.cpu_math = math;
        o.kv_cache_bytes = kv_bytes;
        o.scheduler.max_prefill_chunk = chunk;
        return *Engine::Create(*w, o);
      };
      auto run = [&](Engine& e, const std::vector<size_t>& which) {
        std::vector<kv::SeqId> ids;
        for (size_t i : which) {
          SamplingParams sp;
          sp.temperature = temperature;
          sp.seed = 100 + i;
          sp.max_tokens = 24;
          sp.ignore_eos = true;
          ids.push_back(*e.AddRequest(prompts[i], sp));
        }
        std::vector<std::vector<int32_t>> out(which.size());
        while (e.HasWork()) {
          for (const auto& ev : StepOk(e)) {
            const size_t i = std::find(ids.begin(), ids.end(), ev.id) - ids.begin();
            if (ev.token >= 0) out[i].push_back(ev.token);
          }
        }
        return out;
      };
      std::vector<size_t> all(prompts.size());
      std::iota(all.begin(), all.end(), 0);
      std::vector<std::vector<int32_t>> alone;
      for (size_t i : all) alone.push_back(run(*make(int64_t{64} << 20, 512), {i})[0]);
      auto batched = make(int64_t{64} << 20, 512);
      EXPECT_EQ(run(*batched, all), alone) << "batched";
      auto chunked = make(int64_t{64} << 20, 16);
      EXPECT_EQ(run(*chunked, all), alone) << "prompts in chunks of 16";
      // 16 blocks of 16 tokens of 4 layers × 2 KV heads × 32 dims × K and V in float32.
      auto small = make(int64_t{16} * 16 * 4 * 2 * 32 * 2 * 4, 64);
      EXPECT_EQ(run(*small, all), alone) << "preempted";
      EXPECT_GT(small->Stats().preemptions, 0) << "the pool was meant to force preemption";
    }
  }
}

// --gpu-memory-utilization sizes from device memory, which the CPU backend has not got:
// a clear error naming the flag to use instead.
TEST(SyntheticModel, GpuMemoryUtilizationNeedsADevice) {
  auto w = *ModelWeights::Random(*SyntheticConfig("tiny"), model::GgmlType::kF32, 3);
  EngineOptions o;
  o.num_threads = 1;
  o.gpu_memory_utilization = 0.9;
  auto e = Engine::Create(*w, o);
  EXPECT_EQ(e.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(e.status().message().find("--kv-cache-bytes"), std::string_view::npos) << e.status();
}

// A CPU backend behind the fence that asks for bf16 weights, as the CUDA backend does.
class Bf16WeightsBackend : public kernels::CpuBackend {
 public:
  Bf16WeightsBackend() : CpuBackend({.num_threads = 2, .fence = true}) {}
  std::optional<model::GgmlType> WeightType() const override { return model::GgmlType::kBF16; }
};

// Every matrix arrives as the round-to-nearest-even bf16 of its dequantized values;
// norms stay float32; tied tensors are copied once.
TEST(DeviceWeights, ConvertsMatricesToBf16WhenTheBackendAsks) {
  const model::ModelConfig c = *SyntheticConfig("tiny");
  auto host = *ModelWeights::Random(c, model::GgmlType::kQ8_0, 11);
  Bf16WeightsBackend backend;
  auto dw = DeviceWeights::Prepare(*host, &backend);
  ASSERT_TRUE(dw.ok()) << dw.status();
  const DeviceLayer& L = (*dw)->layers()[1];
  ASSERT_EQ(L.w_down.type, model::GgmlType::kBF16);
  ASSERT_EQ((*dw)->token_embd().type, model::GgmlType::kBF16);
  EXPECT_EQ(L.attn_norm.type, model::GgmlType::kF32);
  const WeightMatrix& src = host->layers()[1].w_down;
  std::vector<float> want(static_cast<size_t>(src.rows * src.cols));
  ASSERT_TRUE(
      model::Dequantize(src.type, {src.data, static_cast<size_t>(src.rows) * src.RowBytes()}, want)
          .ok());
  std::vector<uint16_t> got(want.size());
  ASSERT_TRUE(
      backend.ReadNow(*L.w_down.buffer, L.w_down.offset, L.w_down.bytes(), got.data()).ok());
  for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(got[i], FloatToBf16(want[i])) << i;
  // From float32 weights, the device holds about half the bytes (norms stay float32).
  auto f32 = *ModelWeights::Random(c, model::GgmlType::kF32, 11);
  auto dw32 = *DeviceWeights::Prepare(*f32, &backend);
  EXPECT_LT(static_cast<double>(dw32->copied_bytes()), 0.51 * f32->weight_bytes());
  EXPECT_GT(static_cast<double>(dw32->copied_bytes()), 0.49 * f32->weight_bytes());
}

}  // namespace
}  // namespace tandem::engine
