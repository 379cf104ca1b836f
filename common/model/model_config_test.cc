#include "common/model/model_config.h"

#include <cmath>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/gguf_builder.h"
#include "tests/test_paths.h"

namespace tandem::model {
namespace {

using ::tandem::testing::GgufBuilder;
using ::testing::HasSubstr;

// Expected values are SmolLM2-135M-Instruct's published Hugging Face config.json.
TEST(ModelConfig, ReadsDefaultModel) {
  auto f = GgufFile::Open(::tandem::testing::DefaultModelPath());
  ASSERT_TRUE(f.ok()) << f.status() << " (run scripts/fetch-model.sh)";
  auto c = ModelConfig::FromGguf(**f);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->architecture, "llama");
  EXPECT_EQ(c->n_layers, 30);
  EXPECT_EQ(c->hidden_size, 576);
  EXPECT_EQ(c->n_heads, 9);
  EXPECT_EQ(c->n_kv_heads, 3);
  EXPECT_EQ(c->head_dim, 64);
  EXPECT_EQ(c->rope_dim, 64);
  EXPECT_EQ(c->ffn_size, 1536);
  EXPECT_EQ(c->vocab_size, 49152);
  EXPECT_EQ(c->context_length, 8192);
  EXPECT_NEAR(c->rms_norm_eps, 1e-5, 1e-12);
  EXPECT_EQ(c->rope_theta, 100000.0);
  EXPECT_EQ(c->rope_scaling.type, RopeScalingType::kNone);
  EXPECT_TRUE(c->tied_embeddings);
  EXPECT_FALSE(c->qkv_bias);
  EXPECT_EQ(c->bos_token_id, 1);
  EXPECT_EQ(c->eos_token_id, 2);
  EXPECT_THAT(c->chat_template, HasSubstr("<|im_start|>"));
  EXPECT_EQ(c->KvElementsPerToken(), 2 * 30 * 3 * 64);
}

GgufBuilder Llama(uint32_t heads = 4) {
  GgufBuilder b;
  b.String("general.architecture", "llama")
      .Uint32("llama.block_count", 2)
      .Uint32("llama.embedding_length", 64)
      .Uint32("llama.attention.head_count", heads)
      .Uint32("llama.feed_forward_length", 128)
      .Uint32("llama.vocab_size", 100);
  return b;
}

absl::StatusOr<ModelConfig> Parse(const GgufBuilder& b) {
  static std::string bytes;  // outlives the view for the duration of the call
  bytes = b.Build();
  auto f = GgufFile::Parse({reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()});
  if (!f.ok()) return f.status();
  return ModelConfig::FromGguf(**f);
}

TEST(ModelConfig, AppliesDefaults) {
  auto c = Parse(Llama());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->n_kv_heads, 4);
  EXPECT_EQ(c->head_dim, 16);
  EXPECT_EQ(c->rope_theta, 10000.0);
  EXPECT_EQ(c->bos_token_id, -1);
}

TEST(ModelConfig, ReadsQwen2AndRopeScaling) {
  GgufBuilder b;
  b.String("general.architecture", "qwen2")
      .Uint32("qwen2.block_count", 1)
      .Uint32("qwen2.embedding_length", 32)
      .Uint32("qwen2.attention.head_count", 4)
      .Uint32("qwen2.attention.head_count_kv", 2)
      .Uint32("qwen2.feed_forward_length", 64)
      .Uint32("qwen2.vocab_size", 10)
      .String("qwen2.rope.scaling.type", "linear")
      .Float32("qwen2.rope.scaling.factor", 4.0f);
  auto c = Parse(b);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->n_kv_heads, 2);
  EXPECT_EQ(c->rope_scaling.type, RopeScalingType::kLinear);
  EXPECT_EQ(c->rope_scaling.factor, 4.0);
}

