// The disaggregated cluster end to end: real router, prefill and decode processes on
// loopback, started and stopped by each test. The reference for every answer is the
// single-process engine `tandem generate` runs; after every test the leak oracle
// checks that each worker holds no KV block and no reservation.
#include <signal.h>

#include <atomic>
#include <functional>
#include <map>
#include <thread>

#include "common/engine/engine.h"
#include "common/engine/loaded_model.h"
#include "common/rpc/router_probe.h"
#include "common/rpc/rpc_server.h"
#include "common/util/strings.h"
#include "gmock/gmock.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "gtest/gtest.h"
#include "tests/cluster_harness.h"
#include "tests/test_paths.h"

namespace tandem {
namespace {

using ::tandem::testing::Cluster;
using ::tandem::testing::ClusterConfig;
using ::tandem::testing::GenerateResult;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;
using Clock = std::chrono::steady_clock;

double MsSince(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

ClusterConfig Topology(int prefill, int decode) {
  ClusterConfig c;
  c.prefill = prefill;
  c.decode = decode;
  return c;
}

struct Case {
  std::vector<int32_t> prompt;
  engine::SamplingParams params;
};

class ClusterTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto m = engine::LoadModel(::tandem::testing::DefaultModelPath());
    ASSERT_TRUE(m.ok()) << m.status() << " (run scripts/fetch-model.sh)";
    model_ = new engine::LoadedModel(*std::move(m));
  }
  static void TearDownTestSuite() { delete model_; }

  void TearDown() override {
    if (cluster_ != nullptr) {
      EXPECT_EQ(cluster_->WaitForBaseline(), "") << "leak oracle";
      cluster_.reset();
    }
  }

  void StartCluster(const ClusterConfig& config) {
    std::string error;
    cluster_ = Cluster::Start(config, &error);
    ASSERT_NE(cluster_, nullptr) << error;
  }

  static const tokenizer::Tokenizer& tok() { return *model_->tokenizer; }

