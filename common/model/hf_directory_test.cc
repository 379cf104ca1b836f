#include "common/model/hf_directory.h"

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/test_paths.h"

namespace tandem::model {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using ::testing::HasSubstr;

// A scratch directory holding a copy of the tiny qwen3 model, to be broken one way per
// test.
class HfDirectoryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("tandem_hf_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    const fs::path src = ::tandem::testing::TestDataPath("tiny_qwen3_hf");
    fs::copy_file(src / "config.json", dir_ / "config.json");
    fs::copy_file(src / "model.safetensors", dir_ / "model.safetensors");
    std::ifstream in(dir_ / "config.json");
    config_ = json::parse(in);
  }
  void TearDown() override { fs::remove_all(dir_); }

  void Write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ / name, std::ios::binary) << text;
  }
  void WriteConfig() { Write("config.json", config_.dump()); }
  // A one-tensor safetensors file.
  void WriteSafetensors(const std::string& name, const std::string& tensor,
                        const std::string& dtype, int64_t n, int64_t element_bytes) {
    const std::string header =
        json{{tensor, {{"dtype", dtype}, {"shape", {n}}, {"data_offsets", {0, n * element_bytes}}}}}
            .dump();
    std::string bytes(8, '\0');
    const uint64_t len = header.size();
    std::memcpy(bytes.data(), &len, 8);
    bytes += header + std::string(static_cast<size_t>(n * element_bytes), '\0');
    Write(name, bytes);
  }
  absl::Status Open() { return OpenHfDirectory(dir_.string()).status(); }

  fs::path dir_;
  json config_;
};

TEST_F(HfDirectoryTest, TheCopyLoads) {
  auto f = OpenModel(dir_.string());
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_TRUE((*f)->assembled());
  EXPECT_EQ(*(*f)->GetString("general.architecture"), "qwen3");
  EXPECT_NE((*f)->FindTensor("blk.1.attn_q_norm.weight"), nullptr);
  EXPECT_NE((*f)->FindTensor("output.weight"), nullptr);
}