// A mistral GGUF reads exactly as the llama one with the same keys (same layout, adjacent
// RoPE pairs), and a sliding window smaller than the context caps the context served.
TEST(ModelConfig, ReadsMistralLikeLlamaAndCapsTheContextAtItsSlidingWindow) {
  auto keys = [](GgufBuilder& b, const std::string& arch) -> GgufBuilder& {
    return b.String("general.architecture", arch)
        .Uint32(arch + ".block_count", 2)
        .Uint32(arch + ".embedding_length", 64)
        .Uint32(arch + ".attention.head_count", 8)
        .Uint32(arch + ".attention.head_count_kv", 2)
        .Uint32(arch + ".feed_forward_length", 128)
        .Uint32(arch + ".context_length", 32768)
        .Float32(arch + ".rope.freq_base", 1e6f)
        .Float32(arch + ".attention.layer_norm_rms_epsilon", 1e-5f)
        .Uint32(arch + ".vocab_size", 100);
  };
  GgufBuilder mb, lb;
  auto mistral = Parse(keys(mb, "mistral"));
  ASSERT_TRUE(mistral.ok()) << mistral.status();
  auto llama = Parse(keys(lb, "llama"));
  ASSERT_TRUE(llama.ok()) << llama.status();
  EXPECT_EQ(mistral->architecture, "mistral");
  EXPECT_EQ(mistral->n_layers, llama->n_layers);
  EXPECT_EQ(mistral->hidden_size, llama->hidden_size);
  EXPECT_EQ(mistral->n_heads, llama->n_heads);
  EXPECT_EQ(mistral->n_kv_heads, llama->n_kv_heads);
  EXPECT_EQ(mistral->head_dim, llama->head_dim);
  EXPECT_EQ(mistral->ffn_size, llama->ffn_size);
  EXPECT_EQ(mistral->rope_theta, llama->rope_theta);
  EXPECT_EQ(mistral->rope_halves, llama->rope_halves);
  EXPECT_FALSE(mistral->rope_halves);
  EXPECT_EQ(mistral->context_length, 32768);
  EXPECT_EQ(mistral->sliding_window, 0);

  GgufBuilder windowed;
  keys(windowed, "mistral").Uint32("mistral.attention.sliding_window", 4096);
  auto v01 = Parse(windowed);
  ASSERT_TRUE(v01.ok()) << v01.status();
  EXPECT_EQ(v01->sliding_window, 4096);
  // The window is honoured by attention, so the whole context is served.
  EXPECT_EQ(v01->context_length, 32768);
  EXPECT_TRUE(v01->LayerIsLocal(0));
  EXPECT_TRUE(v01->LayerIsLocal(1));
}

GgufBuilder Qwen3Moe(uint32_t experts = 8, uint32_t used = 4) {
  GgufBuilder b;
  b.String("general.architecture", "qwen3moe")
      .Uint32("qwen3moe.block_count", 2)
      .Uint32("qwen3moe.embedding_length", 64)
      .Uint32("qwen3moe.attention.head_count", 4)
      .Uint32("qwen3moe.feed_forward_length", 128)
      .Uint32("qwen3moe.expert_feed_forward_length", 32)
      .Uint32("qwen3moe.expert_count", experts)
      .Uint32("qwen3moe.expert_used_count", used)
      .Uint32("qwen3moe.vocab_size", 100);
  return b;
}

