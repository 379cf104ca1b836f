// Runs `tandem inspect` and `tandem tokenize` as a user would and checks their
// output against independent references (the gguf package's tensor list, and the
// Hugging Face token ids in the tokenizer golden file).
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>

#include "common/model/ggml_type.h"
#include "common/model/gguf_file.h"
#include "common/rpc/rpc_server.h"
#include "common/tokenizer/tokenizer.h"
#include "common/util/strings.h"
#include "common/util/subprocess.h"
#include "gmock/gmock.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tandem/v1/generation.grpc.pb.h"
#include "tandem/v1/worker.grpc.pb.h"
#include "tests/gguf_builder.h"
#include "tests/test_paths.h"

namespace tandem {
namespace {

using ::tandem::testing::DefaultModelPath;
using ::tandem::testing::TestDataPath;

struct RunResult {
  int exit_code;
  std::string out;
};

// Runs `tandem ARGS` (stderr merged into stdout).
RunResult Tandem(const std::string& args) {
  std::string cmd = std::string(TANDEM_BIN_DIR) + "/tandem " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  EXPECT_NE(p, nullptr);
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  int status = pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

std::string Quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

TEST(CliInspect, ListsEveryTensorWithTypeAndShape) {
  RunResult r = Tandem("inspect --model " + DefaultModelPath());
  ASSERT_EQ(r.exit_code, 0) << r.out;
  std::ifstream in(TestDataPath("smollm2_tensors.json"));
  nlohmann::json tensors = nlohmann::json::parse(in);
  ASSERT_EQ(tensors.size(), 272u);
  std::istringstream lines(r.out);
  std::map<std::string, std::string> printed;  // name → rest of the line
  for (std::string line; std::getline(lines, line);) {
    std::istringstream fields(line);
    std::string name;
    fields >> name;
    printed[name] = line;
  }
  for (const auto& t : tensors) {
    std::string name = t.at("name");
    ASSERT_TRUE(printed.count(name)) << "tensor " << name << " missing from inspect output";
    std::vector<int64_t> shape = t.at("shape");
    std::string dims = "[";
    for (size_t i = 0; i < shape.size(); ++i) {
      if (i > 0) dims += ", ";
      dims += std::to_string(shape[i]);
    }
    dims += "]";
    std::istringstream fields(printed[name]);
    std::string n, type, bytes;
    fields >> n >> type;
    EXPECT_EQ(type, t.at("type").get<std::string>()) << name;
    EXPECT_THAT(printed[name], ::testing::HasSubstr(dims)) << name;
    std::string size = std::to_string(t.at("bytes").get<int64_t>());
    EXPECT_THAT(printed[name], ::testing::EndsWith(size)) << name;
  }
  EXPECT_THAT(r.out, ::testing::HasSubstr("layers            30"));
  EXPECT_THAT(r.out, ::testing::HasSubstr("heads / kv heads  9 / 3 (head dim 64)"));
}

// Files tandem cannot serve (a tensor in a type it has no decoder for; YaRN RoPE
// scaling without the original context it needs), and ones it can, with the memory
// their weights take.
TEST(CliInspect, SaysWhetherTheFileIsServableAndWhyNot) {
  auto write = [](const std::string& path, uint32_t q_type, bool yarn, bool unused = false) {
    testing::GgufBuilder b = testing::TinyGpt2Vocab();  // architecture llama, 4 tokens
    b.Uint32("llama.block_count", 1)
        .Uint32("llama.embedding_length", 256)
        .Uint32("llama.attention.head_count", 4)
        .Uint32("llama.attention.head_count_kv", 4)
        .Uint32("llama.feed_forward_length", 256)
        .Uint32("llama.context_length", 512)
        .Float32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
    if (yarn) b.String("llama.rope.scaling.type", "yarn");
    const model::GgmlTypeTraits& t = model::Traits(static_cast<model::GgmlType>(q_type));
    // Every tensor a llama layer needs; attn_q in `q_type`, the others F32.
    auto f32 = [&](const std::string& name, std::vector<uint64_t> dims) {
      uint64_t n = 1;
      for (uint64_t d : dims) n *= d;
      b.F32Tensor(name, dims, std::vector<float>(n, 0.01f));
    };
    f32("token_embd.weight", {256, 4});
    // The final norm in F16: a vector the engine converts to F32 at load.
    b.AddTensor({"output_norm.weight",
                 static_cast<uint32_t>(model::GgmlType::kF16),
                 {256},
                 std::string(512, '\0'),
                 {}});
    f32("blk.0.attn_norm.weight", {256});
    b.AddTensor({"blk.0.attn_q.weight",
                 q_type,
                 {256, 256},
                 std::string(static_cast<size_t>(256 * 256 / t.block_size * t.type_size), '\0'),
                 {}});
    for (const char* m : {"attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"}) {
      f32(StrCat("blk.0.", m, ".weight"), {256, 256});
    }
    f32("blk.0.ffn_norm.weight", {256});
    if (unused) {  // a tensor the model does not use, in a type tandem cannot decode
      b.AddTensor({"extra.weight",
                   static_cast<uint32_t>(model::GgmlType::kIQ2_XXS),
                   {256},
                   std::string(66, '\0'),
                   {}});
    }
    ASSERT_TRUE(b.WriteTo(path));
  };
  const std::string dir = std::filesystem::temp_directory_path() / "tandem-cli-inspect";
  std::filesystem::create_directories(dir);
  write(dir + "/bad.gguf", static_cast<uint32_t>(model::GgmlType::kIQ2_XXS), false);
  RunResult bad = Tandem("inspect --model " + dir + "/bad.gguf");
  EXPECT_EQ(bad.exit_code, 0) << bad.out;  // the file is readable: inspect describes it
  EXPECT_THAT(bad.out, ::testing::HasSubstr("servable          no"));
  EXPECT_THAT(bad.out, ::testing::HasSubstr("unsupported       model: tensor "
                                            "'blk.0.attn_q.weight' has unsupported type IQ2_XXS"));
  EXPECT_THAT(bad.out, ::testing::HasSubstr(
                           "type IQ2_XXS: no decoder in tandem (1 tensor: blk.0.attn_q.weight)"));
  write(dir + "/yarn.gguf", static_cast<uint32_t>(model::GgmlType::kQ4_K), true);
  RunResult yarn = Tandem("inspect --model " + dir + "/yarn.gguf");
  EXPECT_THAT(yarn.out, ::testing::HasSubstr("servable          no"));
  EXPECT_THAT(yarn.out,
              ::testing::HasSubstr(
                  "unsupported       config: model config: "
                  "llama.rope.scaling.original_context_length is missing (YaRN needs it)"));

  write(dir + "/good.gguf", static_cast<uint32_t>(model::GgmlType::kF16), false);
  RunResult good = Tandem("inspect --model " + dir + "/good.gguf");
  EXPECT_EQ(good.exit_code, 0) << good.out;
  EXPECT_THAT(good.out, ::testing::HasSubstr("servable          yes"));
  EXPECT_THAT(good.out, ::testing::Not(::testing::HasSubstr("unsupported")));
  EXPECT_THAT(good.out, ::testing::Not(::testing::HasSubstr("not decodable")));
  // Stored: the F16 matrix (128 KiB), 6 F32 matrices of 256 KiB, the tied 4 × 256 F32
  // embedding and 2 F32 norms; converted: the F16 norm, 256 floats.
  EXPECT_THAT(good.out, ::testing::HasSubstr("weights in memory 1.6308 MiB as stored + 1 KiB "
                                             "converted to F32 at load"));
  // A tensor the model does not use does not stop it; inspect still names its type.
  write(dir + "/extra.gguf", static_cast<uint32_t>(model::GgmlType::kF16), false, true);
  RunResult extra = Tandem("inspect --model " + dir + "/extra.gguf");
  EXPECT_THAT(extra.out, ::testing::HasSubstr("servable          yes"));
  EXPECT_THAT(extra.out, ::testing::HasSubstr(
                             "not decodable     type IQ2_XXS: no decoder in tandem (1 tensor: "
                             "extra.weight)"));
  std::filesystem::remove_all(dir);
}

// A mixture of experts: its experts and the weights one token reads beside the total
// (tiny_qwen3moe: 64 wide, untied 512-token vocabulary, 2 layers of 24,768 attention
// and norm weights, a 512-weight router and 8 experts of 6,144: 65,600 + 2 × 74,432 in
// all; per token one embedding row, the output matrix and norm, and 4 of the experts:
// 32,896 + 2 × 49,856).
TEST(CliInspect, ReportsExpertsAndTheParametersReadPerToken) {
  RunResult r = Tandem("inspect --model " + TestDataPath("tiny_qwen3moe.gguf"));
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_THAT(r.out, ::testing::HasSubstr(
                         "experts           8, 4 used per token, each 32 wide (softmax gating, "
                         "weights renormalised)"));
  EXPECT_THAT(r.out,
              ::testing::HasSubstr("parameters        0.0002145 B, 0.0001326 B read per token"));
  EXPECT_THAT(r.out, ::testing::HasSubstr("servable          yes"));
}

TEST(CliTokenize, JsonIdsMatchTheReference) {
  std::ifstream in(TestDataPath("tokenizer_smollm2.json"));
  nlohmann::json golden = nlohmann::json::parse(in);
  int checked = 0;
  for (const auto& c : golden.at("cases")) {
    std::string text = c.at("text");
    if (text.find('\0') != std::string::npos || text.size() > 200) continue;
    RunResult r =
        Tandem("tokenize --json --model " + DefaultModelPath() + " --text " + Quote(text));
    ASSERT_EQ(r.exit_code, 0) << r.out;
    EXPECT_EQ(nlohmann::json::parse(r.out), c.at("ids")) << text;
    if (++checked == 20) break;
  }
  EXPECT_EQ(checked, 20);
}

TEST(CliTokenize, ReadsStdinAndWorksOnVocabOnlyFiles) {
  RunResult r = Tandem("tokenize --json --no-special --model " + TestDataPath("spm_tiny.gguf") +
                       " < /dev/null");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_EQ(nlohmann::json::parse(r.out), nlohmann::json::array());
  std::string cmd = "printf 'the cat' | " + std::string(TANDEM_BIN_DIR) +
                    "/tandem tokenize --json --no-special --model " + TestDataPath("spm_tiny.gguf");
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  char buf[256] = {};
  size_t n = fread(buf, 1, sizeof(buf) - 1, p);
  ASSERT_EQ(pclose(p), 0);
  auto ids = nlohmann::json::parse(std::string(buf, n)).get<std::vector<int32_t>>();
  auto file = model::GgufFile::Open(TestDataPath("spm_tiny.gguf"));
  ASSERT_TRUE(file.ok());
  auto tok = tokenizer::Tokenizer::FromGguf(**file);
  ASSERT_TRUE(tok.ok());
  EXPECT_EQ(*(*tok)->Decode(ids), "the cat");
}

// End to end against Hugging Face: the greedy continuations in the engine golden file,
// in exact math (the default on this CPU may be fast: kernels/backend.h).
TEST(CliGenerate, JsonMatchesTheReferenceContinuation) {
  std::ifstream in(TestDataPath("engine_golden.json"));
  const auto golden = nlohmann::json::parse(in);
  for (int i : {0, 1, 4}) {
    const auto& c = golden.at("cases").at(i);
    const std::string text = c.at("text");
    const std::vector<int32_t> want = c.at("continuation_ids");
    RunResult r =
        Tandem("generate --json --cpu-math exact --temperature 0 --ignore-eos --threads 2 -n " +
               std::to_string(want.size()) + " --model " + DefaultModelPath() + " --prompt " +
               Quote(text));
    ASSERT_EQ(r.exit_code, 0) << r.out;
    const auto j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j.at("token_ids").get<std::vector<int32_t>>(), want) << text;
    EXPECT_EQ(j.at("finish_reason"), "length");
    EXPECT_EQ(j.at("usage").at("prompt_tokens"), c.at("n_prompt"));
    EXPECT_EQ(j.at("usage").at("completion_tokens"), want.size());
    EXPECT_GT(j.at("timings").at("decode_tokens_per_s").get<double>(), 0.0);
  }
}

// In exact math: the answer below is the float32 path's (fast answers otherwise on this
// 135 M model).
TEST(CliGenerate, ChatStopsAtEndOfTurnAndRejectsBadParameters) {
  RunResult r = Tandem("generate --json --chat --cpu-math exact --temperature 0 -n 64 --model " +
                       DefaultModelPath() + " --prompt 'What is the capital of France?'");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j.at("finish_reason"), "stop");
  EXPECT_EQ(j.at("text"), "The capital of France is Paris.");
  EXPECT_EQ(j.at("token_ids").back(), 2);  // <|im_end|>, not part of the text
  RunResult bad =
      Tandem("generate --temperature -1 --model " + DefaultModelPath() + " --prompt hi");
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_THAT(bad.out, ::testing::HasSubstr("temperature"));
  RunResult zero = Tandem("generate -n 0 --model " + DefaultModelPath() + " --prompt hi");
  EXPECT_EQ(zero.exit_code, 1);
  EXPECT_THAT(zero.out, ::testing::HasSubstr("max_tokens"));
}

TEST(CliErrors, BadInputsGiveClearMessagesAndExitCodeOne) {
  RunResult missing = Tandem("inspect --model /nonexistent.gguf");
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_THAT(missing.out, ::testing::HasSubstr("/nonexistent.gguf"));
  RunResult not_gguf =
      Tandem("tokenize --model " + TestDataPath("smollm2_tensors.json") + " --text hi");
  EXPECT_EQ(not_gguf.exit_code, 1);
  EXPECT_THAT(not_gguf.out, ::testing::HasSubstr("not a GGUF file"));
  RunResult bad_utf8 =
      Tandem("tokenize --model " + DefaultModelPath() + " --text $(printf 'a\\377')");
  EXPECT_EQ(bad_utf8.exit_code, 1);
  EXPECT_THAT(bad_utf8.out, ::testing::HasSubstr("not valid UTF-8"));
}

// The GPU benchmarks' commands run on any backend: bench engine on a synthetic model
// with a prefill sweep, bench attention in both cases; `--device cuda` on a machine
// without one is a clear error, not a crash.
// `tandem bench speculative`: one row per prompt kind and batch, outputs identical to
// plain decoding with either drafter (the model as its own draft keeps every greedy
// proposal); a draft method without a draft, or a draft with ngram, is refused.
TEST(CliBench, SpeculativeReportsEachDrafterAgainstPlainDecoding) {
  for (const std::string& drafter :
       std::vector<std::string>{"", " --draft-model " + DefaultModelPath()}) {
    RunResult r = Tandem("bench speculative --model " + DefaultModelPath() + drafter +
                         " -t 2 --tokens 12 --batches 1,2 --repeat 1 --json");
    ASSERT_EQ(r.exit_code, 0) << r.out;
    const auto j = nlohmann::json::parse(r.out.substr(r.out.find('{')));
    ASSERT_EQ(j["rows"].size(), 4u);
    for (const auto& row : j["rows"]) EXPECT_TRUE(row["outputs_identical"].get<bool>());
    EXPECT_EQ(j["speculative"], drafter.empty() ? "ngram" : "draft");
    if (!drafter.empty()) {
      EXPECT_EQ(j["rows"][0]["acceptance"].get<double>(), 1.0);
    }
  }
  RunResult none =
      Tandem("bench speculative --model " + DefaultModelPath() + " --speculative draft");
  EXPECT_EQ(none.exit_code, 1);
  EXPECT_THAT(none.out, ::testing::HasSubstr("--draft-model"));
  RunResult both = Tandem("bench speculative --model " + DefaultModelPath() +
                          " --speculative ngram --draft-model " + DefaultModelPath());
  EXPECT_EQ(both.exit_code, 1);
  EXPECT_THAT(both.out, ::testing::HasSubstr("--draft-model"));
}

// --cpu-math fast against exact on the default model (Q4_1, whose rows the integer path
// takes): the distributions differ (so the fast path ran) but little — on 8,192 tokens
// of the corpus the mean KL is 0.003 and 96.6 % of top tokens agree (docs/performance.md).
// `bench cluster` drives a `tandem serve` it starts, and pushes KV to its decode worker
// itself: with the cluster's internal key and the workers' KV layout (default math).
TEST(CliBench, ClusterMeasuresAgainstAServeItStarts) {
  RunResult r =
      Tandem("bench cluster --json -r 1 -p 64 --batches 1 -n 8 -t 1 -m " + DefaultModelPath());
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out.substr(r.out.find('{')));
  EXPECT_EQ(j.at("prompt_tokens"), 64);
  EXPECT_GT(j.at("cluster_ttft_ms").get<double>(), 0);
  EXPECT_EQ(j.at("kv_bytes").get<int64_t>(), 64 * j.at("kv_bytes_per_token").get<int64_t>());
  EXPECT_GT(j.at("kv_push_gb_per_s").get<double>(), 0);
}

