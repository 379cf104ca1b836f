#include "common/model/model_config.h"

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