  // Sends `c` (into *r) on the returned thread, and returns once prefill worker 0 has
  // computed a chunk of it (its KV is on the way) or a minute has passed: its stats
  // before in *before, then in *now.
  std::thread StartChunkedPrefill(const Case& c, GenerateResult* r, v1::WorkerStats* before,
                                  v1::WorkerStats* now) {
    EXPECT_TRUE(cluster_->Stats(Cluster::kPrefill, 0, before));
    std::thread client(
        [this, c, r] { *r = ::tandem::testing::Generate(cluster_->generation(), ToRequest(c)); });
    const auto t0 = Clock::now();
    while (MsSince(t0) < 60000) {
      if (cluster_->Stats(Cluster::kPrefill, 0, now) &&
          now->prefill_chunks_total() > before->prefill_chunks_total())
        break;
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    return client;
  }

  // A long, varied text's token ids; prompts are windows of it.
  static std::vector<int32_t> TokenPool() {
    static const char* kSubjects[] = {"The old lighthouse", "A quantum computer", "Our team",
                                      "The river delta",    "Every compiler",     "My grandmother"};
    static const char* kVerbs[] = {"measures", "remembers", "rebuilds", "questions", "carries"};
    static const char* kObjects[] = {"the winter light", "seventeen prime numbers",
                                     "a forgotten recipe", "the shape of the coastline",
                                     "every unfinished letter"};
    std::string text;
    for (int i = 0; text.size() < 12000; ++i) {
      text += StrCat(kSubjects[i % 6], " ", kVerbs[(i * 7) % 5], " ", kObjects[(i * 3) % 5],
                     i % 4 == 0 ? ", and then " : ". ", i % 9 == 0 ? "\n" : "");
      if (i % 11 == 0) text += StrCat("In ", 1800 + i, " it cost $", i * 13 % 997, ". ");
    }
    return *tok().Encode(text);
  }

  static std::vector<int32_t> Window(const std::vector<int32_t>& pool, size_t len, size_t seed) {
    const size_t start = (seed * 131) % (pool.size() - len);
    return {pool.begin() + start, pool.begin() + start + len};
  }

  static engine::SamplingParams Params(bool greedy, int max_tokens, uint64_t seed) {
    engine::SamplingParams p;
    p.max_tokens = max_tokens;
    p.temperature = greedy ? 0.0 : 0.8;
    p.top_k = 40;
    p.top_p = 0.95;
    p.min_p = 0.05;
    p.seed = seed;
    return p;
  }

  static v1::GenerateRequest ToRequest(const Case& c, bool stream = true) {
    v1::GenerateRequest r;
    r.mutable_token_ids()->mutable_ids()->Assign(c.prompt.begin(), c.prompt.end());
    v1::SamplingParams* s = r.mutable_sampling_params();
    s->set_max_tokens(c.params.max_tokens);
    s->set_temperature(static_cast<float>(c.params.temperature));
    s->set_top_k(c.params.top_k);
    s->set_top_p(static_cast<float>(c.params.top_p));
    s->set_min_p(static_cast<float>(c.params.min_p));
    s->set_seed(*c.params.seed);
    s->set_ignore_eos(c.params.ignore_eos);
    r.set_stream(stream);
    return r;
  }

  // What the single-process engine (`tandem generate`) produces for each case, and
  // its finish reason.
  static std::vector<std::pair<std::vector<int32_t>, engine::FinishReason>> Reference(
      const std::vector<Case>& cases) {
    engine::EngineOptions o;
    o.kv_cache_bytes = int64_t{512} << 20;
    o.num_threads = 2;
    o.device = ::tandem::testing::TestDevice();
    // The cluster's float params pass through a float proto field; so do these.
    auto e = engine::Engine::Create(*model_->weights, o);
    EXPECT_TRUE(e.ok());
    std::map<kv::SeqId, size_t> which;
    for (size_t i = 0; i < cases.size(); ++i) {
      engine::SamplingParams p = cases[i].params;
      p.temperature = static_cast<float>(p.temperature);
      p.top_p = static_cast<float>(p.top_p);
      p.min_p = static_cast<float>(p.min_p);
      which[*(*e)->AddRequest(cases[i].prompt, p)] = i;
    }
    std::vector<std::pair<std::vector<int32_t>, engine::FinishReason>> out(cases.size());
    while ((*e)->HasWork()) {
      for (const auto& ev : (*e)->Step()) {
        EXPECT_TRUE(ev.error.ok()) << ev.error;
        auto& o = out[which[ev.id]];
        if (ev.token >= 0) o.first.push_back(ev.token);
        if (ev.finished) o.second = ev.reason;
      }
    }
    return out;
  }

  // Sends every case at once, one thread each.
  std::vector<GenerateResult> RunConcurrently(const std::vector<Case>& cases) {
    std::vector<GenerateResult> results(cases.size());
    std::vector<std::thread> threads;
    for (size_t i = 0; i < cases.size(); ++i) {
      threads.emplace_back([&, i] {
        results[i] = ::tandem::testing::Generate(cluster_->generation(), ToRequest(cases[i]),
                                                 std::chrono::seconds(300));
      });
    }
    for (auto& t : threads) t.join();
    return results;
  }

  // 32 prompts: 31 of 1 to 700 tokens and one of `longest` (the two topologies take
  // 1,500 and 1,000: prefill is most of these tests' time).
  void ExpectSameAnswersAsOneProcess(const ClusterConfig& config, bool odd_greedy, size_t longest) {
    const std::vector<int32_t> pool = TokenPool();
    ASSERT_GT(pool.size(), 1600u);
    const size_t lengths[] = {1,   2,   3,   5,   7,   9,   12,  16,  17,  20,     24,
                              31,  33,  40,  45,  50,  60,  64,  80,  90,  100,    120,
                              128, 150, 180, 200, 250, 300, 400, 500, 700, longest};
    std::vector<Case> cases;
    for (size_t i = 0; i < 32; ++i) {
      const bool greedy = (i % 2 == 1) == odd_greedy;
      cases.push_back({Window(pool, lengths[i], i), Params(greedy, 1 + (i * 7) % 24, 1000 + i)});
    }
    const auto expected = Reference(cases);
    ASSERT_NO_FATAL_FAILURE(StartCluster(config));
    const auto results = RunConcurrently(cases);
    for (size_t i = 0; i < cases.size(); ++i) {
      SCOPED_TRACE(StrCat("request ", i, ": ", cases[i].prompt.size(),
                          " prompt tokens, T=", cases[i].params.temperature));
      const GenerateResult& r = results[i];
      ASSERT_TRUE(r.status.ok()) << r.status.error_message();
      ASSERT_TRUE(r.completed);
      EXPECT_EQ(r.token_ids, expected[i].first);
      EXPECT_EQ(r.complete.finish_reason(), expected[i].second == engine::FinishReason::kStop
                                                ? v1::FINISH_REASON_STOP
                                                : v1::FINISH_REASON_LENGTH);
      EXPECT_EQ(r.complete.usage().prompt_tokens(), static_cast<int>(cases[i].prompt.size()));
      EXPECT_EQ(r.complete.usage().completion_tokens(), static_cast<int>(r.token_ids.size()));
      EXPECT_GE(r.chunks, 1);
    }
    // The prompts past one chunk (512 tokens, the scheduler's default) were prefilled in
    // chunks, their KV sent per chunk: at least one partial chunk for each 512 tokens
    // before a prompt's last.
    int64_t partial = 0;
    for (size_t n : lengths) partial += static_cast<int64_t>((n - 1) / 512);
    ASSERT_GE(partial, 2);
    int64_t chunks = 0;
    for (int i = 0; i < config.prefill; ++i) {
      v1::WorkerStats s;
      ASSERT_TRUE(cluster_->Stats(Cluster::kPrefill, i, &s));
      chunks += s.prefill_chunks_total();
    }
    EXPECT_GE(chunks, partial);
  }

  static engine::LoadedModel* model_;
  std::unique_ptr<Cluster> cluster_;
};
engine::LoadedModel* ClusterTest::model_ = nullptr;

TEST_F(ClusterTest, OnePrefillOneDecodeAnswersLikeOneProcess) {
  ExpectSameAnswersAsOneProcess(Topology(1, 1), /*odd_greedy=*/true, /*longest=*/1500);
}

TEST_F(ClusterTest, TwoPrefillTwoDecodeAnswersLikeOneProcess) {
  ExpectSameAnswersAsOneProcess(Topology(2, 2), /*odd_greedy=*/false, /*longest=*/1000);
}

TEST_F(ClusterTest, StreamsIncrementallyAndHonoursStopStringsAcrossTokens) {
  ASSERT_NO_FATAL_FAILURE(StartCluster({}));
  const std::vector<int32_t> prompt = *tok().Encode("Once upon a time, in a small village,");
  Case c{prompt, Params(true, 48, 1)};
  c.params.ignore_eos = true;
  const auto expected = Reference({c})[0].first;
  const GenerateResult full = ::tandem::testing::Generate(cluster_->generation(), ToRequest(c));
  ASSERT_TRUE(full.status.ok()) << full.status.error_message();
  EXPECT_EQ(full.token_ids, expected);
  EXPECT_EQ(full.complete.finish_reason(), v1::FINISH_REASON_LENGTH);
  EXPECT_EQ(full.text, *tok().Decode(expected));
  // Incremental: many chunks, the first well before the end.
  EXPECT_GE(full.chunks, 8);
  ASSERT_FALSE(full.chunk_times.empty());
  const double first_to_end =
      std::chrono::duration<double, std::milli>(full.end - full.chunk_times.front()).count();
  EXPECT_GT(first_to_end, 50.0) << "the first chunk came only at the end";

  // A stop string made of the end of one token and the start of the next.
  std::string stop;
  size_t k = 0;
  for (k = 10; k + 1 < expected.size(); ++k) {
    const std::string a = *tok().Decode({expected[k]}), b = *tok().Decode({expected[k + 1]});
    if (a.size() >= 2 && b.size() >= 2 && a.find('\n') == std::string::npos &&
        b.find('\n') == std::string::npos) {
      stop = a.substr(a.size() - 2) + b.substr(0, 2);
      break;
    }
  }
  ASSERT_FALSE(stop.empty());
  const std::string before = *tok().Decode({expected.begin(), expected.begin() + k + 2});
  const size_t at = full.text.find(stop);
  ASSERT_NE(at, std::string::npos);
  v1::GenerateRequest req = ToRequest(c);
  req.mutable_sampling_params()->add_stop(stop);
  req.mutable_sampling_params()->add_stop("never appears \u00e9");
  for (bool stream : {true, false}) {
    SCOPED_TRACE(stream ? "streaming" : "not streaming");
    req.set_stream(stream);
    const GenerateResult r = ::tandem::testing::Generate(cluster_->generation(), req);
    ASSERT_TRUE(r.status.ok()) << r.status.error_message();
    EXPECT_EQ(r.text, full.text.substr(0, at));
    EXPECT_THAT(r.text, ::testing::Not(HasSubstr(stop)));
    EXPECT_EQ(r.complete.finish_reason(), v1::FINISH_REASON_STOP);
    EXPECT_EQ(r.complete.stop_reason(), stop);
    EXPECT_LE(r.token_ids.size(), k + 2 + 1);
    EXPECT_LT(r.token_ids.size(), expected.size());
    if (!stream) {
      EXPECT_EQ(r.chunks, 1);
    }
  }
}

// A client that leaves while its long prompt is being computed (here its gRPC deadline
// passes; a cancel or a closed HTTP connection takes the same path through the router)
// stops the prefill worker's work on it at the next chunk boundary: the worker is idle
// within a few chunks' time, most of the prompt's KV is never computed or sent, and the
// next short request is answered at once instead of after the rest of the prompt
// (docs/reliability.md).
TEST_F(ClusterTest, AnAbandonedPromptStopsItsPrefillAtTheNextChunk) {
  ClusterConfig config;
  config.prefill_kv_bytes = config.decode_kv_bytes = int64_t{256} << 20;
  config.prefill_flags = {"--max-prefill-chunk", "256"};
  ASSERT_NO_FATAL_FAILURE(StartCluster(config));
  const std::vector<int32_t> pool = TokenPool();
  std::vector<int32_t> prompt;
  while (prompt.size() < 3000) prompt.insert(prompt.end(), pool.begin(), pool.end());
  prompt.resize(3000);
  const GenerateResult left = ::tandem::testing::Generate(
      cluster_->generation(), ToRequest({prompt, Params(true, 4, 1)}), std::chrono::seconds(1));
  EXPECT_EQ(left.status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED)
      << left.status.error_message();
  const auto t0 = Clock::now();
  v1::WorkerStats s;
  double idle_ms = -1;
  while (MsSince(t0) < 3000) {
    ASSERT_TRUE(cluster_->Stats(Cluster::kPrefill, 0, &s));
    // queued_prompt_tokens counts a prompt from its arrival to its end (running and
    // waiting are as of the last finished step).
    if (s.queued_prompt_tokens() == 0 && s.running() + s.waiting() == 0) {
      idle_ms = MsSince(t0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_GE(idle_ms, 0) << "the prefill worker still computes the abandoned prompt";
  const auto t1 = Clock::now();
  const GenerateResult next = ::tandem::testing::Generate(
      cluster_->generation(), ToRequest({Window(pool, 4, 0), Params(true, 1, 2)}));
  const double next_ms = MsSince(t1);
  ASSERT_TRUE(next.status.ok()) << next.status.error_message();
  EXPECT_LT(next_ms, 3000) << "the next request waited behind the abandoned prompt";
  const auto t2 = Clock::now();
  ASSERT_TRUE(::tandem::testing::Generate(cluster_->generation(),
                                          ToRequest({Window(pool, 4, 0), Params(true, 1, 2)}))
                  .status.ok());
  std::printf(
      "abandoned prompt: prefill idle %.0f ms after the client left, %lld chunks of 256 "
      "computed; next request %.0f ms (the same again: %.0f ms)\n",
      idle_ms, static_cast<long long>(s.prefill_chunks_total()), next_ms, MsSince(t2));
  // Of the prompt's KV (3,000 tokens) at most the part computed before it was dropped.
  ASSERT_TRUE(cluster_->Stats(Cluster::kPrefill, 0, &s));
  EXPECT_LT(s.kv_transfer_bytes_total(), s.kv_bytes_per_token() * 3000 / 2);
  EXPECT_EQ(cluster_->WaitForBaseline(std::chrono::seconds(5)), "");
}

// The worker protocol carries logit_bias as two lists; of different lengths they are
// refused naming the field (before, the longer list was cut silently).
TEST_F(ClusterTest, LogitBiasListsOfDifferentLengthsAreRefusedNamingTheField) {
  ASSERT_NO_FATAL_FAILURE(StartCluster({}));
  v1::DecodeRequest req;
  req.set_lease_id(1);
  req.add_prompt_token_ids(1);
  req.set_first_token_id(2);
  req.mutable_params()->set_max_tokens(2);
  req.mutable_params()->add_logit_bias_ids(5);
  req.mutable_params()->add_logit_bias_ids(6);
  req.mutable_params()->add_logit_bias_values(1.0f);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  auto reader = cluster_->decode_stub(0)->Decode(&ctx, req);
  v1::DecodeResponse r;
  while (reader->Read(&r)) {
  }
  const grpc::Status st = reader->Finish();
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << st.error_message();
  EXPECT_THAT(st.error_message(), HasSubstr("params.logit_bias_values: 1 values for 2 ids"));
  EXPECT_EQ(cluster_->WaitForBaseline(), "");
}

// A KV destination named by a host name is refused naming the field before anything is
// computed or looked up (issue #41: the prefill worker resolved it through DNS); the
// same reservation named by its address is then served.
TEST_F(ClusterTest, AHostNameAsKvDestinationIsRefusedBeforeAnyLookup) {
  ASSERT_NO_FATAL_FAILURE(StartCluster({}));
  const std::vector<int32_t> prompt = *tok().Encode("The capital of France is");
  v1::ReserveRequest rreq;
  rreq.set_num_tokens(static_cast<int32_t>(prompt.size()) + 1);
  rreq.set_lease_ms(60000);
  v1::ReserveResponse reserved;
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    ASSERT_TRUE(cluster_->decode_stub(0)->Reserve(&ctx, rreq, &reserved).ok());
  }
  v1::WorkerStats before;
  ASSERT_TRUE(cluster_->Stats(Cluster::kPrefill, 0, &before));
  const std::string address = cluster_->address(Cluster::kDecode, 0);  // 127.0.0.1:port
  auto prefill = [&](const std::string& to, v1::PrefillResponse* resp) {
    v1::PrefillRequest req;
    req.mutable_prompt_token_ids()->Assign(prompt.begin(), prompt.end());
    req.mutable_params()->set_max_tokens(2);
    req.mutable_params()->set_top_p(1);
    req.mutable_params()->set_repetition_penalty(1);
    v1::KvDestination* d = req.mutable_destination();
    d->set_address(to);
    d->set_lease_id(reserved.lease_id());
    d->mutable_block_ids()->CopyFrom(reserved.block_ids());
    *d->mutable_fingerprint() = reserved.fingerprint();
    d->set_cached_blocks(reserved.cached_blocks());
    d->set_epoch(reserved.epoch());
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    return cluster_->prefill_stub(0)->Prefill(&ctx, req, resp);
  };
  v1::PrefillResponse resp;
  const grpc::Status named = prefill("localhost" + address.substr(address.find(':')), &resp);
  EXPECT_EQ(named.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << named.error_message();
  EXPECT_THAT(named.error_message(),
              AllOf(HasSubstr("destination.address"), HasSubstr("not an IP address")));
  v1::WorkerStats after;
  ASSERT_TRUE(cluster_->Stats(Cluster::kPrefill, 0, &after));
  EXPECT_EQ(after.kv_transfer_bytes_total(), before.kv_transfer_bytes_total());
  const grpc::Status ok = prefill(address, &resp);
  EXPECT_TRUE(ok.ok()) << ok.error_message();
  v1::ReleaseRequest release;
  release.set_lease_id(reserved.lease_id());
  v1::ReleaseResponse released;
  grpc::ClientContext ctx;
  ASSERT_TRUE(cluster_->decode_stub(0)->Release(&ctx, release, &released).ok());
  EXPECT_EQ(cluster_->WaitForBaseline(), "");
}

TEST_F(ClusterTest, CancelFreesEveryBlockAndOthersAreUnaffected) {
  ASSERT_NO_FATAL_FAILURE(StartCluster({}));
  const std::vector<int32_t> pool = TokenPool();
  std::vector<Case> cases;
  for (int i = 0; i < 3; ++i) {
    cases.push_back({Window(pool, 40 + 30 * i, i), Params(true, 120, i)});
    cases.back().params.ignore_eos = true;
  }
  const auto expected = Reference(cases);
  std::vector<GenerateResult> results(3);
  std::atomic<int> running_after_cancel{-1};
  std::vector<std::thread> threads;
  for (int i = 1; i < 3; ++i) {
    threads.emplace_back([&, i] {
      results[i] = ::tandem::testing::Generate(cluster_->generation(), ToRequest(cases[i]));
    });
  }
  // Request 0 is cancelled by its client after 5 chunks, while the others run.
  results[0] = ::tandem::testing::Generate(cluster_->generation(), ToRequest(cases[0]),
                                           std::chrono::seconds(120),
                                           [&](int chunk, grpc::ClientContext* ctx) {
                                             if (chunk == 4) ctx->TryCancel();
                                           });
  EXPECT_EQ(results[0].status.error_code(), grpc::StatusCode::CANCELLED);
  // The decode worker drops it within a step or so: two sequences left running.
  const auto t0 = Clock::now();
  v1::WorkerStats s;
  while (MsSince(t0) < 2000) {
    ASSERT_TRUE(cluster_->Stats(Cluster::kDecode, 0, &s));
    if (s.running() + s.waiting() <= 2) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_LE(s.running() + s.waiting(), 2) << "the cancelled sequence is still decoding";
  for (auto& t : threads) t.join();
  for (int i = 1; i < 3; ++i) {
    ASSERT_TRUE(results[i].status.ok()) << results[i].status.error_message();
    EXPECT_EQ(results[i].token_ids, expected[i].first) << "request " << i;
  }

  // Abort by id from another client.
  v1::GenerateRequest req = ToRequest(cases[1]);
  req.set_request_id("abort-me");
  // Aborted once its second chunk has arrived (it is decoding), not after a guess.
  std::thread aborter;
  const GenerateResult aborted = ::tandem::testing::Generate(
      cluster_->generation(), req, std::chrono::seconds(120), [&](int chunk, grpc::ClientContext*) {
        if (chunk != 2) return;
        aborter = std::thread([this] {
          v1::AbortRequest a;
          a.set_request_id("abort-me");
          v1::AbortResponse resp;
          grpc::ClientContext ctx;
          ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
          EXPECT_TRUE(cluster_->generation()->Abort(&ctx, a, &resp).ok());
          EXPECT_TRUE(resp.found());
        });
      });
  ASSERT_TRUE(aborter.joinable()) << "the request never streamed";
  aborter.join();
  EXPECT_EQ(aborted.status.error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_LT(aborted.token_ids.size(), 120u);
}

TEST_F(ClusterTest, KilledDecodeWorkerFailsItsRequestsFastOthersFinish) {
  ASSERT_NO_FATAL_FAILURE(StartCluster(Topology(1, 2)));
  const std::vector<int32_t> pool = TokenPool();
  std::vector<Case> cases;
  for (int i = 0; i < 4; ++i) {
    cases.push_back({Window(pool, 20 + i, i), Params(true, 200, i)});
    cases.back().params.ignore_eos = true;
  }
  std::vector<GenerateResult> results(4);
  std::atomic<int> streaming{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&, i] {
      results[i] = ::tandem::testing::Generate(cluster_->generation(), ToRequest(cases[i]),
                                               std::chrono::seconds(120),
                                               [&](int chunk, grpc::ClientContext*) {
                                                 if (chunk == 2) ++streaming;
                                               });
    });
  }
  const auto t0 = Clock::now();
  while (streaming < 4 && MsSince(t0) < 30000)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_EQ(streaming, 4);
  v1::WorkerStats s0, s1;
  ASSERT_TRUE(cluster_->Stats(Cluster::kDecode, 0, &s0));
  ASSERT_TRUE(cluster_->Stats(Cluster::kDecode, 1, &s1));
  ASSERT_GT(s0.running(), 0) << "requests were not spread over both decode workers";
  ASSERT_GT(s1.running(), 0) << "requests were not spread over both decode workers: "
                             << s0.DebugString() << s1.DebugString();
  const auto killed_at = Clock::now();
  cluster_->Kill(Cluster::kDecode, 0);
  for (auto& t : threads) t.join();
  int failed = 0, finished = 0;
  for (const GenerateResult& r : results) {
    if (r.status.ok()) {
      ++finished;
      EXPECT_EQ(r.token_ids.size(), 200u);
    } else {
      ++failed;
      EXPECT_EQ(r.status.error_code(), grpc::StatusCode::UNAVAILABLE) << r.status.error_message();
      EXPECT_LT(std::chrono::duration<double>(r.end - killed_at).count(), 5.0);
    }
  }
  EXPECT_EQ(failed, s0.running());
  EXPECT_EQ(finished, s1.running());
  // The survivor keeps serving new requests.
  const GenerateResult after =
      ::tandem::testing::Generate(cluster_->generation(), ToRequest(cases[0]));
  EXPECT_TRUE(after.status.ok()) << after.status.error_message();
}

// The decode worker dies while its request's long prompt is being prefilled in chunks:
// the prefill worker stops computing it at the next chunk (not after the whole prompt),
// the client gets UNAVAILABLE (HTTP 503, retryable), and the prefill worker holds
// nothing afterwards.
TEST_F(ClusterTest, ADecodeWorkerKilledDuringAChunkedPrefillFailsItUnavailableAtOnce) {
  ClusterConfig config = Topology(1, 1);
  config.prefill_flags = {"--max-prefill-chunk", "128"};
  ASSERT_NO_FATAL_FAILURE(StartCluster(config));
  const std::vector<int32_t> pool = TokenPool();
  Case c{Window(pool, 2000, 5), Params(true, 4, 5)};  // 15 partial chunks, then the last
  GenerateResult r;
  v1::WorkerStats before, s;
  std::thread client = StartChunkedPrefill(c, &r, &before, &s);
  ASSERT_GT(s.prefill_chunks_total(), before.prefill_chunks_total()) << "the prefill never began";
  const int64_t chunks_at_kill = s.prefill_chunks_total() - before.prefill_chunks_total();
  cluster_->Kill(Cluster::kDecode, 0);
  client.join();
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::UNAVAILABLE) << r.status.error_message();
  ASSERT_TRUE(cluster_->Stats(Cluster::kPrefill, 0, &s));
  // A chunk or two past the kill (the one running, the one that found the stream
  // broken), not the 15 − chunks_at_kill a prefill to its end would have computed.
  EXPECT_LE(s.prefill_chunks_total() - before.prefill_chunks_total(), chunks_at_kill + 3);
  EXPECT_LT(chunks_at_kill + 3, 15) << "the kill came too late to tell";
  EXPECT_EQ(cluster_->WaitForBaseline(), "");
}

// A decode worker paused (SIGSTOP) during a KV push, then resumed: the push and the
// request fail (UNAVAILABLE), the router's Release cannot reach the paused worker, and
// it is sent again once the worker answers a poll, so the reservation's blocks come
// back within seconds of the resume, not when the 120 s lease runs out.
TEST_F(ClusterTest, ADecodeWorkerPausedDuringAPushGetsItsBlocksBackOnResume) {
  ClusterConfig config = Topology(1, 1);
  config.prefill_flags = {"--max-prefill-chunk", "128"};
  config.router_flags = {"--lease-ms", "120000"};
  ASSERT_NO_FATAL_FAILURE(StartCluster(config));
  const std::vector<int32_t> pool = TokenPool();
  Case c{Window(pool, 2000, 7), Params(true, 4, 7)};
  GenerateResult r;
  v1::WorkerStats before, s;
  std::thread client = StartChunkedPrefill(c, &r, &before, &s);
  ASSERT_GT(s.prefill_chunks_total(), before.prefill_chunks_total()) << "the prefill never began";
  cluster_->Signal(Cluster::kDecode, 0, SIGSTOP);
  client.join();
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::UNAVAILABLE) << r.status.error_message();
  std::this_thread::sleep_for(std::chrono::seconds(3));  // the router's Release times out
  cluster_->Signal(Cluster::kDecode, 0, SIGCONT);
  const auto resumed = Clock::now();
  EXPECT_EQ(cluster_->WaitForBaseline(std::chrono::seconds(15)), "");
  EXPECT_LT(MsSince(resumed), 15000);
  v1::WorkerStats d;
  ASSERT_TRUE(cluster_->Stats(Cluster::kDecode, 0, &d));
  EXPECT_EQ(d.expired_leases_total(), 0) << "freed by its lease, not by the router";
  // And it serves again, once the router's health poll has seen it answer (its blocks
  // came back at once on the resume: the worker saw the abandoned push cancelled).
  ASSERT_TRUE(rpc::WaitForRouterReady(cluster_->endpoint(), std::chrono::seconds(15)));
  const GenerateResult after = ::tandem::testing::Generate(
      cluster_->generation(), ToRequest({Window(pool, 20, 1), Params(true, 4, 1)}));
  EXPECT_TRUE(after.status.ok()) << after.status.error_message();
}

TEST_F(ClusterTest, KilledPrefillWorkerIsRetriedOnAnother) {
  ASSERT_NO_FATAL_FAILURE(StartCluster(Topology(2, 1)));
  const std::vector<int32_t> pool = TokenPool();
  Case c{Window(pool, 1500, 3), Params(true, 8, 3)};
  const auto expected = Reference({c})[0].first;
  GenerateResult r;
  std::thread client(
      [&] { r = ::tandem::testing::Generate(cluster_->generation(), ToRequest(c)); });
  // Kill whichever prefill worker took the prompt, while it computes.
  int victim = -1;
  const auto t0 = Clock::now();
  while (victim < 0 && MsSince(t0) < 20000) {
    for (int i = 0; i < 2 && victim < 0; ++i) {
      v1::WorkerStats s;
      if (cluster_->Stats(Cluster::kPrefill, i, &s) && s.queued_prompt_tokens() > 0) victim = i;
    }
  }
  ASSERT_GE(victim, 0) << "no prefill worker ever held the prompt";
  cluster_->Kill(Cluster::kPrefill, victim);
  client.join();
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  EXPECT_EQ(r.token_ids, expected);
}

TEST_F(ClusterTest, ExpiredReservationsFreeTheirBlocksAndRefuseLateKv) {
  ASSERT_NO_FATAL_FAILURE(StartCluster({}));
  v1::WorkerStats before;
  ASSERT_TRUE(cluster_->Stats(Cluster::kDecode, 0, &before));
  v1::ReserveRequest rq;
  rq.set_num_tokens(100);
  rq.set_lease_ms(200);
  v1::ReserveResponse reservation;
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    ASSERT_TRUE(cluster_->decode_stub(0)->Reserve(&ctx, rq, &reservation).ok());
  }
  EXPECT_EQ(reservation.block_ids_size(), 7);  // ceil(100 / 16)
  v1::WorkerStats during;
  ASSERT_TRUE(cluster_->Stats(Cluster::kDecode, 0, &during));
  EXPECT_EQ(during.free_blocks(), before.free_blocks() - 7);
  EXPECT_EQ(during.reserved(), 1);

  // Blocks that are not the reservation's are refused before any write.
  auto push = [&](const std::vector<int32_t>& blocks, const v1::KvLayoutFingerprint& fp) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    v1::PushKvBlocksResponse resp;
    auto writer = cluster_->kv_stub(0)->PushKvBlocks(&ctx, &resp);
    v1::KvBlocksChunk chunk;
    chunk.set_lease_id(reservation.lease_id());
    chunk.set_epoch(reservation.epoch());
    *chunk.mutable_fingerprint() = fp;
    chunk.mutable_block_ids()->Assign(blocks.begin(), blocks.end());
    chunk.set_layer(0);
    chunk.set_num_blocks(1);
    chunk.set_payload(std::string(16 * 2 * 3 * 64 * 4, '\0'));
    writer->Write(chunk);
    writer->WritesDone();
    return writer->Finish();
  };
  std::vector<int32_t> theirs(reservation.block_ids().begin(), reservation.block_ids().end());
  std::vector<int32_t> wrong = theirs;
  wrong[0] = (wrong[0] + 1) % before.num_blocks() == theirs[1]
                 ? (wrong[0] + 2) % before.num_blocks()
                 : (wrong[0] + 1) % before.num_blocks();
  EXPECT_EQ(push(wrong, reservation.fingerprint()).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  // A push naming another process's epoch (a reservation from before a restart) is
  // refused before any write.
  {
    grpc::ClientContext ctx;
    v1::PushKvBlocksResponse resp;
    auto writer = cluster_->kv_stub(0)->PushKvBlocks(&ctx, &resp);
    v1::KvBlocksChunk chunk;
    chunk.set_lease_id(reservation.lease_id());
    chunk.set_epoch(reservation.epoch() + 1);
    *chunk.mutable_fingerprint() = reservation.fingerprint();
    chunk.mutable_block_ids()->Assign(theirs.begin(), theirs.end());
    writer->Write(chunk);
    writer->WritesDone();
    const grpc::Status st = writer->Finish();
    EXPECT_EQ(st.error_code(),
              grpc::StatusCode::NOT_FOUND);  // the reservation is not this process's
    EXPECT_THAT(st.error_message(), HasSubstr("epoch"));
  }
  // A CPU decode worker has no peer transport: a sender that only speaks NCCL is told.
  {
    v1::HandshakeRequest h;
    *h.mutable_fingerprint() = reservation.fingerprint();
    h.add_transports(v1::TRANSPORT_KIND_NCCL);
    h.mutable_device()->set_backend("cuda");
    v1::HandshakeResponse hr;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    const grpc::Status hs = cluster_->kv_stub(0)->Handshake(&ctx, h, &hr);
    EXPECT_EQ(hs.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
    EXPECT_THAT(hs.error_message(), HasSubstr("none in common"));
  }
  // Every field of the layout fingerprint is checked, at the handshake and on the push.
  const std::vector<std::pair<std::string, std::function<void(v1::KvLayoutFingerprint*)>>> changes =
      {
          {"block_size", [](v1::KvLayoutFingerprint* f) { f->set_block_size(32); }},
          {"dtype", [](v1::KvLayoutFingerprint* f) { f->set_dtype(v1::KV_DTYPE_BFLOAT16); }},
          {"element_order",
           [](v1::KvLayoutFingerprint* f) {
             f->set_element_order(v1::KV_ELEMENT_ORDER_UNSPECIFIED);
           }},
          {"head_dim", [](v1::KvLayoutFingerprint* f) { f->set_head_dim(128); }},
      };
  for (const auto& [field, change] : changes) {
    SCOPED_TRACE(field);
    v1::KvLayoutFingerprint other = reservation.fingerprint();
    change(&other);
    const grpc::Status mismatch = push(theirs, other);
    EXPECT_EQ(mismatch.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
    EXPECT_THAT(mismatch.error_message(), HasSubstr(field));
    v1::HandshakeRequest h;
    *h.mutable_fingerprint() = other;
    h.add_transports(v1::TRANSPORT_KIND_HOST);
    v1::HandshakeResponse hr;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    const grpc::Status hs = cluster_->kv_stub(0)->Handshake(&ctx, h, &hr);
    EXPECT_EQ(hs.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
    EXPECT_THAT(hs.error_message(), HasSubstr(field));
  }
  v1::WorkerStats after_refusals;
  ASSERT_TRUE(cluster_->Stats(Cluster::kDecode, 0, &after_refusals));
  EXPECT_EQ(after_refusals.kv_transfer_bytes_total(), before.kv_transfer_bytes_total());

  // The lease runs out: the blocks come back and late KV is refused.
  EXPECT_EQ(cluster_->WaitForBaseline(std::chrono::seconds(3)), "");
  EXPECT_EQ(push(theirs, reservation.fingerprint()).error_code(), grpc::StatusCode::NOT_FOUND);
  ASSERT_TRUE(cluster_->Stats(Cluster::kDecode, 0, &during));
  EXPECT_EQ(during.expired_leases_total(), 1);
}

// A Reserve whose answer the caller never got (its deadline passed while the worker
// was busy) is released by the key it was made under, at once, not when its lease
// runs out; a key abandoned before its Reserve runs makes that Reserve fail.
TEST_F(ClusterTest, AnAbandonedReservationIsFreedByItsKey) {
  ASSERT_NO_FATAL_FAILURE(StartCluster({}));
  v1::WorkerStats before;
  ASSERT_TRUE(cluster_->Stats(Cluster::kDecode, 0, &before));
  auto reserve = [&](uint64_t key, v1::ReserveResponse* resp) {
    v1::ReserveRequest rq;
    rq.set_num_tokens(100);
    rq.set_lease_ms(600000);  // far longer than the test: only the key can free it
    rq.set_reservation_key(key);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    return cluster_->decode_stub(0)->Reserve(&ctx, rq, resp);
  };
  auto release = [&](uint64_t lease_id, uint64_t key, v1::ReleaseResponse* resp) {
    v1::ReleaseRequest rq;
    rq.set_lease_id(lease_id);
    rq.set_reservation_key(key);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    return cluster_->decode_stub(0)->Release(&ctx, rq, resp);
  };
  v1::ReserveResponse made;
  ASSERT_TRUE(reserve(0x5eed01, &made).ok());
  // Lease ids are random, not the engine's 1, 2, 3 …: one cannot be guessed from another.
  {
    v1::ReserveResponse other;
    ASSERT_TRUE(reserve(0, &other).ok());
    EXPECT_GT(made.lease_id(), uint64_t{1} << 32);
    EXPECT_GT(other.lease_id(), uint64_t{1} << 32);
    const uint64_t gap = made.lease_id() > other.lease_id() ? made.lease_id() - other.lease_id()
                                                            : other.lease_id() - made.lease_id();
    EXPECT_GT(gap, uint64_t{1} << 20);
    v1::ReleaseResponse gone;
    grpc::ClientContext ctx;
    v1::ReleaseRequest rq;
    rq.set_lease_id(other.lease_id());
    ASSERT_TRUE(cluster_->decode_stub(0)->Release(&ctx, rq, &gone).ok());
    EXPECT_TRUE(gone.released());
  }
  v1::WorkerStats during;
  ASSERT_TRUE(cluster_->Stats(Cluster::kDecode, 0, &during));
  EXPECT_EQ(during.reserved(), 1);
  EXPECT_EQ(during.free_blocks(), before.free_blocks() - 7);

  v1::ReleaseResponse released;
  ASSERT_TRUE(release(0, 0x5eed02, &released).ok());  // another key: nothing of it yet
  EXPECT_FALSE(released.released());
  ASSERT_TRUE(release(0, 0x5eed01, &released).ok());
  EXPECT_TRUE(released.released());
  v1::WorkerStats after;
  ASSERT_TRUE(cluster_->Stats(Cluster::kDecode, 0, &after));
  EXPECT_EQ(after.reserved(), 0);
  EXPECT_EQ(after.free_blocks(), before.free_blocks());
  EXPECT_EQ(after.expired_leases_total(), 0);
  ASSERT_TRUE(release(made.lease_id(), 0, &released).ok());  // gone already
  EXPECT_FALSE(released.released());

  // The key abandoned before its Reserve ran: that Reserve fails and holds nothing.
  v1::ReserveResponse late;
  const grpc::Status st = reserve(0x5eed02, &late);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::CANCELLED) << st.error_message();
  EXPECT_THAT(st.error_message(), HasSubstr("abandoned"));
  ASSERT_TRUE(cluster_->Stats(Cluster::kDecode, 0, &after));
  EXPECT_EQ(after.reserved(), 0);
  EXPECT_EQ(after.free_blocks(), before.free_blocks());

  // A Release naming nothing is refused, naming the field.
  const grpc::Status none = release(0, 0, &released);
  EXPECT_EQ(none.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(none.error_message(), HasSubstr("lease_id"));
}

// Workers started with different KV dtypes, block sizes or CPU arithmetic never pair:
// the router is not ready (gRPC health NOT_SERVING) and says why, naming the field, in
// GetServerInfo; a request fails UNAVAILABLE naming it, and no KV byte moves (issue #41:
// before, the router said ready and every request failed FAILED_PRECONDITION).
TEST_F(ClusterTest, WorkersWithDifferentKvLayoutsAreNotReadyAndSayWhy) {
  for (const auto& [flags, field] :
       {std::pair<std::vector<std::string>, std::string>{{"--kv-dtype", "bf16"}, "dtype"},
        {{"--block-size", "32"}, "block_size"},
        {{"--cpu-math",
          std::string(kernels::CpuMathName(kernels::DefaultCpuMath() == kernels::CpuMath::kFast
                                               ? kernels::CpuMath::kExact
                                               : kernels::CpuMath::kFast))},
         "cpu_math"}}) {
    SCOPED_TRACE(field);
    ClusterConfig config;
    config.prefill_flags = flags;
    config.wait_until_ready = false;
    ASSERT_NO_FATAL_FAILURE(StartCluster(config));
    auto channel = rpc::MakeChannel(cluster_->endpoint());
    grpc::health::v1::HealthCheckRequest hreq;
    hreq.set_service("tandem.v1.Generation");
    grpc::health::v1::HealthCheckResponse hresp;
    grpc::ClientContext hctx;
    ASSERT_TRUE(grpc::health::v1::Health::NewStub(channel)->Check(&hctx, hreq, &hresp).ok());
    EXPECT_EQ(hresp.status(), grpc::health::v1::HealthCheckResponse::NOT_SERVING);
    v1::GetServerInfoResponse info;
    grpc::ClientContext ictx;
    ASSERT_TRUE(cluster_->generation()->GetServerInfo(&ictx, {}, &info).ok());
    EXPECT_THAT(info.not_ready_reason(),
                AllOf(HasSubstr("no prefill worker pairs with a decode worker"), HasSubstr(field),
                      Not(HasSubstr("127.0.0.1"))));
    ASSERT_EQ(info.prefill_workers_size(), 1);
    ASSERT_EQ(info.decode_workers_size(), 1);
    EXPECT_TRUE(info.prefill_workers(0).healthy());
    EXPECT_THAT(info.prefill_workers(0).unpaired(),
                AllOf(HasSubstr(cluster_->address(Cluster::kDecode, 0)), HasSubstr(field)));
    EXPECT_THAT(info.decode_workers(0).unpaired(),
                AllOf(HasSubstr(cluster_->address(Cluster::kPrefill, 0)), HasSubstr(field)));
    v1::GenerateRequest req;
    req.set_text("Hello there");
    req.mutable_sampling_params()->set_max_tokens(4);
    const grpc::Status st = ::tandem::testing::Generate(cluster_->generation(), req).status;
    EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAVAILABLE) << st.error_message();
    EXPECT_THAT(st.error_message(), AllOf(HasSubstr(field), Not(HasSubstr("127.0.0.1"))));
    v1::WorkerStats decode;
    ASSERT_TRUE(cluster_->Stats(Cluster::kDecode, 0, &decode));
    EXPECT_EQ(decode.kv_transfer_bytes_total(), 0);
    EXPECT_EQ(cluster_->WaitForBaseline(std::chrono::seconds(5)), "");
    cluster_.reset();
  }
}

TEST_F(ClusterTest, BadRequestsNameTheFieldAndTheClusterKeepsServing) {
  ASSERT_NO_FATAL_FAILURE(StartCluster({}));
  auto base = [] {
    v1::GenerateRequest r;
    r.set_text("Hello");
    r.mutable_sampling_params()->set_max_tokens(4);
    return r;
  };
  struct Bad {
    std::string field;
    std::function<void(v1::GenerateRequest*)> edit;
  };
  const std::vector<Bad> cases = {
      {"input", [](auto* r) { r->clear_text(); }},
      {"text", [](auto* r) { r->set_text(""); }},
      {"text", [](auto* r) { r->set_text(std::string((1 << 20) + 1, 'a')); }},
      {"token_ids", [](auto* r) { r->mutable_token_ids(); }},
      {"token_ids", [](auto* r) { r->mutable_token_ids()->add_ids(49152); }},
      {"token_ids", [](auto* r) { r->mutable_token_ids()->add_ids(-1); }},
      {"chat.messages", [](auto* r) { r->mutable_chat(); }},
      {"chat.messages[0].role",
       [](auto* r) {
         auto* m = r->mutable_chat()->add_messages();
         m->set_role("wizard");
         m->set_content("hi");
       }},
      {"max_tokens", [](auto* r) { r->mutable_sampling_params()->set_max_tokens(0); }},
      {"max_tokens", [](auto* r) { r->mutable_sampling_params()->set_max_tokens(-5); }},
      {"max_tokens", [](auto* r) { r->mutable_sampling_params()->set_max_tokens(1 << 30); }},
      {"max_tokens",
       [](auto* r) {
         for (int i = 0; i < 8000; ++i) r->mutable_token_ids()->add_ids(5);
         r->mutable_sampling_params()->set_max_tokens(500);
       }},
      {"temperature", [](auto* r) { r->mutable_sampling_params()->set_temperature(-0.1f); }},
      {"temperature", [](auto* r) { r->mutable_sampling_params()->set_temperature(NAN); }},
      {"temperature", [](auto* r) { r->mutable_sampling_params()->set_temperature(INFINITY); }},
      {"top_p", [](auto* r) { r->mutable_sampling_params()->set_top_p(0); }},
      {"top_p", [](auto* r) { r->mutable_sampling_params()->set_top_p(1.5f); }},
      {"top_k", [](auto* r) { r->mutable_sampling_params()->set_top_k(-2); }},
      {"min_p", [](auto* r) { r->mutable_sampling_params()->set_min_p(1.5f); }},
      {"min_p", [](auto* r) { r->mutable_sampling_params()->set_min_p(-0.5f); }},
      {"repetition_penalty",
       [](auto* r) { r->mutable_sampling_params()->set_repetition_penalty(0); }},
      {"presence_penalty", [](auto* r) { r->mutable_sampling_params()->set_presence_penalty(3); }},
      {"frequency_penalty",
       [](auto* r) { r->mutable_sampling_params()->set_frequency_penalty(-3); }},
      {"logprobs", [](auto* r) { r->mutable_sampling_params()->set_logprobs(21); }},
      {"stop", [](auto* r) { r->mutable_sampling_params()->add_stop(""); }},
      {"stop",
       [](auto* r) {
         for (int i = 0; i < 17; ++i) r->mutable_sampling_params()->add_stop(StrCat("s", i));
       }},
      {"stop", [](auto* r) { r->mutable_sampling_params()->add_stop(std::string(300, 'x')); }},
      {"stop_token_ids", [](auto* r) { r->mutable_sampling_params()->add_stop_token_ids(49152); }},
      // Invalid UTF-8 in each text field.
      {"text", [](auto* r) { r->set_text("caf\xc3 ok"); }},
      {"chat.messages[0].content",
       [](auto* r) {
         auto* m = r->mutable_chat()->add_messages();
         m->set_role("user");
         m->set_content("\xff\xfe");
       }},
      {"stop", [](auto* r) { r->mutable_sampling_params()->add_stop("\xed\xa0\x80"); }},
  };
  for (const Bad& b : cases) {
    v1::GenerateRequest r = base();
    b.edit(&r);
    const GenerateResult res = ::tandem::testing::Generate(cluster_->generation(), r);
    EXPECT_EQ(res.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
        << b.field << ": " << res.status.error_message();
    EXPECT_THAT(res.status.error_message(), ::testing::StartsWith(b.field + ": "));
  }
  // A deadline that cannot be met.
  {
    v1::GenerateRequest r = base();
    r.mutable_sampling_params()->set_max_tokens(200);
    r.mutable_sampling_params()->set_ignore_eos(true);
    const GenerateResult res =
        ::tandem::testing::Generate(cluster_->generation(), r, std::chrono::milliseconds(100));
    EXPECT_EQ(res.status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  }
  const GenerateResult ok = ::tandem::testing::Generate(cluster_->generation(), base());
  EXPECT_TRUE(ok.status.ok()) << ok.status.error_message();
  EXPECT_EQ(ok.token_ids.size(), 4u);
}

TEST_F(ClusterTest, OverloadIsRefusedFastAndQueuedRequestsStillFinish) {
  // A decode worker with room for one long request, and a queue of one.
  const int64_t kv_per_token = 2 * 30 * 3 * 64 * 4;
  ClusterConfig config;
  config.decode_kv_bytes = kv_per_token * 16 * 40;  // 40 blocks
  config.router_flags = {"--max-queued-requests", "1"};
  ASSERT_NO_FATAL_FAILURE(StartCluster(config));
  const std::vector<int32_t> pool = TokenPool();
  Case c{Window(pool, 500, 1), Params(true, 100, 1)};  // 38 blocks with its output
  c.params.ignore_eos = true;
  std::vector<GenerateResult> results(2);
  std::atomic<int> first_streaming{0};
  std::atomic<bool> first_done{false};
  std::thread a([&] {
    results[0] =
        ::tandem::testing::Generate(cluster_->generation(), ToRequest(c), std::chrono::seconds(120),
                                    [&](int, grpc::ClientContext*) { first_streaming = 1; });
    first_done = true;
  });
  const auto t0 = Clock::now();
  while (!first_streaming && MsSince(t0) < 30000)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  std::thread b(
      [&] { results[1] = ::tandem::testing::Generate(cluster_->generation(), ToRequest(c)); });
  // Wait until the second one sits in the queue.
  for (auto t1 = Clock::now(); MsSince(t1) < 5000;) {
    v1::GetServerInfoRequest q;
    v1::GetServerInfoResponse info;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
    ASSERT_TRUE(cluster_->generation()->GetServerInfo(&ctx, q, &info).ok());
    if (info.queued_requests() == 1) break;
  }
  const auto sent = Clock::now();
  const GenerateResult refused = ::tandem::testing::Generate(cluster_->generation(), ToRequest(c));
  const double ms = std::chrono::duration<double, std::milli>(refused.end - sent).count();
  // Refused at once: while the request that fills the worker still streams (its 100
  // tokens take seconds), not after waiting for room — observed, not timed.
  const bool refused_while_full = !first_done;
  EXPECT_EQ(refused.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
      << refused.status.error_message();
  EXPECT_TRUE(refused_while_full) << "the refusal came after the running request ended (" << ms
                                  << " ms)";
  a.join();
  b.join();
  for (const auto& r : results) {
    EXPECT_TRUE(r.status.ok()) << r.status.error_message();
    EXPECT_EQ(r.token_ids.size(), 100u);
  }
}

// The prefill worker's prefix cache: requests sharing a long prefix reuse its K/V
// (usage.cached_tokens), whether they come one by one or together, and still give the
// single-process engine's tokens; another cache salt shares nothing.
TEST_F(ClusterTest, SharedPrefixesAreReusedWithIdenticalAnswers) {
  ASSERT_NO_FATAL_FAILURE(StartCluster({}));
  const std::vector<int32_t> pool = TokenPool();
  const std::vector<int32_t> system = Window(pool, 200, 5);
  std::vector<Case> cases;
  for (int i = 0; i < 6; ++i) {
    std::vector<int32_t> prompt = system;
    const std::vector<int32_t> question = Window(pool, 10 + i, 40 + i);
    prompt.insert(prompt.end(), question.begin(), question.end());
    cases.push_back({prompt, Params(i % 2 == 0, 8, 300 + i)});
  }
  const auto expected = Reference(cases);
  // One by one: from the second request on, the 192 tokens of full system blocks are cached.
  for (size_t i = 0; i < cases.size(); ++i) {
    const GenerateResult r =
        ::tandem::testing::Generate(cluster_->generation(), ToRequest(cases[i]));
    ASSERT_TRUE(r.status.ok()) << r.status.error_message();
    EXPECT_EQ(r.token_ids, expected[i].first) << "request " << i;
    EXPECT_EQ(r.complete.usage().cached_tokens(), i == 0 ? 0 : 192) << "request " << i;
  }
  // Together, again: the same tokens.
  const auto together = RunConcurrently(cases);
  for (size_t i = 0; i < cases.size(); ++i) {
    ASSERT_TRUE(together[i].status.ok());
    EXPECT_EQ(together[i].token_ids, expected[i].first) << "concurrent request " << i;
    EXPECT_GE(together[i].complete.usage().cached_tokens(), 192);
  }
  // A salt is its own namespace.
  v1::GenerateRequest salted = ToRequest(cases[0]);
  salted.set_cache_salt("tenant-b");
  const GenerateResult r = ::tandem::testing::Generate(cluster_->generation(), salted);
  ASSERT_TRUE(r.status.ok());
  EXPECT_EQ(r.token_ids, expected[0].first);
  EXPECT_EQ(r.complete.usage().cached_tokens(), 0);
  v1::WorkerStats s;
  ASSERT_TRUE(cluster_->Stats(Cluster::kPrefill, 0, &s));
  EXPECT_GT(s.prefix_hit_tokens_total(), 5 * 192);
  EXPECT_GT(s.cached_blocks(), 0);
  // The decode worker kept the prefix too: later reservations shared its blocks and
  // the prefill worker sent only the rest.
  v1::WorkerStats d;
  ASSERT_TRUE(cluster_->Stats(Cluster::kDecode, 0, &d));
  EXPECT_GT(d.prefix_hit_tokens_total(), 5 * 192);
  const int64_t full_prompt_bytes = int64_t{14} * 2 * 30 * 3 * 64 * 4 * 16;  // 14 blocks
  EXPECT_LT(d.kv_transfer_bytes_total(), 13 * full_prompt_bytes / 2)
      << "13 prompts were pushed in full";
}

// Selective disaggregation (--disagg-min-tokens 200): prompts under 200 tokens are
// prefilled by their decode worker — chunked in with the others' decode steps, no KV
// transfer — and the rest by the prefill worker; every answer, greedy or seeded, is
// the single process's, and each worker computed exactly the prompts placed on it.
TEST_F(ClusterTest, SelectiveDisaggregationAnswersLikeOneProcessWhereverPrefilled) {
  ClusterConfig config = Topology(1, 1);
  config.router_flags = {"--disagg-min-tokens", "200"};
  const std::vector<int32_t> pool = TokenPool();
  const size_t lengths[] = {1, 5, 17, 33, 60, 90, 120, 199, 200, 260, 400, 700};
  std::vector<Case> cases;
  int64_t local_tokens = 0, remote_tokens = 0;
  for (size_t i = 0; i < std::size(lengths); ++i) {
    cases.push_back(
        {Window(pool, lengths[i], 70 + i), Params(i % 2 == 0, 1 + (i * 5) % 12, 500 + i)});
    (lengths[i] < 200 ? local_tokens : remote_tokens) += static_cast<int64_t>(lengths[i]);
  }
  const auto expected = Reference(cases);
  ASSERT_NO_FATAL_FAILURE(StartCluster(config));
  const auto results = RunConcurrently(cases);
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE(StrCat("request ", i, ": ", lengths[i], " prompt tokens"));
    const GenerateResult& r = results[i];
    ASSERT_TRUE(r.status.ok()) << r.status.error_message();
    EXPECT_EQ(r.token_ids, expected[i].first);
    EXPECT_EQ(r.complete.finish_reason(), expected[i].second == engine::FinishReason::kStop
                                              ? v1::FINISH_REASON_STOP
                                              : v1::FINISH_REASON_LENGTH);
    if (lengths[i] < 200) EXPECT_EQ(r.complete.timings().kv_transfer_ms(), 0);
  }
  v1::WorkerStats p, d;
  ASSERT_TRUE(cluster_->Stats(Cluster::kPrefill, 0, &p));
  ASSERT_TRUE(cluster_->Stats(Cluster::kDecode, 0, &d));
  EXPECT_EQ(p.prompt_tokens_computed_total(), remote_tokens);
  EXPECT_EQ(d.prompt_tokens_computed_total(), local_tokens);
  EXPECT_EQ(d.preemptions_total(), 0) << "recomputation would blur the counts";
}

// Cache-aware routing with 2 prefill workers: requests that share a prefix follow it to
// the worker that caches it (all but the first hit), where round-robin routing would
// split them and compute the prefix on both.
TEST_F(ClusterTest, CacheAwareRoutingFollowsThePrefix) {
  for (const std::string policy : {"cache_aware", "round_robin"}) {
    SCOPED_TRACE(policy);
    ClusterConfig config = Topology(2, 1);
    config.router_flags = {"--routing-policy", policy};
    ASSERT_NO_FATAL_FAILURE(StartCluster(config));
    const std::vector<int32_t> pool = TokenPool();
    const std::vector<int32_t> system = Window(pool, 160, 9);  // 10 full blocks
    for (int i = 0; i < 6; ++i) {
      std::vector<int32_t> prompt = system;
      const std::vector<int32_t> q = Window(pool, 12, 60 + i);
      prompt.insert(prompt.end(), q.begin(), q.end());
      const GenerateResult r = ::tandem::testing::Generate(cluster_->generation(),
                                                           ToRequest({prompt, Params(true, 2, i)}));
      ASSERT_TRUE(r.status.ok()) << r.status.error_message();
    }
    int64_t hits = 0;
    int used = 0;
    for (int w = 0; w < 2; ++w) {
      v1::WorkerStats s;
      ASSERT_TRUE(cluster_->Stats(Cluster::kPrefill, w, &s));
      hits += s.prefix_hit_tokens_total();
      used += s.prefix_query_tokens_total() > 0;
    }
    if (policy == "cache_aware") {
      EXPECT_EQ(used, 1);
      EXPECT_EQ(hits, 5 * 160);
    } else {
      EXPECT_EQ(used, 2);
      EXPECT_EQ(hits, 4 * 160);
    }
    EXPECT_EQ(cluster_->WaitForBaseline(), "");
    cluster_.reset();
  }
}

}  // namespace
}  // namespace tandem