TEST(CliBench, KldMeasuresFastAgainstExact) {
  const std::string base = "bench kld --model " + DefaultModelPath() + " --text " +
                           TestDataPath("kld_corpus.txt") + " -t 2 --ctx 128";
  RunResult r = Tandem(base + " --max-tokens 512 --json");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out.substr(r.out.find('{')));
  EXPECT_EQ(j["windows"], 4);
  EXPECT_EQ(j["scored_tokens"], 4 * 64);
  EXPECT_GT(j["kld_mean"].get<double>(), 0.0);
  EXPECT_LT(j["kld_mean"].get<double>(), 0.02);
  EXPECT_LE(j["kld_median"].get<double>(), j["kld_p99"].get<double>());
  EXPECT_GE(j["same_top_token"].get<double>(), 0.9);
  EXPECT_NEAR(j["ppl_fast"].get<double>() / j["ppl_exact"].get<double>(), 1.0, 0.03);
  RunResult short_text = Tandem(base + " --max-tokens 100");
  EXPECT_EQ(short_text.exit_code, 1);
  EXPECT_THAT(short_text.out, ::testing::HasSubstr("fewer than one window"));
  RunResult no_text = Tandem("bench kld --model " + DefaultModelPath() + " --text /nonexistent");
  EXPECT_EQ(no_text.exit_code, 1);
  EXPECT_THAT(no_text.out, ::testing::HasSubstr("--text"));
}

