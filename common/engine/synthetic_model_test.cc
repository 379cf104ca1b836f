// Synthetic models (named shapes, random weights) and the weights' conversion to bf16
// for a device backend, checked on the CPU.
#include "common/engine/synthetic_model.h"

#include <algorithm>
#include <cstring>

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
