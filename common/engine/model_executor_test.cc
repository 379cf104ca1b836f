// The forward pass against an independent reference: Hugging Face transformers
// running the same GGUF (dequantized to float32) — tests/reference/make_engine_golden.py
// made tests/data/engine_golden.gguf once; no torch here.
#include "common/engine/model_executor.h"

#include <cmath>
#include <cstring>

#include "common/engine/engine.h"
#include "common/engine/engine_test_util.h"
#include "common/model/gguf_file.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"
#include "tests/test_paths.h"

namespace tandem::engine {
namespace {

using ::tandem::testing::DefaultModelPath;
using ::tandem::testing::TestDataPath;

template <typename T>
std::vector<T> TensorValues(const model::GgufFile& f, const std::string& name) {
  const model::GgufTensorInfo* t = f.FindTensor(name);
  EXPECT_NE(t, nullptr) << name;
  if (t == nullptr) return {};
  std::vector<T> v(t->n_elements);
  std::memcpy(v.data(), t->data.data(), t->n_bytes);
  return v;
}

std::string Key(int i, const char* field) {
  std::string k = "p";
  k += std::to_string(i);
  k += ".";
  k += field;
  return k;
}

class GoldenTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto g = model::GgufFile::Open(TestDataPath("engine_golden.gguf"));
    ASSERT_TRUE(g.ok()) << g.status();
    golden_ = std::move(*g);
    auto f = model::GgufFile::Open(DefaultModelPath());
    ASSERT_TRUE(f.ok()) << f.status() << " (run scripts/fetch-model.sh)";
    model_ = std::move(*f);
    auto c = model::ModelConfig::FromGguf(*model_);
    ASSERT_TRUE(c.ok());
    auto w = ModelWeights::Load(*model_, *c);
    ASSERT_TRUE(w.ok()) << w.status();
    weights_ = std::move(*w);
  }
  std::unique_ptr<model::GgufFile> golden_, model_;
  std::unique_ptr<ModelWeights> weights_;
};

TEST_F(GoldenTest, TeacherForcedLogitsMatchTransformersAtEveryPosition) {
  const int64_t vocab = weights_->config().vocab_size;
  const int n_prompts = static_cast<int>(*golden_->GetUint("n_prompts"));
  ASSERT_GE(n_prompts, 10);
  const auto sample_ids = TensorValues<int32_t>(*golden_, "sample_ids");
  kernels::CpuBackend backend(2);
  auto cache = *kv::KvCache::Create({30, 3, 64, 16}, int64_t{64} << 20);
  double worst = 0;
  int64_t positions = 0;
  for (int i = 0; i < n_prompts; ++i) {
    const auto tokens = TensorValues<int32_t>(*golden_, Key(i, "tokens"));
    const auto top_ids = TensorValues<int32_t>(*golden_, Key(i, "top_ids"));
    const auto top_logits = TensorValues<float>(*golden_, Key(i, "top_logits"));
    const auto sample_logits = TensorValues<float>(*golden_, Key(i, "sample_logits"));
    const auto lse = TensorValues<float>(*golden_, Key(i, "lse"));
    const int64_t n = static_cast<int64_t>(tokens.size());
    ASSERT_EQ(static_cast<int64_t>(lse.size()), n);
    const int64_t k_top = static_cast<int64_t>(top_ids.size()) / n;
    const int64_t k_sample = static_cast<int64_t>(sample_ids.size());

    // One pass over the whole sequence, blocks 0..ceil(n/16)-1.
    ForwardBatch batch;
    std::vector<int32_t> table((n + 15) / 16);
    for (size_t b = 0; b < table.size(); ++b) table[b] = static_cast<int32_t>(b);
    batch.AddSequence(tokens, static_cast<int32_t>(n), table, false);
    for (int32_t r = 0; r < n; ++r) batch.logit_rows.push_back(r);
    ModelExecutor exec(*weights_, &backend, cache.get());
    std::vector<float> logits;
    ASSERT_TRUE(exec.Forward(batch, &logits).ok());

    for (int64_t pos = 0; pos < n; ++pos) {
      const float* row = logits.data() + pos * vocab;
      double mx = -INFINITY, sum = 0;
      for (int64_t v = 0; v < vocab; ++v) mx = std::max<double>(mx, row[v]);
      for (int64_t v = 0; v < vocab; ++v) sum += std::exp(row[v] - mx);
      worst = std::max(worst, std::fabs(mx + std::log(sum) - lse[pos]));
      for (int64_t j = 0; j < k_top; ++j) {
        worst = std::max<double>(
            worst, std::fabs(row[top_ids[pos * k_top + j]] - top_logits[pos * k_top + j]));
      }
      for (int64_t j = 0; j < k_sample; ++j) {
        worst = std::max<double>(worst,
                                 std::fabs(row[sample_ids[j]] - sample_logits[pos * k_sample + j]));
      }
      ASSERT_LE(worst, 1e-2) << "prompt " << i << " position " << pos;
    }
    positions += n;
  }
  std::printf("max |logit difference| over %lld positions: %.3g\n",
              static_cast<long long>(positions), worst);
}

TEST_F(GoldenTest, GreedyContinuationMatchesTransformers) {
  const int n_prompts = static_cast<int>(*golden_->GetUint("n_prompts"));
  EngineOptions o;
  o.num_threads = 2;
  auto engine = *Engine::Create(*weights_, o);
  int diverged = 0;
  for (int i = 0; i < n_prompts; ++i) {
    const auto tokens = TensorValues<int32_t>(*golden_, Key(i, "tokens"));
    const auto margin = TensorValues<float>(*golden_, Key(i, "margin"));
    const int64_t n_prompt = static_cast<int64_t>(*golden_->GetUint(Key(i, "n_prompt")));
    const std::vector<int32_t> prompt(tokens.begin(), tokens.begin() + n_prompt);
    const std::vector<int32_t> want(tokens.begin() + n_prompt, tokens.end());
    SamplingParams sp;
    sp.temperature = 0;
    sp.max_tokens = static_cast<int32_t>(want.size());
    sp.ignore_eos = true;
    auto id = engine->AddRequest(prompt, sp);
    ASSERT_TRUE(id.ok()) << id.status();
    std::vector<int32_t> got;
    while (engine->HasWork())
      for (const auto& ev : StepOk(*engine)) got.push_back(ev.token);
    ASSERT_EQ(got.size(), want.size());
    for (size_t j = 0; j < want.size(); ++j) {
      if (got[j] == want[j]) continue;
      // A divergence is only acceptable at a near-tie of the reference.
      const float m = margin[n_prompt - 1 + j];
      EXPECT_LT(m, 1e-3) << "prompt " << i << " diverges at step " << j << " with reference margin "
                         << m;
      ++diverged;
      break;
    }
  }
  std::printf("%d of %d greedy continuations diverged (at near-ties)\n", diverged, n_prompts);
}

}  // namespace
}  // namespace tandem::engine