// --save-logits writes llama-perplexity's --kl-divergence-base file: its header, the
// windows' tokens as tokenized, and one row per scored position but each window's last,
// whose steps decode to a distribution (exp of the log-probabilities sums to 1).
TEST(CliBench, KldSavesExactLogProbabilitiesInLlamaPerplexitysFormat) {
  const std::string path =
      std::filesystem::temp_directory_path() / ("tandem-kld-" + std::to_string(getpid()));
  RunResult r = Tandem("bench kld --model " + DefaultModelPath() + " --text " +
                       TestDataPath("kld_corpus.txt") +
                       " -t 2 --ctx 64 --max-tokens 128 --json --save-logits " + path);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::filesystem::remove(path);
  ASSERT_GE(bytes.size(), 20u);
  EXPECT_EQ(bytes.substr(0, 8), "_logits_");
  auto i32 = [&](size_t at) {
    int32_t v;
    std::memcpy(&v, bytes.data() + at, 4);
    return v;
  };
  const int32_t n_ctx = i32(8), n_vocab = i32(12), n_chunk = i32(16);
  EXPECT_EQ(n_ctx, 64);
  EXPECT_EQ(n_vocab, 49152);
  ASSERT_EQ(n_chunk, 2);
  // The tokens: the text's first 128, as the tokenizer gives them.
  auto model = model::GgufFile::Open(DefaultModelPath());
  ASSERT_TRUE(model.ok());
  auto tok = tokenizer::Tokenizer::FromGguf(**model);
  ASSERT_TRUE(tok.ok());
  std::ifstream text_in(TestDataPath("kld_corpus.txt"), std::ios::binary);
  const std::string text((std::istreambuf_iterator<char>(text_in)),
                         std::istreambuf_iterator<char>());
  auto ids = (*tok)->Encode(text);
  ASSERT_TRUE(ids.ok());
  for (int i = 0; i < 128; ++i) ASSERT_EQ(i32(20 + 4 * i), (*ids)[static_cast<size_t>(i)]) << i;
  const size_t rows = 2 * (64 - 1 - 32), row_words = 2 * ((49152 + 1) / 2) + 4;
  const size_t head = 20 + 4 * 128;
  ASSERT_EQ(bytes.size(), head + rows * row_words * 2);
  for (size_t row = 0; row < rows; ++row) {
    const char* p = bytes.data() + head + row * row_words * 2;
    float step, min_log_prob;
    std::memcpy(&step, p, 4);
    std::memcpy(&min_log_prob, p + 4, 4);
    ASSERT_GT(step, 0.0f) << row;
    double total = 0;
    int top = 0;
    for (int v = 0; v < n_vocab; ++v) {
      uint16_t q;
      std::memcpy(&q, p + 8 + 2 * v, 2);
      top = std::max<int>(top, q);
      total += std::exp(min_log_prob + step * q);
    }
    EXPECT_EQ(top, 65535) << row;  // the most likely token sits at the top step
    EXPECT_NEAR(total, 1.0, 0.02) << row;
  }
}