// The expert keys, with each family's defaults (llama.cpp's): Qwen3-MoE and Mixtral
// renormalise the picked weights, OLMoE and Qwen2-MoE do not; Qwen2-MoE has a shared
// expert.
TEST(ModelConfig, ReadsMixturesOfExperts) {
  auto q = Parse(Qwen3Moe());
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_EQ(q->moe.experts, 8);
  EXPECT_EQ(q->moe.used, 4);
  EXPECT_EQ(q->moe.ffn_size, 32);
  EXPECT_EQ(q->ffn_size, 128);
  EXPECT_EQ(q->moe.gating, ExpertGating::kSoftmax);
  EXPECT_TRUE(q->moe.weights_norm);
  EXPECT_TRUE(q->qk_norm);
  EXPECT_FALSE(q->qk_norm_full);
  EXPECT_TRUE(q->rope_halves);
  EXPECT_TRUE(q->LayerIsMoe(0));

  auto norm_off = Parse(Qwen3Moe().Bool("qwen3moe.expert_weights_norm", false));
  ASSERT_TRUE(norm_off.ok());
  EXPECT_FALSE(norm_off->moe.weights_norm);

  auto mixtral =
      Parse(Llama().Uint32("llama.expert_count", 8).Uint32("llama.expert_used_count", 2));
  ASSERT_TRUE(mixtral.ok()) << mixtral.status();
  EXPECT_EQ(mixtral->moe.ffn_size, 128);  // feed_forward_length is the experts' width
  EXPECT_TRUE(mixtral->moe.weights_norm);
  EXPECT_FALSE(mixtral->rope_halves);
  EXPECT_FALSE(Parse(Llama())->LayerIsMoe(0));

  GgufBuilder o;
  o.String("general.architecture", "olmoe")
      .Uint32("olmoe.block_count", 2)
      .Uint32("olmoe.embedding_length", 64)
      .Uint32("olmoe.attention.head_count", 4)
      .Uint32("olmoe.expert_feed_forward_length", 32)
      .Uint32("olmoe.expert_count", 8)
      .Uint32("olmoe.expert_used_count", 3)
      .Uint32("olmoe.vocab_size", 100);
  auto olmoe = Parse(o);
  ASSERT_TRUE(olmoe.ok()) << olmoe.status();
  EXPECT_EQ(olmoe->ffn_size, 32);  // no feed_forward_length: the experts'
  EXPECT_FALSE(olmoe->moe.weights_norm);
  EXPECT_TRUE(olmoe->qk_norm_full);

  GgufBuilder g;
  g.String("general.architecture", "gpt-oss")
      .Uint32("gpt-oss.block_count", 4)
      .Uint32("gpt-oss.embedding_length", 64)
      .Uint32("gpt-oss.attention.head_count", 4)
      .Uint32("gpt-oss.expert_feed_forward_length", 32)
      .Uint32("gpt-oss.expert_count", 8)
      .Uint32("gpt-oss.expert_used_count", 4)
      .Uint32("gpt-oss.attention.sliding_window", 128)
      .String("gpt-oss.rope.scaling.type", "yarn")
      .Float32("gpt-oss.rope.scaling.factor", 32.0f)
      .Uint32("gpt-oss.rope.scaling.original_context_length", 4096)
      .Uint32("gpt-oss.vocab_size", 100);
  auto oss = Parse(g);
  ASSERT_TRUE(oss.ok()) << oss.status();
  EXPECT_EQ(oss->moe.gating, ExpertGating::kSoftmaxWeight);
  EXPECT_FALSE(oss->moe.weights_norm);
  EXPECT_EQ(oss->ffn_activation, FfnActivation::kSwigluOai);
  EXPECT_TRUE(oss->attn_sinks);
  EXPECT_FALSE(oss->rope_scaling.yarn_truncate);  // as gpt-oss's config says
  EXPECT_TRUE(oss->LayerIsLocal(0));
  EXPECT_FALSE(oss->LayerIsLocal(1));
  EXPECT_TRUE(oss->LayerIsLocal(2));

  auto sigmoid = Parse(Qwen3Moe()
                           .Uint32("qwen3moe.expert_gating_func", 2)
                           .Uint32("qwen3moe.leading_dense_block_count", 1)
                           .Float32("qwen3moe.expert_weights_scale", 2.5f));
  ASSERT_TRUE(sigmoid.ok()) << sigmoid.status();
  EXPECT_EQ(sigmoid->moe.gating, ExpertGating::kSigmoid);
  EXPECT_EQ(sigmoid->moe.weights_scale, 2.5);
  EXPECT_FALSE(sigmoid->LayerIsMoe(0));
  EXPECT_TRUE(sigmoid->LayerIsMoe(1));
}

