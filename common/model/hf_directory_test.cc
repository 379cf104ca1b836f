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
  c["rope_parameters"] = {{"rope_type", "yarn"}, {"rope_theta", 500000.0}, {"factor", 8.0}};
  Write("config.json", c.dump());
  EXPECT_EQ(Open().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(Open().message(), HasSubstr("RoPE scaling 'yarn'"));
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
  EXPECT_THAT(Open().message(), HasSubstr("SentencePiece-style BPE"));
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
  Write("tokenizer.json", json{{"model", {{"type", "BPE"}, {"vocab", {{"a", 0}, {"b", 0}}}}},
                               {"decoder", {{"type", "ByteLevel"}}}}
                              .dump());
  EXPECT_THAT(Open().message(), HasSubstr("token id 0 is given to two texts"));
}

}  // namespace
}  // namespace tandem::model
