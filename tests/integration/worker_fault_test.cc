// Both workers in one process, joined by a loopback KV sender that calls the decode
// worker's KV API directly (no gRPC), with faults injected into their backends: a
// forward pass that fails ends its request with the backend's status, frees its
// blocks, and the worker serves the next request exactly as a single engine would.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "common/engine/engine.h"
#include "common/engine/loaded_model.h"
#include "decode_worker/decode_worker.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/testing/faultable_backend.h"
#include "prefill_worker/prefill_worker.h"
#include "tests/test_paths.h"
#include "tests/worker_test_util.h"

namespace tandem {
namespace {

using ::testing::HasSubstr;

// KV from a prefill worker's storage straight into a decode worker's reservation.
class LoopbackSender : public transport::KvSender {
 public:
  // `fail_after_layers` (≥ 0): every transfer fails UNAVAILABLE once it has sent that
  // many layer pieces, as when the decode worker dies mid-transfer.
  LoopbackSender(const kernels::KvStorage* kv, decode::DecodeWorker* decode,
                 int fail_after_layers = -1)
      : kv_(kv), decode_(decode), fail_after_layers_(fail_after_layers) {}
  absl::Status Connect(const std::string&) override {
    ++connects;
    return absl::OkStatus();
  }
  std::atomic<int> connects{0};  // Connect calls: a destination contacted
  absl::StatusOr<std::unique_ptr<transport::KvTransfer>> Begin(const transport::KvDestination& dst,
                                                               std::vector<int32_t> src) override {
    absl::Status st = decode_->BeginKv(dst.lease_id, dst.epoch, dst.block_ids);
    return std::unique_ptr<transport::KvTransfer>(new Transfer(this, dst, std::move(src), st));
  }

 private:
  class Transfer : public transport::KvTransfer {
   public:
    Transfer(LoopbackSender* s, transport::KvDestination dst, std::vector<int32_t> src,
             absl::Status st)
        : s_(s), dst_(std::move(dst)), src_(std::move(src)), status_(std::move(st)) {}
    void SendLayer(int32_t layer, int32_t first, int32_t count,
                   std::shared_ptr<kernels::Event> ready) override {
      if (!status_.ok()) return;
      if (s_->fail_after_layers_ >= 0 && sent_++ >= s_->fail_after_layers_) {
        status_ = absl::UnavailableError("injected: the decode worker went away");
        return;
      }
      if (absl::Status st = ready->Wait(); !st.ok()) {
        status_ = st;
        return;
      }
      std::string payload(static_cast<size_t>(count * s_->kv_->layout().LayerBytes()), '\0');
      status_ = s_->kv_->ReadLayer({src_.data() + first, static_cast<size_t>(count)}, layer,
                                   reinterpret_cast<uint8_t*>(payload.data()));
      if (status_.ok()) {
        status_ = s_->decode_->WriteKv(dst_.lease_id, layer, first, count, std::move(payload));
      }
      bytes_ += count * s_->kv_->layout().LayerBytes();
    }
    void Finish(std::function<void(absl::Status, transport::KvTransferStats)> done) override {
      if (status_.ok()) status_ = s_->decode_->EndKv(dst_.lease_id);
      done(status_, {.bytes = bytes_});
    }
    bool Failed() const override { return !status_.ok(); }  // engine thread only, as SendLayer

   private:
    LoopbackSender* s_;
    transport::KvDestination dst_;
    std::vector<int32_t> src_;
    absl::Status status_;
    int64_t bytes_ = 0;
    int sent_ = 0;
  };
  const kernels::KvStorage* kv_;
  decode::DecodeWorker* decode_;
  const int fail_after_layers_;
};

class WorkerFaultTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto m = engine::LoadModel(::tandem::testing::DefaultModelPath());
    ASSERT_TRUE(m.ok()) << m.status();
    model_ = new engine::LoadedModel(*std::move(m));
  }
  static void TearDownTestSuite() { delete model_; }