TEST(CliBench, SyntheticModelsAndTheAttentionBenchRunOnTheCpu) {
  RunResult e = Tandem(
      "bench engine --synthetic tiny -t 2 -r 1 -p 16 -n 4 --batch 2 --batch-prompt 8 "
      "--batch-gen 4 --pp-sweep 32,64,128 --json");
  ASSERT_EQ(e.exit_code, 0) << e.out;
  const auto j = nlohmann::json::parse(e.out.substr(e.out.find('{')));
  EXPECT_EQ(j["model"], "synthetic:tiny");
  EXPECT_EQ(j["pp_sweep"].size(), 3u);
  // The fit is reported; its value is timing (three tiny prompts of a tiny model: under
  // load its slope came out negative once), which a unit test does not judge.
  EXPECT_TRUE(std::isfinite(j["pp_fit"]["slope_us_per_token"].get<double>()));
  EXPECT_TRUE(j["pp_fit"].contains("r2"));
  RunResult d = Tandem(
      "bench attention -t 2 --batch 3 --context 100 --heads 4 --kv-heads 2 "
      "--head-dim 64 -r 2 --json");
  ASSERT_EQ(d.exit_code, 0) << d.out;
  EXPECT_GT(nlohmann::json::parse(d.out)["kv_gb_per_s"].get<double>(), 0);
  RunResult p = Tandem(
      "bench attention -t 2 --prefill 70 --heads 4 --kv-heads 2 --head-dim 64 "
      "-r 1 --json");
  ASSERT_EQ(p.exit_code, 0) << p.out;
  EXPECT_GT(nlohmann::json::parse(p.out)["tflops"].get<double>(), 0);
  RunResult bad = Tandem("bench attention --heads 5 --kv-heads 2");
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_THAT(bad.out, ::testing::HasSubstr("multiple of kv-heads"));
  RunResult gpu = Tandem("bench engine --synthetic tiny --device cuda -r 1");
  EXPECT_EQ(gpu.exit_code, 1);
  std::string lower = gpu.out;
  for (char& ch : lower) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  EXPECT_THAT(lower, ::testing::HasSubstr("cuda"));
  RunResult both = Tandem("bench engine --synthetic tiny --model x.gguf");
  EXPECT_NE(both.exit_code, 0);
}

