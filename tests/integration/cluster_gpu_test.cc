// A disaggregated pair on one GPU (label gpu; skips without one): a prefill and a decode
// worker, both `--device cuda --batch-invariant`, behind a router, answer concurrent
// requests — greedy and seeded, prompts of 1 to 700 tokens — with exactly the tokens one
// GPU process (the engine in this test, batch-invariant) gives. Twice: over CUDA IPC
// (`--kv-transport cuda-ipc`, how one GPU pairs in production) and over NCCL
// (`--kv-transport nccl`, each worker under its own NCCL_HOSTID with sockets on
// loopback: the test-only arrangement that lets NCCL pair two ranks on one GPU, so the
// real two-process NCCL path runs where only one GPU is lent). The model is written here: a
// Llama-shaped GGUF with random bf16-exact weights and a byte-level vocabulary (no model file
// travels to the GPU machine). Prints the KV transfer time the router reports for the longest
// prompt.
//
// On the GPU machine the worker binaries come from the bundle: TANDEM_BIN_DIR
// (tests/gpu/run.sh sets it).
#include <cstdio>
#include <filesystem>
#include <map>
#include <random>
#include <thread>

#include "common/engine/engine.h"
#include "common/engine/loaded_model.h"
#include "common/util/half.h"
#include "common/util/strings.h"
#include "gtest/gtest.h"
#include "kernels/cuda/require_gpu.h"
#include "tests/cluster_harness.h"
#include "tests/gguf_builder.h"