  // Engine options whose backend the test can fault (its pointer lands in *backend).
  static engine::EngineOptions Options(kernels::CpuBackend** backend) {
    engine::EngineOptions o;
    o.kv_cache_bytes = int64_t{64} << 20;
    o.cpu_math = kernels::CpuMath::kExact;  // what the faultable backend computes
    o.make_backend = kernels::testing::FaultableBackend(backend, 1);
    return o;
  }

  void SetUp() override {
    decode::DecodeWorkerOptions d;
    d.engine = Options(&decode_backend_);
    decode_ = *decode::DecodeWorker::Create(*model_->weights, d);
    prefill_ = *prefill::PrefillWorker::Create(
        *model_->weights, Options(&prefill_backend_), [this](const kernels::KvStorage& kv) {
          auto s = std::make_unique<LoopbackSender>(&kv, decode_.get());
          sender_ = s.get();
          return s;
        });
  }
  void TearDown() override {
    // Stats are published at the end of an engine turn: give the last one a moment.
    auto clean = [](const engine::EngineStats& e) {
      return e.blocks.free_blocks + e.blocks.cached_blocks == e.blocks.num_blocks;
    };
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while ((!clean(prefill_->Stats().engine) || !clean(decode_->Stats().engine) ||
            decode_->Stats().leases != 0) &&
           std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    EXPECT_TRUE(clean(prefill_->Stats().engine)) << "prefill worker leaked blocks";
    EXPECT_TRUE(clean(decode_->Stats().engine)) << "decode worker leaked blocks";
    EXPECT_EQ(decode_->Stats().leases, 0);
    prefill_.reset();
  }

  // Reserve → prefill → decode; the whole answer or the first error.
  absl::StatusOr<std::vector<int32_t>> Run(const std::vector<int32_t>& prompt,
                                           const engine::SamplingParams& p,
                                           kernels::CpuBackend* fault_decode = nullptr) {
    return ::tandem::testing::RunPair(*decode_, *prefill_, "loopback", prompt, p, [&] {
      if (fault_decode != nullptr) fault_decode->InjectFault(absl::InternalError("injected fault"));
    });
  }

  // The single-process engine's answer.
  static std::vector<int32_t> Reference(const std::vector<int32_t>& prompt,
                                        const engine::SamplingParams& p) {
    engine::EngineOptions o;
    o.num_threads = 1;
    o.cpu_math = kernels::CpuMath::kExact;  // as Options()
    return ::tandem::testing::SingleEngineTokens(*model_->weights, o, prompt, p);
  }

  static engine::LoadedModel* model_;
  kernels::CpuBackend* prefill_backend_ = nullptr;
  kernels::CpuBackend* decode_backend_ = nullptr;
  std::unique_ptr<decode::DecodeWorker> decode_;
  std::unique_ptr<prefill::PrefillWorker> prefill_;
  LoopbackSender* sender_ = nullptr;  // prefill_'s
};
engine::LoadedModel* WorkerFaultTest::model_ = nullptr;

TEST_F(WorkerFaultTest, LoopbackPairAnswersLikeOneEngine) {
  const std::vector<int32_t> prompt = *model_->tokenizer->Encode("The capital of France is");
  auto got = Run(prompt, ::tandem::testing::Greedy(8));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, Reference(prompt, ::tandem::testing::Greedy(8)));
}

TEST_F(WorkerFaultTest, FailedPrefillPassFailsTheRequestAndTheWorkerGoesOn) {
  const std::vector<int32_t> prompt = *model_->tokenizer->Encode("Once upon a time");
  prefill_backend_->InjectFault(absl::InternalError("injected fault"));
  auto failed = Run(prompt, ::tandem::testing::Greedy(6));
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kInternal);
  EXPECT_THAT(std::string(failed.status().message()), HasSubstr("injected"));
  EXPECT_EQ(prefill_->Stats().engine.failed_steps, 1);
  auto next = Run(prompt, ::tandem::testing::Greedy(6));
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_EQ(*next, Reference(prompt, ::tandem::testing::Greedy(6)));
}