TEST_F(HfDirectoryTest, ConfigErrorsNameTheField) {
  Write("config.json", "{not json");
  EXPECT_THAT(Open().message(), HasSubstr("config.json: is not valid JSON"));
  Write("config.json", "[1, 2]");
  EXPECT_THAT(Open().message(), HasSubstr("is not a JSON object"));

  json c = config_;
  c["architectures"] = {"BertModel"};
  Write("config.json", c.dump());
  EXPECT_EQ(Open().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(Open().message(), HasSubstr("'BertModel' is not supported"));

  c = config_;
  c.erase("num_hidden_layers");
  Write("config.json", c.dump());
  EXPECT_THAT(Open().message(), HasSubstr("'num_hidden_layers' is missing"));

  c = config_;
  c["hidden_size"] = -64;
  Write("config.json", c.dump());
  EXPECT_THAT(Open().message(), HasSubstr("'hidden_size' must be a positive integer"));

  c = config_;
  c["rope_parameters"] = {{"rope_type", "dynamic"}, {"rope_theta", 500000.0}, {"factor", 8.0}};
  Write("config.json", c.dump());
  EXPECT_EQ(Open().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(Open().message(), HasSubstr("RoPE scaling 'dynamic'"));
  c["rope_parameters"] = {{"rope_type", "yarn"},
                          {"rope_theta", 500000.0},
                          {"factor", 8.0},
                          {"original_max_position_embeddings", 0}};
  Write("config.json", c.dump());
  EXPECT_THAT(Open().message(), HasSubstr("'original_max_position_embeddings' must be positive"));
}

// Values of an unexpected type or size are errors, not crashes; null means absent.
TEST_F(HfDirectoryTest, HostileConfigValuesAreErrors) {
  json c = config_;
  c["num_key_value_heads"] = nullptr;
  Write("config.json", c.dump());
  auto f = OpenModel(dir_.string());
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(*(*f)->GetUint("qwen3.attention.head_count_kv"),
            *(*f)->GetUint("qwen3.attention.head_count"));

  c = config_;
  c["tie_word_embeddings"] = "yes";
  Write("config.json", c.dump());
  EXPECT_THAT(Open().message(), HasSubstr("'tie_word_embeddings' must be true or false"));

  c = config_;
  c["head_dim"] = int64_t{1} << 39;
  c["rope_parameters"] = {{"rope_type", "llama3"}, {"rope_theta", 500000.0}};
  Write("config.json", c.dump());
  EXPECT_THAT(Open().message(), HasSubstr("head_dim"));

  c = config_;
  c["rope_parameters"] = {{"rope_type", 7}};
  c["rms_norm_eps"] = "small";
  Write("config.json", c.dump());
  EXPECT_FALSE(Open().ok());

  Write("config.json", config_.dump());
  Write("tokenizer.json", json{{"model", {{"type", "BPE"}, {"byte_fallback", "yes"}}}}.dump());
  EXPECT_EQ(Open().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Open().message(), HasSubstr("wrong type"));
}

// A byte-level tokenizer whose post-processor prepends BOS (as Llama 3's does).
TEST_F(HfDirectoryTest, PostProcessorBosIsAddedBos) {
  fs::remove(dir_ / "config.json");
  Write("tokenizer.json",
        json{{"model", {{"type", "BPE"}, {"vocab", {{"a", 1}}}, {"merges", json::array()}}},
             {"added_tokens", {{{"id", 0}, {"content", "<s>"}, {"special", true}}}},
             {"decoder", {{"type", "ByteLevel"}}},
             {"pre_tokenizer", {{"type", "ByteLevel"}, {"use_regex", true}}},
             {"post_processor",
              {{"type", "TemplateProcessing"},
               {"single",
                {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
                 {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}}}}}
            .dump());
  auto f = OpenModel(dir_.string());
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_TRUE(*(*f)->GetBool("tokenizer.ggml.add_bos_token"));
  EXPECT_EQ(*(*f)->GetUint("tokenizer.ggml.bos_token_id"), 0u);
  EXPECT_EQ(*(*f)->GetString("tokenizer.ggml.pre"), "gpt2");
  EXPECT_EQ((*f)->Find("tandem.tokenizer.normalizer"), nullptr);
}

// A byte-level tokenizer.json's normalizer: NFC, alone or as a one-step Sequence (the
// published Qwen and GPT-NeoX files), becomes tandem's key; any other is refused by name.
TEST_F(HfDirectoryTest, ByteLevelNormalizerIsNfcOrRefused) {
  fs::remove(dir_ / "config.json");
  auto tokenizer = [](json normalizer) {
    return json{{"model", {{"type", "BPE"}, {"vocab", {{"a", 0}}}, {"merges", json::array()}}},
                {"normalizer", normalizer},
                {"decoder", {{"type", "ByteLevel"}}},
                {"pre_tokenizer", {{"type", "ByteLevel"}, {"use_regex", true}}}}
        .dump();
  };
  for (const json& nfc :
       {json{{"type", "NFC"}}, json{{"type", "Sequence"}, {"normalizers", {{{"type", "NFC"}}}}}}) {
    Write("tokenizer.json", tokenizer(nfc));
    auto f = OpenModel(dir_.string());
    ASSERT_TRUE(f.ok()) << f.status();
    EXPECT_EQ(*(*f)->GetString("tandem.tokenizer.normalizer"), "NFC");
    EXPECT_EQ(*(*f)->GetString("tokenizer.ggml.pre"), "mpt");  // GPT-2 splitting after NFC
  }
  Write("tokenizer.json", tokenizer({{"type", "NFKC"}}));
  EXPECT_THAT(Open().message(), HasSubstr("normalizer 'NFKC' is not supported"));
  Write("tokenizer.json",
        tokenizer(
            {{"type", "Sequence"}, {"normalizers", {{{"type", "NFC"}}, {{"type", "Lowercase"}}}}}));
  EXPECT_THAT(Open().message(), HasSubstr("normalizer 'Sequence' is not supported"));
}

TEST_F(HfDirectoryTest, WeightErrorsNameTheTensor) {
  fs::remove(dir_ / "model.safetensors");
  EXPECT_EQ(Open().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(Open().message(), HasSubstr("no model.safetensors"));

  // An index may name only files of this directory.
  Write("model.safetensors.index.json",
        json{{"weight_map", {{"model.norm.weight", "../elsewhere.safetensors"}}}}.dump());
  EXPECT_THAT(Open().message(), HasSubstr("is not a file name"));
  Write("model.safetensors.index.json", json{{"weight_map", 3}}.dump());
  EXPECT_THAT(Open().message(), HasSubstr("'weight_map' must be an object"));
  fs::remove(dir_ / "model.safetensors.index.json");

  WriteSafetensors("model.safetensors", "model.vision_tower.weight", "F32", 4, 4);
  EXPECT_EQ(Open().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(Open().message(), HasSubstr("'model.vision_tower.weight' is not one qwen3 uses"));

  WriteSafetensors("model.safetensors", "model.norm.weight", "I32", 4, 4);
  EXPECT_THAT(Open().message(), HasSubstr("has dtype I32"));

  WriteSafetensors("model.safetensors", "model.layers.0.self_attn.q_proj.weight", "F32", 0, 4);
  EXPECT_THAT(Open().message(), HasSubstr("non-zero dimensions"));

  // A hostile safetensors header is refused by its own reader.
  Write("model.safetensors", std::string("\xff\xff\xff\xff\xff\xff\xff\x7f", 8) + "{}");
  EXPECT_FALSE(Open().ok());

  // Present but incomplete: loading the weights names what is missing.
  WriteSafetensors("model.safetensors", "model.norm.weight", "F32", 64, 4);
  auto f = OpenModel(dir_.string());
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ((*f)->FindTensor("token_embd.weight"), nullptr);
}

TEST_F(HfDirectoryTest, TokenizerErrorsAreClear) {
  Write("tokenizer.json", "{\"model\": {\"type\": \"Unigram\"}}");
  EXPECT_THAT(Open().message(), HasSubstr("model type 'Unigram' is not supported"));
  Write("tokenizer.json",
        json{{"model", {{"type", "BPE"}, {"byte_fallback", true}, {"vocab", json::object()}}},
             {"decoder", {{"type", "Sequence"}}}}
            .dump());
  EXPECT_THAT(Open().message(), HasSubstr("does not write spaces as \"▁\""));
  Write("tokenizer.json",
        json{{"model", {{"type", "BPE"}, {"vocab", {{"a", 0}}}, {"merges", json::array()}}},
             {"decoder", {{"type", "ByteLevel"}}},
             {"pre_tokenizer",
              {{"type", "Split"},
               {"pattern", {{"Regex", "[a-z]+"}}},
               {"behavior", "Isolated"},
               {"invert", false}}}}
            .dump());
  EXPECT_THAT(Open().message(), HasSubstr("none of the families"));
  Write(
      "tokenizer.json",
      json{{"model", {{"type", "BPE"}, {"vocab", {{"a", 0}}}, {"continuing_subword_prefix", "##"}}},
           {"decoder", {{"type", "ByteLevel"}}}}
          .dump());
  EXPECT_THAT(Open().message(), HasSubstr("BPE 'continuing_subword_prefix' is not supported"));
  Write("tokenizer.json", json{{"model", {{"type", "BPE"}, {"vocab", {{"a", 0}, {"b", 0}}}}},
                               {"decoder", {{"type", "ByteLevel"}}}}
                              .dump());
  EXPECT_THAT(Open().message(), HasSubstr("token id 0 is given to two texts"));
}

// A SentencePiece-style tokenizer.json (byte fallback, spaces as "▁") loads only where
// tandem tokenizes exactly as Hugging Face does: each other layout is refused by name.
TEST_F(HfDirectoryTest, SentencePieceStyleTokenizerErrorsAreClear) {
  const json prepend = {{"type", "Prepend"}, {"prepend", "▁"}};
  const json replace = {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "▁"}};
  auto tokenizer = [](json model_changes, json normalizer, json pre_tokenizer) {
    json model = {{"type", "BPE"},
                  {"byte_fallback", true},
                  {"unk_token", "<unk>"},
                  {"vocab", {{"<unk>", 0}, {"<0x41>", 1}, {"▁", 2}, {"a", 3}, {"b", 4}, {"ab", 5}}},
                  {"merges", {"a b"}}};
    model.update(model_changes);
    return json{{"model", model},
                {"normalizer", normalizer},
                {"pre_tokenizer", pre_tokenizer},
                {"decoder", {{"type", "Sequence"}, {"decoders", json::array()}}}}
        .dump();
  };
  const json legacy = {{"type", "Sequence"}, {"normalizers", {prepend, replace}}};
  Write("tokenizer.json", tokenizer(json::object(), legacy, nullptr));
  ASSERT_TRUE(Open().ok()) << Open();

  Write("tokenizer.json", tokenizer(json::object(), {{"type", "NFKC"}}, nullptr));
  EXPECT_THAT(Open().message(), HasSubstr("normalizer step 'NFKC'"));
  Write("tokenizer.json", tokenizer(json::object(), nullptr,
                                    {{"type", "Metaspace"},
                                     {"replacement", "▁"},
                                     {"prepend_scheme", "first"},
                                     {"split", true}}));
  EXPECT_THAT(Open().message(), HasSubstr("pre-tokenizer step 'Metaspace'"));
  Write("tokenizer.json", tokenizer(json::object(), nullptr,
                                    {{"type", "Metaspace"},
                                     {"replacement", "▁"},
                                     {"prepend_scheme", "sometimes"},
                                     {"split", false}}));
  EXPECT_THAT(Open().message(), HasSubstr("prepend_scheme 'sometimes' is unknown"));
  Write("tokenizer.json",
        tokenizer(json::object(), {{"type", "Sequence"}, {"normalizers", {prepend}}},
                  {{"type", "Metaspace"},
                   {"replacement", "▁"},
                   {"prepend_scheme", "always"},
                   {"split", false}}));
  EXPECT_THAT(Open().message(), HasSubstr("both a Prepend normalizer and a Metaspace"));
  Write("tokenizer.json", tokenizer({{"merges", json::array()}}, legacy, nullptr));
  EXPECT_THAT(Open().message(), HasSubstr("\"ab\" is \"a\" + \"b\" but no merge says so"));
  Write("tokenizer.json", tokenizer({{"byte_fallback", false}}, legacy, nullptr));
  EXPECT_THAT(Open().message(), HasSubstr("without byte_fallback"));
  Write("tokenizer.json", tokenizer({{"continuing_subword_prefix", "##"}}, legacy, nullptr));
  EXPECT_THAT(Open().message(), HasSubstr("continuing_subword_prefix"));
  Write("tokenizer.json", tokenizer({{"byte_fallback", "yes"}}, legacy, nullptr));
  EXPECT_FALSE(Open().ok());
}

}  // namespace
}  // namespace tandem::model