namespace tandem {
namespace {

using ::tandem::testing::Cluster;
using ::tandem::testing::ClusterConfig;
using ::tandem::testing::GenerateResult;

// GPT-2's byte → printable-character map, as UTF-8: the 256 tokens of a byte-level
// vocabulary.
std::vector<std::string> ByteTokens() {
  std::vector<int> printable;
  for (int b = '!'; b <= '~'; ++b) printable.push_back(b);
  for (int b = 0xA1; b <= 0xAC; ++b) printable.push_back(b);
  for (int b = 0xAE; b <= 0xFF; ++b) printable.push_back(b);
  std::map<int, int> code;
  for (int b : printable) code[b] = b;
  int next = 256;
  for (int b = 0; b < 256; ++b)
    if (!code.contains(b)) code[b] = next++;
  std::vector<std::string> out;
  for (int b = 0; b < 256; ++b) {
    const int cp = code[b];
    std::string s;
    if (cp < 0x80) {
      s.push_back(static_cast<char>(cp));
    } else {
      s.push_back(static_cast<char>(0xC0 | (cp >> 6)));
      s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
    out.push_back(s);
  }
  return out;
}

// A Llama-shaped model: 6 layers, hidden 512, 8 query heads of 64 over 2 KV heads,
// FFN 1536, 258 tokens (256 bytes, "ab", an end token). Weights N(0, 0.05) rounded to
// bf16 (so the GPU's bf16 copy is exact), norms near 1.
std::string WriteModel(const std::string& dir) {
  constexpr int kLayers = 6, kHidden = 512, kHeads = 8, kKvHeads = 2, kHeadDim = 64, kFfn = 1536;
  std::vector<std::string> tokens = ByteTokens();
  tokens.push_back("ab");
  tokens.push_back("<|end|>");
  const int vocab = static_cast<int>(tokens.size());
  std::vector<int32_t> types(vocab, 1);
  types.back() = 3;
  testing::GgufBuilder b;
  b.String("general.architecture", "llama")
      .String("general.name", "tandem-gpu-pair")
      .Uint32("llama.block_count", kLayers)
      .Uint32("llama.embedding_length", kHidden)
      .Uint32("llama.attention.head_count", kHeads)
      .Uint32("llama.attention.head_count_kv", kKvHeads)
      .Uint32("llama.feed_forward_length", kFfn)
      .Uint32("llama.context_length", 4096)
      .Float32("llama.attention.layer_norm_rms_epsilon", 1e-5f)
      .Float32("llama.rope.freq_base", 500000.0f)
      .String("tokenizer.ggml.model", "gpt2")
      .String("tokenizer.ggml.pre", "gpt2")
      .StringArray("tokenizer.ggml.tokens", tokens)
      .Int32Array("tokenizer.ggml.token_type", types)
      .StringArray("tokenizer.ggml.merges", {"a b"})
      .Uint32("tokenizer.ggml.eos_token_id", vocab - 1)
      .Bool("tokenizer.ggml.add_bos_token", false);
  std::mt19937 rng(20261201);
  auto matrix = [&](const std::string& name, int rows, int cols, float scale) {
    std::normal_distribution<float> g(0.0f, scale);
    std::vector<float> v(static_cast<size_t>(rows) * cols);
    for (float& x : v) x = Bf16ToFloat(FloatToBf16(g(rng)));
    b.F32Tensor(name, {static_cast<uint64_t>(cols), static_cast<uint64_t>(rows)}, v);
  };
  auto norm = [&](const std::string& name) {
    std::uniform_real_distribution<float> u(0.9f, 1.1f);
    std::vector<float> v(kHidden);
    for (float& x : v) x = Bf16ToFloat(FloatToBf16(u(rng)));
    b.F32Tensor(name, {kHidden}, v);
  };
  matrix("token_embd.weight", vocab, kHidden, 1.0f);
  norm("output_norm.weight");
  matrix("output.weight", vocab, kHidden, 0.05f);
  for (int i = 0; i < kLayers; ++i) {
    const std::string p = StrCat("blk.", i, ".");
    norm(p + "attn_norm.weight");
    matrix(p + "attn_q.weight", kHeads * kHeadDim, kHidden, 0.05f);
    matrix(p + "attn_k.weight", kKvHeads * kHeadDim, kHidden, 0.05f);
    matrix(p + "attn_v.weight", kKvHeads * kHeadDim, kHidden, 0.05f);
    matrix(p + "attn_output.weight", kHidden, kHeads * kHeadDim, 0.05f);
    norm(p + "ffn_norm.weight");
    matrix(p + "ffn_gate.weight", kFfn, kHidden, 0.05f);
    matrix(p + "ffn_up.weight", kFfn, kHidden, 0.05f);
    matrix(p + "ffn_down.weight", kHidden, kFfn, 0.05f);
  }
  const std::string path = dir + "/gpu-pair.gguf";
  EXPECT_TRUE(b.WriteTo(path));
  return path;
}

struct Case {
  std::vector<int32_t> prompt;
  engine::SamplingParams params;
};

// One prefill and one decode worker over `transport`: their answers equal one GPU
// process's; prints the KV transfer time left after compute for the longest prompt.
void CheckPairAnswersLikeOneGpuProcess(const std::string& transport) {
  const std::string dir = std::filesystem::temp_directory_path() / "tandem-cluster-gpu";
  std::filesystem::create_directories(dir);
  const std::string model_path = WriteModel(dir);
  auto model = engine::LoadModel(model_path);
  ASSERT_TRUE(model.ok()) << model.status();

  std::mt19937 rng(7);
  std::vector<Case> cases;
  const int lengths[] = {1, 5, 16, 17, 40, 100, 255, 700};
  for (int i = 0; i < 16; ++i) {
    Case c;
    std::uniform_int_distribution<int32_t> tok(0, 255);
    for (int t = 0; t < lengths[i % 8]; ++t) c.prompt.push_back(tok(rng));
    c.params.max_tokens = 12;
    c.params.ignore_eos = true;
    c.params.temperature = i % 2 == 0 ? 0.0 : 0.8;
    c.params.top_k = 40;
    c.params.top_p = 0.95f;
    c.params.seed = 100 + i;
    cases.push_back(c);
  }
  // One GPU process, batch-invariant: every case's tokens, all in one engine.
  std::vector<std::vector<int32_t>> expected(cases.size());
  {
    engine::EngineOptions o;
    o.device = "cuda";
    o.batch_invariant = true;
    o.kv_cache_bytes = int64_t{1} << 30;
    auto e = engine::Engine::Create(*model->weights, o);
    ASSERT_TRUE(e.ok()) << e.status();
    std::map<kv::SeqId, size_t> which;
    for (size_t i = 0; i < cases.size(); ++i)
      which[*(*e)->AddRequest(cases[i].prompt, cases[i].params)] = i;
    while ((*e)->HasWork()) {
      for (const auto& ev : (*e)->Step()) {
        ASSERT_TRUE(ev.error.ok()) << ev.error;
        if (ev.token >= 0) expected[which[ev.id]].push_back(ev.token);
      }
    }
  }

  ClusterConfig config;
  config.model = model_path;
  config.device = "cuda";
  config.prefill_kv_bytes = config.decode_kv_bytes = int64_t{1} << 30;
  for (auto* flags : {&config.prefill_flags, &config.decode_flags}) {
    *flags = {"--batch-invariant", "--kv-transport", transport};
  }
  if (transport == "nccl") {
    config.prefill_env = {"NCCL_HOSTID=tandem-test-prefill", "NCCL_SOCKET_IFNAME=lo"};
    config.decode_env = {"NCCL_HOSTID=tandem-test-decode", "NCCL_SOCKET_IFNAME=lo"};
  }
  std::string error;
  auto cluster = Cluster::Start(config, &error);
  ASSERT_NE(cluster, nullptr) << error;
  std::vector<GenerateResult> results(cases.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < cases.size(); ++i) {
    threads.emplace_back([&, i] {
      v1::GenerateRequest r;
      r.mutable_token_ids()->mutable_ids()->Assign(cases[i].prompt.begin(), cases[i].prompt.end());
      v1::SamplingParams* s = r.mutable_sampling_params();
      s->set_max_tokens(cases[i].params.max_tokens);
      s->set_temperature(static_cast<float>(cases[i].params.temperature));
      s->set_top_k(cases[i].params.top_k);
      s->set_top_p(static_cast<float>(cases[i].params.top_p));
      s->set_seed(*cases[i].params.seed);
      s->set_ignore_eos(true);
      r.set_stream(true);
      results[i] = testing::Generate(cluster->generation(), r, std::chrono::seconds(120));
    });
  }
  for (auto& t : threads) t.join();
  double longest_ms = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE(StrCat("request ", i, ": ", cases[i].prompt.size(), " tokens"));
    ASSERT_TRUE(results[i].status.ok()) << results[i].status.error_message();
    EXPECT_EQ(results[i].token_ids, expected[i]);
    if (cases[i].prompt.size() == 700) {
      longest_ms = std::max(longest_ms, results[i].complete.timings().kv_transfer_ms());
    }
  }
  std::printf("%s pair: KV transfer left after compute for a 700-token prompt: %.3f ms\n",
              transport == "nccl" ? "NCCL (one GPU, two NCCL_HOSTIDs)" : "CUDA IPC", longest_ms);
  EXPECT_EQ(cluster->WaitForBaseline(), "");
}

TEST(ClusterGpu, OnePrefillOneDecodeOverCudaIpcAnswersLikeOneGpuProcess) {
  REQUIRE_GPU();
  CheckPairAnswersLikeOneGpuProcess("cuda-ipc");
}

TEST(ClusterGpu, OnePrefillOneDecodeOverNcclAnswersLikeOneGpuProcess) {
  REQUIRE_GPU();
  CheckPairAnswersLikeOneGpuProcess("nccl");
}

}  // namespace
}  // namespace tandem