// `tandem serve` on loopback: `tandem client --json` prints what `tandem generate
// --json` prints for the same flags, and SIGTERM lets a running request finish.
TEST(CliServe, ClientAnswersLikeGenerateAndSigtermDrains) {
  char dir[] = "/tmp/tandem-serve-test-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string log = std::string(dir) + "/serve.log";
  Subprocess serve;
  ASSERT_TRUE(serve.Start({std::string(TANDEM_BIN_DIR) + "/tandem", "serve", "--model",
                           DefaultModelPath(), "--grpc-port", "0", "--http-port", "-1",
                           "--threads-per-worker", "1", "--drain-timeout-ms", "20000"},
                          log));
  std::string endpoint;
  for (int i = 0; i < 3000 && endpoint.empty(); ++i) {
    std::ifstream in(log);
    std::stringstream text;
    text << in.rdbuf();
    const std::string out = text.str();
    const size_t at = out.find("ready: gRPC ");
    if (at != std::string::npos) {
      endpoint = out.substr(at + 12, out.find_first_of(" \n", at + 12) - at - 12);
    }
    ASSERT_TRUE(serve.running()) << out;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_FALSE(endpoint.empty()) << "tandem serve never printed ready";

  for (const std::string flags : {"--prompt 'The capital of France is' -n 24 --temperature 0",
                                  "--chat --prompt 'Tell me a story' -n 32 --temperature 0.8 "
                                  "--seed 7"}) {
    SCOPED_TRACE(flags);
    RunResult local =
        Tandem("generate --json --threads 1 --model " + DefaultModelPath() + " " + flags);
    RunResult remote = Tandem("client --json --timeout 120 --endpoint " + endpoint + " " + flags);
    ASSERT_EQ(local.exit_code, 0) << local.out;
    ASSERT_EQ(remote.exit_code, 0) << remote.out;
    const auto a = nlohmann::json::parse(local.out), b = nlohmann::json::parse(remote.out);
    for (const char* key : {"token_ids", "text", "finish_reason", "usage"}) {
      EXPECT_EQ(a.at(key), b.at(key)) << key;
    }
  }

  // A long request is running when SIGTERM arrives: it still completes.
  RunResult drained;
  std::thread client([&] {
    drained = Tandem("client --json --timeout 120 --endpoint " + endpoint +
                     " --prompt 'Count slowly:' -n 120 --temperature 0 --ignore-eos");
  });
  // Signalled once the router has the request on the decode worker (not after a guess).
  {
    auto router = v1::Generation::NewStub(rpc::MakeChannel(endpoint));
    bool running = false;
    for (int i = 0; i < 6000 && !running; ++i) {
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
      v1::GetServerInfoResponse info;
      if (router->GetServerInfo(&ctx, v1::GetServerInfoRequest(), &info).ok()) {
        for (const auto& w : info.decode_workers()) running = running || w.in_flight() > 0;
      }
      if (!running) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    ASSERT_TRUE(running) << "the request never reached the decode worker";
  }
  serve.Signal(SIGTERM);
  client.join();
  ASSERT_EQ(drained.exit_code, 0) << drained.out;
  EXPECT_EQ(nlohmann::json::parse(drained.out).at("usage").at("completion_tokens"), 120);
  const auto status = serve.Wait(std::chrono::seconds(30));
  ASSERT_TRUE(status.has_value()) << "tandem serve did not exit";
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0);
  // And the cluster is gone: no one answers on the endpoint any more.
  RunResult after = Tandem("client --timeout 2 --endpoint " + endpoint + " --prompt hi -n 1");
  EXPECT_EQ(after.exit_code, 1);
  std::filesystem::remove_all(dir);
}

// Without --api-key the router's API is open, but the workers are not: `tandem serve`
// gives its processes a random key of their own, so nobody else on the host can release
// a lease (cancelling someone's request) or make a prefill worker push KV to an address
// of their choosing. Health checks stay open; the cluster serves as before.
TEST(CliServe, WorkersRequireTheClustersOwnKeyEvenWithoutAnApiKey) {
  char dir[] = "/tmp/tandem-serve-key-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string log = std::string(dir) + "/serve.log";
  const std::string endpoints = std::string(dir) + "/endpoints.json";
  Subprocess serve;
  ASSERT_TRUE(
      serve.Start({std::string(TANDEM_BIN_DIR) + "/tandem", "serve", "--model", DefaultModelPath(),
                   "--grpc-port", "0", "--http-port", "-1", "--threads-per-worker", "1",
                   "--drain-timeout-ms", "2000", "--endpoints-file", endpoints},
                  log));
  for (int i = 0; i < 3000 && !std::filesystem::exists(endpoints); ++i) {
    ASSERT_TRUE(serve.running()) << "tandem serve exited before it was ready";
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_TRUE(std::filesystem::exists(endpoints));
  const nlohmann::json e = nlohmann::json::parse(std::ifstream(endpoints));
  std::map<std::string, int> port;
  for (const auto& p : e.at("processes")) port[p.at("name")] = p.at("grpc_port").get<int>();
  auto channel = [&](const std::string& name) {
    return rpc::MakeChannel(StrCat("127.0.0.1:", port.at(name)));  // no key
  };
  auto deadline = [](grpc::ClientContext* ctx) {
    ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  };
  {
    auto decode = v1::DecodeWorker::NewStub(channel("decode-0"));
    for (uint64_t lease = 1; lease <= 3; ++lease) {
      grpc::ClientContext ctx;
      deadline(&ctx);
      v1::ReleaseRequest req;
      req.set_lease_id(lease);
      v1::ReleaseResponse resp;
      EXPECT_EQ(decode->Release(&ctx, req, &resp).error_code(), grpc::StatusCode::UNAUTHENTICATED);
    }
    auto prefill = v1::PrefillWorker::NewStub(channel("prefill-0"));
    grpc::ClientContext ctx;
    deadline(&ctx);
    v1::PrefillRequest req;
    req.add_prompt_token_ids(1);
    req.mutable_destination()->set_address("10.255.255.1:9");  // anywhere
    v1::PrefillResponse resp;
    EXPECT_EQ(prefill->Prefill(&ctx, req, &resp).error_code(), grpc::StatusCode::UNAUTHENTICATED);
    auto health = grpc::health::v1::Health::NewStub(channel("decode-0"));
    grpc::ClientContext hctx;
    deadline(&hctx);
    grpc::health::v1::HealthCheckRequest hreq;
    grpc::health::v1::HealthCheckResponse hresp;
    EXPECT_TRUE(health->Check(&hctx, hreq, &hresp).ok());
  }
  // The key is not in any process's command line.
  for (const auto& p : e.at("processes")) {
    std::ifstream cmdline(StrCat("/proc/", p.at("pid").get<int>(), "/cmdline"));
    std::string args((std::istreambuf_iterator<char>(cmdline)), std::istreambuf_iterator<char>());
    EXPECT_EQ(args.find("internal-key"), std::string::npos) << p.at("name");
  }
  RunResult answered = Tandem("client --timeout 60 --endpoint " + e.at("grpc").get<std::string>() +
                              " --prompt 'The capital of France is' -n 4 --temperature 0");
  EXPECT_EQ(answered.exit_code, 0) << answered.out;
  serve.Signal(SIGTERM);
  EXPECT_TRUE(serve.Wait(std::chrono::seconds(30)).has_value());
  std::filesystem::remove_all(dir);
}

// A KV pool that cannot hold one request of the advertised length is refused before
// anything starts, naming the flag, what it holds and what it needs; so is a
// --max-model-len past the model's context. (With default flags the pools are sized to
// hold it: tests/serving checks each worker's pool against /v1/models' max_model_len.)
TEST(CliServe, APoolThatCannotHoldOneFullRequestIsRefusedAtStart) {
  const std::string serve = "serve --grpc-port 0 --http-port -1 --model " + DefaultModelPath();
  RunResult small = Tandem(serve + " --prefill-kv-cache-bytes 268435456");
  EXPECT_EQ(small.exit_code, 1) << small.out;
  EXPECT_THAT(small.out, ::testing::HasSubstr(
                             "--prefill-kv-cache-bytes 268435456: holds 5824 tokens, fewer than "
                             "one 8192-token request needs (--max-model-len); give at least "
                             "378224640"));
  RunResult decode = Tandem(serve + " --kv-cache-bytes 100000000");
  EXPECT_EQ(decode.exit_code, 1) << decode.out;
  EXPECT_THAT(decode.out, ::testing::HasSubstr("--kv-cache-bytes 100000000: holds"));
  RunResult too_long = Tandem(serve + " --max-model-len 9000");
  EXPECT_EQ(too_long.exit_code, 1) << too_long.out;
  EXPECT_THAT(too_long.out, ::testing::HasSubstr("--max-model-len: 9000 is outside 1 .. 8192"));
  EXPECT_THAT(small.out + decode.out + too_long.out,
              ::testing::Not(::testing::HasSubstr("listening")));  // nothing was started
}

// A model no worker could load (here a Mixtral-style file, llama with experts, whose
// router tensor is missing) is refused before any process starts, with the reason
// the workers would give, in seconds.
TEST(CliServe, AModelNoWorkerCanLoadIsRefusedAtStartWithTheReason) {
  testing::GgufBuilder b = testing::TinyGpt2Vocab();  // architecture llama, 4 tokens
  b.Uint32("llama.block_count", 1)
      .Uint32("llama.embedding_length", 64)
      .Uint32("llama.attention.head_count", 4)
      .Uint32("llama.feed_forward_length", 32)
      .Uint32("llama.context_length", 256)
      .Uint32("llama.expert_count", 4)
      .Uint32("llama.expert_used_count", 2);
  auto f32 = [&](const std::string& name, std::vector<uint64_t> dims) {
    uint64_t n = 1;
    for (uint64_t d : dims) n *= d;
    b.F32Tensor(name, dims, std::vector<float>(n, 0.01f));
  };
  f32("token_embd.weight", {64, 4});
  f32("output_norm.weight", {64});
  f32("blk.0.attn_norm.weight", {64});
  f32("blk.0.ffn_norm.weight", {64});
  for (const char* m : {"attn_q", "attn_k", "attn_v", "attn_output"}) {
    f32(StrCat("blk.0.", m, ".weight"), {64, 64});
  }
  f32("blk.0.ffn_gate_exps.weight", {64, 32, 4});
  f32("blk.0.ffn_up_exps.weight", {64, 32, 4});
  f32("blk.0.ffn_down_exps.weight", {32, 64, 4});
  const std::string path = std::filesystem::temp_directory_path() / "tandem-serve-no-router.gguf";
  ASSERT_TRUE(b.WriteTo(path));
  const auto t0 = std::chrono::steady_clock::now();
  RunResult r = Tandem("serve --grpc-port 0 --http-port -1 --model " + path);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(20));
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_THAT(r.out, ::testing::HasSubstr("tensor 'blk.0.ffn_gate_inp.weight' is missing"));
  EXPECT_THAT(r.out, ::testing::Not(::testing::HasSubstr("listening")));  // nothing started
  std::filesystem::remove(path);
}

// Start-up is supervised: a worker that exits before the cluster is ready (here the
// decode worker refusing --speculative draft without a model) fails `tandem serve` at
// once with that worker's own error, and SIGTERM stops a start-up that cannot finish
// (the decode worker blocked opening a draft model that is a FIFO nobody writes).
// Before, both waited out the 120 s readiness limit.
TEST(CliServe, AWorkerThatExitsOrHangsDuringStartUpDoesNotHoldServe) {
  const std::string serve =
      "serve --grpc-port 0 --http-port -1 --threads-per-worker 1 --model " + DefaultModelPath();
  const auto t0 = std::chrono::steady_clock::now();
  RunResult refused = Tandem(serve + " --speculative draft");
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(30));
  EXPECT_EQ(refused.exit_code, 1) << refused.out;
  EXPECT_THAT(refused.out,
              ::testing::HasSubstr("error: decode-0 exited during start-up (exit code 1)"));
  EXPECT_THAT(refused.out, ::testing::HasSubstr("--speculative draft: needs --draft-model"));

  char dir[] = "/tmp/tandem-serve-hang-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string fifo = std::string(dir) + "/draft.gguf", log = std::string(dir) + "/serve.log";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  Subprocess hung;
  ASSERT_TRUE(hung.Start(
      {std::string(TANDEM_BIN_DIR) + "/tandem", "serve", "--model", DefaultModelPath(),
       "--grpc-port", "0", "--http-port", "-1", "--threads-per-worker", "1", "--draft-model", fifo},
      log));
  auto text = [&log] {
    std::stringstream t;
    t << std::ifstream(log).rdbuf();
    return t.str();
  };
  // The router listens once every worker does: serve is waiting for readiness.
  for (int i = 0; i < 3000 && text().find("tandem-router listening") == std::string::npos; ++i) {
    ASSERT_TRUE(hung.running()) << text();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_THAT(text(), ::testing::HasSubstr("tandem-router listening"));
  hung.Signal(SIGTERM);
  const auto status = hung.Wait(std::chrono::seconds(30));
  ASSERT_TRUE(status.has_value()) << "SIGTERM waited for the readiness limit\n" << text();
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << text();
  EXPECT_THAT(text(), ::testing::HasSubstr("tandem serve: signal 15 during start-up; stopped"));
  std::filesystem::remove_all(dir);
}

// A worker that dies at every start (its model file replaced by a truncated one while
// the cluster ran) is restarted after growing pauses, and past --max-restarts `tandem
// serve` stops the cluster and exits non-zero quoting the worker's own last error,
// instead of restarting it forever.
TEST(CliServe, ACrashLoopingWorkerStopsServeWithItsLastError) {
  char dir[] = "/tmp/tandem-serve-crash-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string model = std::string(dir) + "/model.gguf";
  std::filesystem::copy_file(DefaultModelPath(), model);
  const std::string log = std::string(dir) + "/serve.log";
  const std::string endpoints = std::string(dir) + "/endpoints.json";
  Subprocess serve;
  ASSERT_TRUE(serve.Start(
      {std::string(TANDEM_BIN_DIR) + "/tandem", "serve", "--model", model, "--grpc-port", "0",
       "--http-port", "-1", "--threads-per-worker", "1", "--drain-timeout-ms", "2000",
       "--max-restarts", "3", "--restart-backoff-ms", "100", "--endpoints-file", endpoints},
      log));
  for (int i = 0; i < 3000 && !std::filesystem::exists(endpoints); ++i) {
    ASSERT_TRUE(serve.running()) << "tandem serve exited before it was ready";
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_TRUE(std::filesystem::exists(endpoints)) << "tandem serve never became ready";
  pid_t decode_pid = 0;
  const nlohmann::json procs = nlohmann::json::parse(std::ifstream(endpoints)).at("processes");
  for (const auto& p : procs) {
    if (p.at("name") == "decode-0") decode_pid = p.at("pid").get<pid_t>();
  }
  ASSERT_GT(decode_pid, 0) << procs.dump();
  // A new file under the same name: running processes keep the old one mapped.
  {
    std::ifstream in(model, std::ios::binary);
    std::string head(4096, '\0');
    in.read(head.data(), static_cast<std::streamsize>(head.size()));
    std::ofstream(model + ".tmp", std::ios::binary) << head;
  }
  std::filesystem::rename(model + ".tmp", model);
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_EQ(kill(decode_pid, SIGKILL), 0);
  const auto status = serve.Wait(std::chrono::seconds(60));
  ASSERT_TRUE(status.has_value()) << "tandem serve kept restarting the worker";
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 1);
  // Backoff 0.1 + 0.2 + 0.4 s and three failed loads: seconds, not a minute.
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(30));
  std::stringstream text;
  text << std::ifstream(log).rdbuf();
  const std::string out = text.str();
  EXPECT_THAT(out, ::testing::HasSubstr("decode-0 died 4 times in a row"));
  EXPECT_THAT(out, ::testing::HasSubstr("giving up (--max-restarts 3)"));
  EXPECT_THAT(out, ::testing::HasSubstr("error: decode-0 keeps dying; its last messages:"));
  // The worker's own reason, quoted after the summary.
  const std::string tail = out.substr(out.find("keeps dying"));
  EXPECT_THAT(tail, ::testing::HasSubstr("tandem-decode-worker"));
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n') < 400, true) << "restarted too often";
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tandem