// Bad expert keys name the key; an architecture tandem does not run says why.
TEST(ModelConfig, RejectsBadExpertKeys) {
  auto message = [](const GgufBuilder& b) { return std::string(Parse(b).status().message()); };
  EXPECT_THAT(message(Qwen3Moe(8, 9)),
              HasSubstr("qwen3moe.expert_used_count = 9 must be in 1 .. expert_count = 8"));
  EXPECT_THAT(message(Qwen3Moe(8, 0)), HasSubstr("expert_used_count"));
  EXPECT_THAT(message(Qwen3Moe().Uint32("qwen3moe.expert_gating_func", 7)),
              HasSubstr("qwen3moe.expert_gating_func = 7 is not a gating function"));
  EXPECT_THAT(message(Qwen3Moe().Uint32("qwen3moe.leading_dense_block_count", 3)),
              HasSubstr("leading_dense_block_count = 3 exceeds block_count"));
  EXPECT_THAT(message(Qwen3Moe(0, 0)), HasSubstr("expert_count"));
  EXPECT_THAT(message(Llama().Uint32("llama.expert_count", 8)),
              HasSubstr("llama.expert_used_count is missing"));
  EXPECT_THAT(message(Llama()
                          .Uint32("llama.expert_count", 8)
                          .Uint32("llama.expert_used_count", 2)
                          .Uint32("llama.expert_shared_count", 2)),
              HasSubstr("more than one shared expert"));
  GgufBuilder deepseek;
  deepseek.String("general.architecture", "deepseek2");
  const absl::Status mla = Parse(deepseek).status();
  EXPECT_EQ(mla.code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(std::string(mla.message()), HasSubstr("multi-head latent attention"));
}

// YaRN's keys (llama.cpp's names, and tandem's rope.scaling.yarn_truncate): defaults
// beta 32 / 1, truncated, attention factor 1 + 0.1 · ln(factor); the original context
// is required, and the variants tandem does not run are refused by key.
TEST(ModelConfig, ReadsYarnAndRefusesWhatItCannotRun) {
  auto yarn = [] {
    return Llama()
        .String("llama.rope.scaling.type", "yarn")
        .Float32("llama.rope.scaling.factor", 32.0f)
        .Uint32("llama.rope.scaling.original_context_length", 4096);
  };
  auto c = Parse(yarn());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->rope_scaling.type, RopeScalingType::kYarn);
  EXPECT_EQ(c->rope_scaling.yarn_beta_fast, 32.0);
  EXPECT_EQ(c->rope_scaling.yarn_beta_slow, 1.0);
  EXPECT_TRUE(c->rope_scaling.yarn_truncate);
  EXPECT_NEAR(c->RopeAttentionFactor(), 1.0 + 0.1 * std::log(32.0), 1e-12);
  auto tuned = Parse(yarn()
                         .Float32("llama.rope.scaling.yarn_beta_fast", 16.0f)
                         .Bool("llama.rope.scaling.yarn_truncate", false)
                         .Float32("llama.rope.scaling.attn_factor", 0.5f));
  ASSERT_TRUE(tuned.ok()) << tuned.status();
  EXPECT_EQ(tuned->rope_scaling.yarn_beta_fast, 16.0);
  EXPECT_FALSE(tuned->rope_scaling.yarn_truncate);
  EXPECT_NEAR(tuned->RopeAttentionFactor(), 0.5 * (1.0 + 0.1 * std::log(32.0)), 1e-7);
  EXPECT_EQ(Parse(Llama())->RopeAttentionFactor(), 1.0);

  auto message = [](const GgufBuilder& b) { return std::string(Parse(b).status().message()); };
  EXPECT_THAT(message(Llama().String("llama.rope.scaling.type", "yarn")),
              HasSubstr("llama.rope.scaling.original_context_length is missing (YaRN needs it)"));
  EXPECT_THAT(message(yarn().Float32("llama.rope.scaling.yarn_ext_factor", 0.5f)),
              HasSubstr("yarn_ext_factor = 0.5 is not supported"));
  EXPECT_THAT(message(yarn().Float32("llama.rope.scaling.yarn_log_multiplier", 0.1f)),
              HasSubstr("yarn_log_multiplier is not supported"));
}

TEST(ModelConfig, RejectsInconsistentShapes) {
  EXPECT_THAT(
      std::string(Parse(Llama().Uint32("llama.attention.head_count_kv", 3)).status().message()),
      HasSubstr("head_count_kv"));
  EXPECT_THAT(std::string(Parse(Llama(5)).status().message()),
              HasSubstr("must divide embedding_length"));
  EXPECT_THAT(
      std::string(Parse(Llama().Uint32("tokenizer.ggml.eos_token_id", 100)).status().message()),
      HasSubstr("outside the vocabulary"));
  GgufBuilder no_layers;
  no_layers.String("general.architecture", "llama");
  EXPECT_THAT(std::string(Parse(no_layers).status().message()),
              HasSubstr("llama.block_count is missing"));
  GgufBuilder other;
  other.String("general.architecture", "mamba");
  EXPECT_EQ(Parse(other).status().code(), absl::StatusCode::kUnimplemented);
}

}  // namespace
}  // namespace tandem::model