// The fault strikes in the middle of the pass: the first layers' K/V have already
// gone to the decode worker when it fails; the request still fails, and nothing leaks.
TEST_F(WorkerFaultTest, PrefillPassFailingHalfWayFailsTheRequestAndTheWorkerGoesOn) {
  const std::vector<int32_t> prompt = *model_->tokenizer->Encode("A long time ago, far away,");
  // RopeTable and Embedding, then 13 compute ops per layer: the fault lands in layer
  // 19 of the model's 30, after layers 0..18 have been sent.
  prefill_backend_->InjectFault(absl::InternalError("injected fault"), 2 + 19 * 13);
  const int64_t received_before = decode_->Stats().kv_bytes_received;
  auto failed = Run(prompt, ::tandem::testing::Greedy(6));
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kInternal);
  EXPECT_GT(decode_->Stats().kv_bytes_received, received_before);  // some layers went out
  auto next = Run(prompt, ::tandem::testing::Greedy(6));
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_EQ(*next, Reference(prompt, ::tandem::testing::Greedy(6)));
}

TEST_F(WorkerFaultTest, FailedDecodePassFailsTheStreamAndTheWorkerGoesOn) {
  const std::vector<int32_t> prompt = *model_->tokenizer->Encode("def fib(n):");
  auto failed = Run(prompt, ::tandem::testing::Greedy(6), decode_backend_);
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kInternal);
  auto next = Run(prompt, ::tandem::testing::Greedy(6));
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_EQ(*next, Reference(prompt, ::tandem::testing::Greedy(6)));
  // Read after the next request: the stats are published at the end of an engine turn.
  EXPECT_EQ(decode_->Stats().engine.failed_steps, 1);
}

// A Prefill whose destination cannot hold the prompt (too few blocks, cached_blocks past
// the prompt's blocks or negative) is refused naming the field before anything is
// computed; it was INTERNAL (50) or accepted (−1) before.
TEST_F(WorkerFaultTest, ADestinationThatCannotHoldThePromptIsRefusedNamingTheField) {
  const std::vector<int32_t> prompt = *model_->tokenizer->Encode("The capital of France is");
  auto r = decode_->Reserve(static_cast<int64_t>(prompt.size()) + 1, std::chrono::seconds(60));
  ASSERT_TRUE(r.ok()) << r.status();
  const int64_t computed = prefill_->Stats().engine.prompt_tokens_computed;
  const std::pair<transport::KvDestination, const char*> cases[] = {
      {{"loopback", r->lease_id, r->block_ids, 50, r->epoch},
       "destination.cached_blocks: must be between 0 and 1 (the prompt's blocks), got 50"},
      {{"loopback", r->lease_id, r->block_ids, -1, r->epoch},
       "destination.cached_blocks: must be between 0 and 1 (the prompt's blocks), got -1"},
      {{"loopback", r->lease_id, {}, 0, r->epoch},
       "destination.block_ids: 0 blocks for a 5-token prompt that needs 1"},
  };
  for (const auto& [dst, message] : cases) {
    auto got = prefill_->Prefill(prompt, ::tandem::testing::Greedy(2), dst);
    EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument) << got.status();
    EXPECT_EQ(got.status().message(), message);
  }
  // A prompt or parameters the engine would refuse: refused naming the field before the
  // destination is contacted.
  const int connects = sender_->connects;
  std::vector<int32_t> bad_prompt = prompt;
  bad_prompt[1] = 1 << 30;
  auto bad = prefill_->Prefill(bad_prompt, ::tandem::testing::Greedy(2),
                               {"loopback", r->lease_id, r->block_ids, 0, r->epoch});
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument) << bad.status();
  EXPECT_THAT(std::string(bad.status().message()), ::testing::StartsWith("prompt:"));
  engine::SamplingParams bad_params = ::tandem::testing::Greedy(2);
  bad_params.top_p = 2;
  bad = prefill_->Prefill(prompt, bad_params, {"loopback", r->lease_id, r->block_ids, 0, r->epoch});
  EXPECT_THAT(std::string(bad.status().message()), ::testing::StartsWith("top_p:"));
  EXPECT_EQ(sender_->connects, connects);
  EXPECT_EQ(prefill_->Stats().engine.prompt_tokens_computed, computed);
  decode_->Release(r->lease_id);
  // The worker goes on: the same reservation's proper request answers.
  auto ok = Run(prompt, ::tandem::testing::Greedy(4));
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(*ok, Reference(prompt, ::tandem::testing::Greedy(4)));
}

// A prompt computed in chunks whose transfer fails midway (the decode worker went away,
// or its reservation is gone) stops at the next chunk instead of computing the rest,
// fails with the transfer's reason, and leaks nothing on either side.
TEST_F(WorkerFaultTest, APromptWhoseTransferFailsStopsAtTheNextChunk) {
  kernels::CpuBackend* unused = nullptr;
  engine::EngineOptions o = Options(&unused);
  o.scheduler.max_prefill_chunk = 64;
  const int n_layers = static_cast<int>(model_->weights->config().n_layers);
  // Fails during the second chunk's layers.
  auto chunked =
      *prefill::PrefillWorker::Create(*model_->weights, o, [&](const kernels::KvStorage& kv) {
        return std::make_unique<LoopbackSender>(&kv, decode_.get(), n_layers + n_layers / 2);
      });
  std::vector<int32_t> prompt;
  const std::vector<int32_t> words = *model_->tokenizer->Encode(" the quick brown fox jumps");
  while (prompt.size() < 640) prompt.insert(prompt.end(), words.begin(), words.end());
  prompt.resize(640);  // 10 chunks of 64
  auto r = decode_->Reserve(641, std::chrono::seconds(60));
  ASSERT_TRUE(r.ok()) << r.status();
  const int64_t chunks_before = chunked->Stats().engine.prefill_chunks;
  auto first = chunked->Prefill(prompt, ::tandem::testing::Greedy(4),
                                {"loopback", r->lease_id, r->block_ids, 0, r->epoch});
  EXPECT_EQ(first.status().code(), absl::StatusCode::kUnavailable) << first.status();
  EXPECT_THAT(std::string(first.status().message()), HasSubstr("went away"));
  // Chunks 1 and 2 ran (2 failed midway); without the stop, all 9 partial ones would.
  EXPECT_EQ(chunked->Stats().engine.prefill_chunks - chunks_before, 2);
  decode_->Release(r->lease_id);  // as the router does after a failed prefill
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  auto free = [&] {
    const engine::EngineStats e = chunked->Stats().engine;
    return e.blocks.free_blocks + e.blocks.cached_blocks == e.blocks.num_blocks;
  };
  while (!free() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(free()) << "the stopped prompt's blocks leaked";
  // And a prompt whose destination is gone before it starts computes one chunk at most.
  auto gone = decode_->Reserve(641, std::chrono::seconds(60));
  ASSERT_TRUE(gone.ok());
  decode_->Release(gone->lease_id);
  auto plain =
      *prefill::PrefillWorker::Create(*model_->weights, o, [&](const kernels::KvStorage& kv) {
        return std::make_unique<LoopbackSender>(&kv, decode_.get());
      });
  const int64_t plain_before = plain->Stats().engine.prefill_chunks;
  auto refused = plain->Prefill(prompt, ::tandem::testing::Greedy(4),
                                {"loopback", gone->lease_id, gone->block_ids, 0, gone->epoch});
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kNotFound) << refused.status();
  EXPECT_LE(plain->Stats().engine.prefill_chunks - plain_before, 1);
}

}  // namespace
}  // namespace tandem
