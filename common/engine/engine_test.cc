// Engine behaviour on the real default model: batch invariance (alone, batched,
// preempted, joining and leaving mid-way give the same tokens), cancellation,
// bad requests, and KV accounting back to baseline after every test.
#include "common/engine/engine.h"

#include <fstream>
#include <map>
#include <random>
#include <regex>
#include <set>
#include <string>

#include "common/engine/engine_test_util.h"
#include "common/engine/loaded_model.h"
#include "common/engine/model_file.h"
#include "common/engine/synthetic_model.h"
#include "common/grammar/grammar_test_util.h"
#include "common/grammar/json_schema_grammar.h"
#include "common/grammar/regex_grammar.h"
#include "common/model/gguf_file.h"
#include "common/tokenizer/tokenizer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/backend_factory.h"
#include "kernels/testing/faultable_backend.h"
#include "nlohmann/json.hpp"
#include "tests/test_paths.h"

namespace tandem::engine {
namespace {

class EngineTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto f = model::GgufFile::Open(::tandem::testing::DefaultModelPath());
    ASSERT_TRUE(f.ok()) << f.status() << " (run scripts/fetch-model.sh)";
    file_ = f->release();
    auto c = model::ModelConfig::FromGguf(*file_);
    ASSERT_TRUE(c.ok());
    auto w = ModelWeights::Load(*file_, *c);
    ASSERT_TRUE(w.ok()) << w.status();
    weights_ = w->release();
    auto t = tokenizer::Tokenizer::FromGguf(*file_);
    ASSERT_TRUE(t.ok());
    tok_ = t->release();
  }
  static void TearDownTestSuite() {
    delete tok_;
    delete weights_;
    delete file_;
  }

  static std::unique_ptr<Engine> MakeEngine(int64_t kv_bytes = int64_t{64} << 20,
                                            int32_t block_size = 16, bool prefix_caching = false,
                                            int32_t max_prefill_chunk = 512) {
    EngineOptions o;
    o.token_masker = Masker();
    o.scheduler.max_prefill_chunk = max_prefill_chunk;
    o.kv_cache_bytes = kv_bytes;
    o.block_size = block_size;
    o.prefix_caching = prefix_caching;
    o.num_threads = 2;
    o.device = ::tandem::testing::TestDevice();
    auto e = Engine::Create(*weights_, o);
    EXPECT_TRUE(e.ok()) << e.status();
    return std::move(*e);
  }

  static std::shared_ptr<const grammar::TokenMasker> Masker() {
    static const auto masker = MakeTokenMasker(*tok_);
    return masker;
  }

  // Prompts of varied lengths cut from one text.
  static std::vector<std::vector<int32_t>> Prompts(int n) {
    const std::string text =
        "The history of computing is a story of people finding ways to make machines do "
        "arithmetic faster. In 1945, ENIAC filled a room; today a phone holds billions of "
        "transistors. def fib(n):\n    return n if n < 2 else fib(n-1) + fib(n-2)\n"
        "Les ordinateurs modernes exécutent des milliards d'opérations par seconde. "
        "Once upon a time, in a quiet village by the sea, there lived an old fisherman who";
    std::vector<int32_t> all = *tok_->Encode(text);
    std::vector<std::vector<int32_t>> out;
    for (int i = 0; i < n; ++i) {
      const size_t len = 1 + (i * 37) % all.size();
      const size_t start = (i * 11) % (all.size() - len + 1);
      out.emplace_back(all.begin() + start, all.begin() + start + len);
    }
    return out;
  }

  // Drives the engine until idle; returns each request's tokens.
  static std::map<kv::SeqId, std::vector<int32_t>> Drain(
      Engine& e, std::map<kv::SeqId, std::vector<int32_t>> out = {}) {
    while (e.HasWork()) {
      for (const auto& ev : e.Step()) {
        EXPECT_TRUE(ev.error.ok()) << ev.error;
        if (ev.token >= 0) out[ev.id].push_back(ev.token);
      }
    }
    return out;
  }

  static std::vector<int32_t> Alone(const std::vector<int32_t>& prompt, const SamplingParams& p) {
    auto e = MakeEngine();
    auto id = e->AddRequest(prompt, p);
    EXPECT_TRUE(id.ok()) << id.status();
    auto out = Drain(*e);
    ExpectNoLeak(*e);
    return out[*id];
  }

  static void ExpectNoLeak(const Engine& e) {
    auto s = e.Stats();
    EXPECT_EQ(s.blocks.free_blocks, s.blocks.num_blocks) << "KV blocks leaked";
    EXPECT_EQ(s.blocks.num_sequences, 0);
    EXPECT_EQ(s.draft_blocks.free_blocks, s.draft_blocks.num_blocks) << "draft blocks leaked";
    EXPECT_EQ(s.draft_blocks.num_sequences, 0);
  }

  static SamplingParams Params(double temperature, int max_tokens, uint64_t seed) {
    SamplingParams p;
    p.temperature = temperature;
    p.max_tokens = max_tokens;
    p.seed = seed;
    p.ignore_eos = true;
    return p;
  }

  static model::GgufFile* file_;
  static ModelWeights* weights_;
  static tokenizer::Tokenizer* tok_;
};
model::GgufFile* EngineTest::file_ = nullptr;
ModelWeights* EngineTest::weights_ = nullptr;
tokenizer::Tokenizer* EngineTest::tok_ = nullptr;

// The same requests alone, in one batch of 16, under preemption, and with requests
// joining and leaving mid-way; greedy and seeded temperature 0.8.
TEST_F(EngineTest, TokensDoNotDependOnBatchingOrPreemption) {
  const auto prompts = Prompts(16);
  for (double temperature : {0.0, 0.8}) {
    SCOPED_TRACE(temperature);
    std::vector<SamplingParams> params;
    std::vector<std::vector<int32_t>> alone;
    for (size_t i = 0; i < prompts.size(); ++i) {
      params.push_back(Params(temperature, 10 + static_cast<int>(i % 5), 1000 + i));
      alone.push_back(Alone(prompts[i], params[i]));
      ASSERT_EQ(alone.back().size(), static_cast<size_t>(params[i].max_tokens));
    }

    {  // All 16 in one batch.
      auto e = MakeEngine();
      std::vector<kv::SeqId> ids;
      for (size_t i = 0; i < prompts.size(); ++i)
        ids.push_back(*e->AddRequest(prompts[i], params[i]));
      auto out = Drain(*e);
      for (size_t i = 0; i < ids.size(); ++i)
        EXPECT_EQ(out[ids[i]], alone[i]) << "batched request " << i;
      ExpectNoLeak(*e);
    }
    {  // A KV pool too small for all of them at once: preemption by recompute.
      auto e = MakeEngine(int64_t{12} * 16 * 2 * 30 * 3 * 64 * 4, 16);  // 12 blocks of 16 tokens
      std::vector<kv::SeqId> ids;
      for (size_t i = 0; i < prompts.size(); ++i)
        ids.push_back(*e->AddRequest(prompts[i], params[i]));
      auto out = Drain(*e);
      EXPECT_GT(e->Stats().preemptions, 0) << "the test meant to force preemption";
      for (size_t i = 0; i < ids.size(); ++i)
        EXPECT_EQ(out[ids[i]], alone[i]) << "preempted request " << i;
      ExpectNoLeak(*e);
    }
    {  // Joining and leaving mid-way, block size 1.
      auto e = MakeEngine(int64_t{64} << 20, 1);
      std::map<kv::SeqId, size_t> which;
      std::map<kv::SeqId, std::vector<int32_t>> out;
      size_t next = 0;
      int step = 0;
      while (next < prompts.size() || e->HasWork()) {
        if (next < prompts.size() && step % 3 == 0) {  // one joins every third step
          which[*e->AddRequest(prompts[next], params[next])] = next;
          ++next;
        }
        for (const auto& ev : StepOk(*e))
          if (ev.token >= 0) out[ev.id].push_back(ev.token);
        ++step;
      }
      for (const auto& [id, i] : which) EXPECT_EQ(out[id], alone[i]) << "joining request " << i;
      ExpectNoLeak(*e);
    }
  }
}

TEST_F(EngineTest, CancelFreesBlocksAndOthersContinue) {
  const auto prompts = Prompts(3);
  const SamplingParams p = Params(0.0, 12, 1);
  const std::vector<int32_t> expect = Alone(prompts[2], p);
  auto e = MakeEngine();
  const int32_t total = e->Stats().blocks.num_blocks;
  auto a = *e->AddRequest(prompts[0], p);
  auto b = *e->AddRequest(prompts[1], p);
  auto c = *e->AddRequest(prompts[2], p);
  std::map<kv::SeqId, std::vector<int32_t>> out;
  for (int i = 0; i < 3; ++i) {
    for (const auto& ev : StepOk(*e)) out[ev.id].push_back(ev.token);
  }
  const int32_t used_before = total - e->Stats().blocks.free_blocks;
  e->Cancel(a);
  EXPECT_LT(total - e->Stats().blocks.free_blocks, used_before)
      << "cancel must free blocks at once";
  bool saw_cancel = false;
  for (const auto& ev : StepOk(*e)) {
    if (ev.id == a) {
      EXPECT_TRUE(ev.finished);
      EXPECT_EQ(ev.reason, FinishReason::kCancelled);
      saw_cancel = true;
    } else {
      out[ev.id].push_back(ev.token);
    }
  }
  EXPECT_TRUE(saw_cancel);
  e->Cancel(b);
  e->Cancel(b);       // twice: harmless
  e->Cancel(123456);  // unknown: harmless
  out = Drain(*e, out);
  EXPECT_EQ(out[c], expect);
  ExpectNoLeak(*e);
}

TEST_F(EngineTest, StopsAtMaxTokensEosAndStopIds) {
  auto e = MakeEngine();
  SamplingParams p = Params(0.0, 5, 1);
  auto prompt = Prompts(1)[0];
  const auto greedy = Alone(prompt, Params(0.0, 8, 1));
  p.ignore_eos = false;
  p.stop_token_ids = {greedy[2]};
  auto id = *e->AddRequest(prompt, p);
  std::vector<TokenEvent> events;
  while (e->HasWork())
    for (auto& ev : StepOk(*e)) events.push_back(ev);
  // Generation stops at the first occurrence of the stop id.
  const size_t first = std::find(greedy.begin(), greedy.end(), greedy[2]) - greedy.begin();
  ASSERT_EQ(events.size(), first + 1);
  EXPECT_EQ(events.back().id, id);
  EXPECT_TRUE(events.back().finished);
  EXPECT_EQ(events.back().reason, FinishReason::kStop);
  EXPECT_EQ(events.back().token, greedy[2]);
  ExpectNoLeak(*e);
}

TEST_F(EngineTest, RejectsBadRequestsNamingTheField) {
  auto e = MakeEngine();
  auto msg = [&](std::vector<int32_t> prompt, SamplingParams p) {
    auto r = e->AddRequest(std::move(prompt), p);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    return std::string(r.status().message());
  };
  SamplingParams p = Params(0.0, 4, 1);
  EXPECT_THAT(msg({}, p), ::testing::StartsWith("prompt"));
  EXPECT_THAT(msg({1, 49152}, p), ::testing::StartsWith("prompt"));
  EXPECT_THAT(msg({1, -1}, p), ::testing::StartsWith("prompt"));
  SamplingParams big = p;
  big.max_tokens = 8192;
  EXPECT_THAT(msg({1, 2, 3}, big), ::testing::StartsWith("max_tokens"));
  SamplingParams hot = p;
  hot.temperature = -1;
  EXPECT_THAT(msg({1}, hot), ::testing::StartsWith("temperature"));
  EXPECT_FALSE(e->HasWork());
  ExpectNoLeak(*e);
}

// The disaggregated path inside one test: a prefill-only engine computes the prompts
// in one batch, their blocks are copied into another engine's reservations (different
// block ids), and decoding there gives exactly the tokens of one engine alone.
TEST_F(EngineTest, PrefillHereDecodeThereGivesTheSameTokens) {
  const auto prompts = Prompts(6);
  for (double temperature : {0.0, 0.8}) {
    SCOPED_TRACE(temperature);
    auto prefill = MakeEngine();
    auto decode = MakeEngine();
    ASSERT_TRUE(decode->Reserve(40).ok());  // shifts the block ids the reservations get
    std::vector<SamplingParams> params;
    std::vector<kv::SeqId> pids;
    for (size_t i = 0; i < prompts.size(); ++i) {
      params.push_back(Params(temperature, 3 + static_cast<int>(i % 4), 7 + i));
      pids.push_back(*prefill->AddRequest(prompts[i], params[i], RequestMode::kPrefillOnly));
    }
    std::map<kv::SeqId, int32_t> first;
    while (prefill->HasWork()) {
      for (const auto& ev : StepOk(*prefill)) {
        EXPECT_TRUE(ev.finished);
        EXPECT_EQ(ev.reason, FinishReason::kNone);
        first[ev.id] = ev.token;
      }
    }
    EXPECT_EQ(prefill->Stats().held, static_cast<int32_t>(prompts.size()));
    std::map<kv::SeqId, size_t> which;
    for (size_t i = 0; i < prompts.size(); ++i) {
      auto did = decode->Reserve(static_cast<int64_t>(prompts[i].size()) + 1);
      ASSERT_TRUE(did.ok()) << did.status();
      ASSERT_NO_FATAL_FAILURE(MoveKv(*prefill, pids[i], *decode, *did));
      EXPECT_TRUE(prefill->Release(pids[i]));
      ASSERT_TRUE(decode->AdmitPrefilled(*did, prompts[i], first[pids[i]], params[i]).ok());
      which[*did] = i;
    }
    ExpectNoLeak(*prefill);
    auto out = Drain(*decode);
    for (const auto& [id, i] : which) {
      std::vector<int32_t> got = {first[pids[i]]};
      got.insert(got.end(), out[id].begin(), out[id].end());
      EXPECT_EQ(got, Alone(prompts[i], params[i])) << "request " << i;
    }
    EXPECT_EQ(decode->Stats().reserved, 1);
  }
}

// A decode worker's local prefill (selective disaggregation): a reservation whose
// prompt is computed by the engine that holds it gives the tokens of a plain request —
// greedy and seeded, batched with plainly added requests, in chunks of 16, and past
// leading blocks the reservation shares from the prefix cache (which it then does not
// recompute).
TEST_F(EngineTest, PrefillingAReservationHereGivesTheSameTokens) {
  const auto prompts = Prompts(6);
  const std::vector<int32_t> system = *tok_->Encode(
      "You are a careful assistant. Answer briefly and precisely, and say when you do not "
      "know. Today we talk about the history of the lighthouse on the northern cape.");
  ASSERT_GT(system.size(), 32u);
  for (double temperature : {0.0, 0.8}) {
    SCOPED_TRACE(temperature);
    auto e = MakeEngine(int64_t{64} << 20, 16, /*prefix_caching=*/true, /*max_prefill_chunk=*/16);
    std::map<kv::SeqId, size_t> which;
    std::vector<SamplingParams> params;
    for (size_t i = 0; i < prompts.size(); ++i) {
      params.push_back(Params(temperature, 3 + static_cast<int>(i % 4), 70 + i));
      if (i % 2 == 0) {  // every other one plainly, in the same steps
        which[*e->AddRequest(prompts[i], params[i])] = i;
        continue;
      }
      int32_t cached = -1;
      auto id = e->Reserve(static_cast<int64_t>(prompts[i].size()) + 1, prompts[i], 0, &cached);
      ASSERT_TRUE(id.ok()) << id.status();
      EXPECT_EQ(cached, 0);
      ASSERT_TRUE(e->PrefillReserved(*id, prompts[i], params[i]).ok());
      which[*id] = i;
    }
    auto out = Drain(*e);
    for (const auto& [id, i] : which) {
      EXPECT_EQ(out[id], Alone(prompts[i], params[i])) << "request " << i;
    }
    // A prompt whose leading blocks are cached: the reservation shares them and the
    // engine computes only the rest.
    const SamplingParams p = Params(temperature, 5, 99);
    ASSERT_TRUE(e->AddRequest(system, p).ok());
    Drain(*e);
    std::vector<int32_t> prompt = system;
    const std::vector<int32_t> question = *tok_->Encode(" Who built it?");
    prompt.insert(prompt.end(), question.begin(), question.end());
    int32_t cached = 0;
    auto id = e->Reserve(static_cast<int64_t>(prompt.size()) + 1, prompt, 0, &cached);
    ASSERT_TRUE(id.ok()) << id.status();
    EXPECT_EQ(cached, static_cast<int32_t>(system.size() / 16));
    const int64_t computed = e->Stats().prompt_tokens_computed;
    const absl::Status admitted = e->PrefillReserved(*id, prompt, p);
    ASSERT_TRUE(admitted.ok()) << admitted;
    auto shared_out = Drain(*e);
    EXPECT_EQ(shared_out[*id], Alone(prompt, p));
    EXPECT_EQ(e->Stats().prompt_tokens_computed - computed,
              static_cast<int64_t>(prompt.size()) - 16 * cached);
    e->ClearPrefixCache();
    ExpectNoLeak(*e);
  }
}

// What PrefillReserved refuses leaves the reservation as it was.
TEST_F(EngineTest, PrefillingAReservationHereIsChecked) {
  auto e = MakeEngine(int64_t{64} << 20, 16, /*prefix_caching=*/true);
  const std::vector<int32_t> prompt = Prompts(8)[7];
  ASSERT_GT(prompt.size(), 33u);
  Drain(*e, {{*e->AddRequest(prompt, Params(0, 2, 1)), {}}});
  // Reserved for `prompt` (its full blocks shared), then named with a shorter prompt
  // that ends inside them: nothing would be left to compute.
  int32_t cached = 0;
  auto id = e->Reserve(static_cast<int64_t>(prompt.size()) + 1, prompt, 0, &cached);
  ASSERT_TRUE(id.ok());
  ASSERT_GE(cached, 2);
  const std::vector<int32_t> inside(prompt.begin(), prompt.begin() + 16 * cached);
  EXPECT_EQ(e->PrefillReserved(*id, inside, Params(0, 2, 1)).code(),
            absl::StatusCode::kInvalidArgument);
  std::vector<int32_t> too_long(prompt);
  too_long.resize(prompt.size() + 40, 5);
  EXPECT_EQ(e->PrefillReserved(*id, too_long, Params(0, 2, 1)).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(e->PrefillReserved(*id + 100, prompt, Params(0, 2, 1)).code(),
            absl::StatusCode::kNotFound);
  SamplingParams bad = Params(0, 2, 1);
  bad.top_p = 0;
  EXPECT_EQ(e->PrefillReserved(*id, prompt, bad).code(), absl::StatusCode::kInvalidArgument);
  // Still usable, once.
  ASSERT_TRUE(e->PrefillReserved(*id, prompt, Params(0, 3, 1)).ok());
  EXPECT_EQ(e->PrefillReserved(*id, prompt, Params(0, 3, 1)).code(), absl::StatusCode::kNotFound);
  auto out = Drain(*e);
  EXPECT_EQ(out[*id], Alone(prompt, Params(0, 3, 1)));
  e->ClearPrefixCache();
  ExpectNoLeak(*e);
}

// Writes into a reservation are checked against its block table before any byte moves.
TEST_F(EngineTest, ReservedKvWritesStayInsideTheReservation) {
  auto e = MakeEngine();
  EXPECT_EQ(e->Reserve(weights_->config().context_length + 1).status().code(),
            absl::StatusCode::kInvalidArgument);
  auto a = e->Reserve(40);  // 3 blocks
  ASSERT_TRUE(a.ok());
  std::vector<uint8_t> slice(e->kv_layout().LayerBytes());
  EXPECT_TRUE(e->WriteReservedKv(*a, 0, 2, 1, slice).ok());
  EXPECT_EQ(e->WriteReservedKv(*a, 0, 3, 1, slice).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(e->WriteReservedKv(*a, 0, 2, 2, slice).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(e->WriteReservedKv(*a, 30, 0, 1, slice).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(e->WriteReservedKv(*a + 1, 0, 0, 1, slice).code(), absl::StatusCode::kInvalidArgument);
  slice.pop_back();
  EXPECT_EQ(e->WriteReservedKv(*a, 0, 0, 1, slice).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(e->Release(*a));
  ExpectNoLeak(*e);

  // Leading blocks shared from the prefix cache are never written.
  auto c = MakeEngine(int64_t{64} << 20, 16, /*prefix_caching=*/true);
  std::vector<int32_t> prompt;  // three blocks long
  for (const auto& p : Prompts(16)) prompt.insert(prompt.end(), p.begin(), p.end());
  ASSERT_GE(prompt.size(), 48u);
  prompt.resize(48);
  (void)*c->AddRequest(prompt, Params(0, 1, 1));
  Drain(*c);
  int32_t cached = 0;
  auto r = c->Reserve(static_cast<int64_t>(prompt.size()) + 1, prompt, 0, &cached);
  ASSERT_TRUE(r.ok());
  ASSERT_GE(cached, 1);
  const std::vector<uint8_t> layer(c->kv_layout().LayerBytes());
  EXPECT_EQ(c->WriteReservedKv(*r, 0, cached - 1, 1, layer).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(c->WriteReservedKv(*r, 0, cached, 1, layer).ok());
  EXPECT_TRUE(c->Release(*r));
}

// A forward pass that fails on the backend ends the requests it computed (error in
// the event, blocks freed); requests queued behind it, and the next ones, run as if
// nothing had happened.
TEST_F(EngineTest, AFailedPassEndsItsRequestsAndTheEngineGoesOn) {
  kernels::CpuBackend* backend = nullptr;
  EngineOptions o;
  o.num_threads = 2;
  o.scheduler.max_running = 2;
  o.make_backend = kernels::testing::FaultableBackend(&backend, 2);
  auto e = *Engine::Create(*weights_, o);
  const auto prompts = Prompts(3);
  const SamplingParams p = Params(0, 4, 1);
  std::vector<kv::SeqId> ids;
  for (const auto& prompt : prompts) ids.push_back(*e->AddRequest(prompt, p));
  backend->InjectFault(absl::InternalError("injected device fault"));
  const auto events = e->Step();  // the first two requests ran in this step
  ASSERT_EQ(events.size(), 2u);
  for (const auto& ev : events) {
    EXPECT_TRUE(ev.finished);
    EXPECT_EQ(ev.token, -1);
    EXPECT_EQ(ev.error.code(), absl::StatusCode::kInternal);
    EXPECT_THAT(std::string(ev.error.message()), ::testing::HasSubstr("injected"));
  }
  EXPECT_EQ(e->Stats().failed_steps, 1);
  auto out = Drain(*e);
  EXPECT_EQ(out[ids[2]], Alone(prompts[2], p));
  auto again = *e->AddRequest(prompts[0], p);
  out = Drain(*e);
  EXPECT_EQ(out[again], Alone(prompts[0], p));
  ExpectNoLeak(*e);
}

TEST_F(EngineTest, ReservationsAreCheckedThenCommitted) {
  auto e = MakeEngine(int64_t{4} * 16 * 2 * 30 * 3 * 64 * 4, 16);  // 4 blocks of 16 tokens
  auto a = e->Reserve(40);                                         // 3 blocks
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(e->Reserve(20).status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(e->Stats().blocks.free_blocks, 1);
  // A prompt longer than the reservation is refused and the reservation stays usable.
  std::vector<int32_t> long_prompt(49, 5);
  EXPECT_EQ(e->AdmitPrefilled(*a, long_prompt, 1, Params(0, 2, 1)).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(e->AdmitPrefilled(*a + 100, {1}, 1, Params(0, 2, 1)).code(),
            absl::StatusCode::kNotFound);
  // A first token that already ends the request: reported by the next step, blocks freed.
  ASSERT_TRUE(e->AdmitPrefilled(*a, {1, 2, 3}, 9, Params(0, 1, 1)).ok());
  auto events = StepOk(*e);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_TRUE(events[0].finished);
  EXPECT_EQ(events[0].reason, FinishReason::kLength);
  EXPECT_FALSE(e->Release(*a));
  auto b = e->Reserve(20);
  ASSERT_TRUE(b.ok());
  EXPECT_TRUE(e->Release(*b));
  ExpectNoLeak(*e);
}

// Prefix caching changes what is computed, never what comes out: requests sharing a
// prefix in one batch, one after another (hits), under a pool so small that cached
// blocks are evicted and sequences preempted, and with different salts.
TEST_F(EngineTest, PrefixCacheGivesTheSameTokensAsNoCache) {
  const std::vector<int32_t> system = *tok_->Encode(
      "You are a careful assistant. Answer briefly and precisely, and say when you do not "
      "know. Today we talk about the history of the lighthouse on the northern cape.");
  std::vector<std::vector<int32_t>> prompts;
  for (const char* q : {" Who built it?", " When was it lit first?", " Why is it red?",
                        " How tall is it?", " Who keeps it now?", " Is it open?"}) {
    std::vector<int32_t> p = system;
    const std::vector<int32_t> question = *tok_->Encode(q);
    p.insert(p.end(), question.begin(), question.end());
    prompts.push_back(p);
  }
  ASSERT_GT(system.size(), 32u);
  for (double temperature : {0.0, 0.8}) {
    SCOPED_TRACE(temperature);
    std::vector<SamplingParams> params;
    std::vector<std::vector<int32_t>> alone;
    for (size_t i = 0; i < prompts.size(); ++i) {
      params.push_back(Params(temperature, 6, 50 + i));
      alone.push_back(Alone(prompts[i], params[i]));
    }
    for (int32_t block_size : {1, 16}) {
      SCOPED_TRACE(block_size);
      auto e = MakeEngine(int64_t{64} << 20, block_size, /*prefix_caching=*/true);
      // All at once (no reuse within a step), then one by one (reuse), then again.
      std::map<kv::SeqId, size_t> which;
      for (size_t i = 0; i < prompts.size(); ++i) which[*e->AddRequest(prompts[i], params[i])] = i;
      auto out = Drain(*e);
      for (int round = 0; round < 2; ++round) {
        for (size_t i = 0; i < prompts.size(); ++i) {
          const kv::SeqId id = *e->AddRequest(prompts[i], params[i]);
          which[id] = i;
          out = Drain(*e, std::move(out));
          EXPECT_GE(e->Stats().blocks.prefix_hit_tokens, 1);
        }
      }
      for (const auto& [id, i] : which) EXPECT_EQ(out[id], alone[i]) << "request " << i;
      const auto s = e->Stats();
      EXPECT_GT(s.blocks.prefix_hit_tokens,
                0.8 * 12 * static_cast<double>(system.size() / block_size * block_size) - 1);
      EXPECT_EQ(s.blocks.free_blocks + s.blocks.cached_blocks, s.blocks.num_blocks);
      // A salt keeps the cache apart: no hit for the same prompt.
      const int64_t hits = s.blocks.prefix_hit_tokens;
      const kv::SeqId salted = *e->AddRequest(prompts[0], params[0], RequestMode::kFull, 99);
      auto salted_out = Drain(*e);
      EXPECT_EQ(e->Stats().blocks.prefix_hit_tokens, hits);
      EXPECT_EQ(salted_out[salted], alone[0]);
      e->ClearPrefixCache();
      ExpectNoLeak(*e);
    }
    {  // 10 blocks of 16 tokens: evictions and preemptions, still the same tokens.
      auto e = MakeEngine(int64_t{10} * 16 * 2 * 30 * 3 * 64 * 4, 16, /*prefix_caching=*/true);
      std::map<kv::SeqId, size_t> which;
      for (size_t i = 0; i < prompts.size(); ++i) which[*e->AddRequest(prompts[i], params[i])] = i;
      auto out = Drain(*e);                         // all at once: preemption
      for (uint64_t salt = 1; salt <= 6; ++salt) {  // one by one, each salt its own cache
        for (size_t i = 0; i < prompts.size(); ++i) {
          which[*e->AddRequest(prompts[i], params[i], RequestMode::kFull, salt)] = i;
          out = Drain(*e, std::move(out));
        }
      }
      for (const auto& [id, i] : which) EXPECT_EQ(out[id], alone[i]) << "request " << i;
      EXPECT_GT(e->Stats().blocks.evicted_blocks, 0) << "the test meant to evict";
      e->ClearPrefixCache();
      ExpectNoLeak(*e);
    }
  }
}

// Chunked prefill: a prompt computed in chunks of 16, 48 or 512 tokens gives exactly
// the tokens of one pass, with and without prefix caching and block sizes 1 and 16.
TEST_F(EngineTest, ChunkedPrefillGivesTheSameTokens) {
  std::vector<int32_t> long_prompt;
  for (const auto& p : Prompts(12)) long_prompt.insert(long_prompt.end(), p.begin(), p.end());
  ASSERT_GT(long_prompt.size(), 300u);
  for (double temperature : {0.0, 0.8}) {
    const SamplingParams p = Params(temperature, 5, 77);
    std::vector<int32_t> one_pass;
    {
      auto e = MakeEngine(int64_t{64} << 20, 16, false, /*max_prefill_chunk=*/0);
      const kv::SeqId id = *e->AddRequest(long_prompt, p);
      auto events = StepOk(*e);  // the whole prompt in one step
      ASSERT_EQ(events.size(), 1u);
      one_pass = Drain(*e, {{id, {events[0].token}}})[id];
    }
    for (int32_t chunk : {16, 48}) {
      for (int32_t block_size : {1, 16}) {
        SCOPED_TRACE(::testing::Message()
                     << "T " << temperature << " chunk " << chunk << " block " << block_size);
        auto e = MakeEngine(int64_t{64} << 20, block_size, /*prefix_caching=*/true, chunk);
        const kv::SeqId id = *e->AddRequest(long_prompt, p);
        EXPECT_EQ(Drain(*e)[id], one_pass);
        EXPECT_GE(e->Stats().prefill_chunks, static_cast<int64_t>(long_prompt.size()) / chunk - 1);
        e->ClearPrefixCache();
        ExpectNoLeak(*e);
      }
    }
  }
}

// A short prompt that arrives while a long one is being prefilled gets its first token
// in the next step, not after the whole long prompt (counted in steps, not seconds).
TEST_F(EngineTest, ShortPromptIsNotStuckBehindALongOne) {
  std::vector<int32_t> long_prompt;
  for (const auto& p : Prompts(16)) long_prompt.insert(long_prompt.end(), p.begin(), p.end());
  auto e = MakeEngine(int64_t{64} << 20, 16, false, /*max_prefill_chunk=*/64);
  const kv::SeqId long_id = *e->AddRequest(long_prompt, Params(0, 2, 1));
  EXPECT_TRUE(StepOk(*e).empty());  // first chunk of the long prompt: no token yet
  const kv::SeqId short_id = *e->AddRequest(Prompts(3)[1], Params(0, 2, 1));
  int step = 1, short_first = -1, long_first = -1;
  while (e->HasWork()) {
    ++step;
    for (const auto& ev : StepOk(*e)) {
      if (ev.id == short_id && short_first < 0) short_first = step;
      if (ev.id == long_id && long_first < 0) long_first = step;
    }
  }
  const int long_steps = static_cast<int>((long_prompt.size() + 63) / 64);
  EXPECT_EQ(short_first, 2);
  EXPECT_EQ(long_first, long_steps);
  EXPECT_GT(long_steps, 4);
  ExpectNoLeak(*e);
}

// Liveness: prefilled sequences (blocks held, waiting to start) behind a fresh one that
// cannot get blocks — the ones they hold — still run, and then so does the fresh one.
TEST_F(EngineTest, PrefilledSequencesStartEvenBehindAStarvedOne) {
  auto e = MakeEngine(int64_t{10} * 16 * 2 * 30 * 3 * 64 * 4, 16);  // 10 blocks of 16 tokens
  std::vector<kv::SeqId> reserved;
  for (int i = 0; i < 3; ++i) reserved.push_back(*e->Reserve(40));  // 3 blocks each
  const kv::SeqId fresh = *e->AddRequest(std::vector<int32_t>(50, 7), Params(0, 4, 1));
  for (kv::SeqId id : reserved) {
    // The K/V bytes are whatever the blocks hold: this test is about scheduling only.
    ASSERT_TRUE(e->AdmitPrefilled(id, std::vector<int32_t>(39, 5), 6, Params(0, 4, 1)).ok());
  }
  std::map<kv::SeqId, int> tokens;
  for (int step = 0; step < 100 && e->HasWork(); ++step) {
    for (const auto& ev : StepOk(*e)) tokens[ev.id] += ev.token >= 0;
  }
  EXPECT_FALSE(e->HasWork()) << "stuck";
  for (kv::SeqId id : reserved) EXPECT_EQ(tokens[id], 3);  // + the first token given
  EXPECT_EQ(tokens[fresh], 4);
  ExpectNoLeak(*e);
}

// Priority under memory pressure: the sequence with the higher priority value gives way
// (is preempted) even though it is the older one — plain order would preempt the
// younger — and both still get exactly the tokens they get alone.
TEST_F(EngineTest, TheLowerPriorityGivesWayWhenMemoryRunsOut) {
  for (const bool prioritized : {false, true}) {
    SCOPED_TRACE(prioritized);
    auto e = MakeEngine(int64_t{9} * 16 * 2 * 30 * 3 * 64 * 4, 16);  // 9 blocks of 16
    const auto prompts = Prompts(2);
    std::vector<int32_t> a_prompt(40, 0), b_prompt(40, 0);
    for (int i = 0; i < 40; ++i) {
      a_prompt[i] = prompts[1][i % prompts[1].size()];
      b_prompt[i] = prompts[1][(i + 7) % prompts[1].size()];
    }
    SamplingParams a = Params(0, 40, 1), b = Params(0, 40, 2);
    if (prioritized) a.priority = 5;  // the older one matters less
    const kv::SeqId older = *e->AddRequest(a_prompt, a);
    std::map<kv::SeqId, int32_t> preempted;
    std::map<kv::SeqId, std::vector<int32_t>> out;
    for (const auto& ev : StepOk(*e)) out[ev.id].push_back(ev.token);  // the older starts
    const kv::SeqId younger = *e->AddRequest(b_prompt, b);
    while (e->HasWork()) {
      for (const auto& ev : StepOk(*e)) {
        if (ev.token >= 0) out[ev.id].push_back(ev.token);
      }
      for (kv::SeqId id : {older, younger}) {
        if (const Sequence* s = e->Find(id)) preempted[id] = s->preemptions;
      }
    }
    EXPECT_GT(preempted[prioritized ? older : younger], 0);
    EXPECT_EQ(preempted[prioritized ? younger : older], 0);
    EXPECT_EQ(out[older], Alone(a_prompt, a));
    EXPECT_EQ(out[younger], Alone(b_prompt, b));
    ExpectNoLeak(*e);
  }
}

// Grammar-constrained requests (a regex, a JSON schema, a choice): every output
// follows its grammar and ends when the grammar does, batched or alone, greedy or
// seeded; the prefill/decode split gives the same tokens.
class SpeculativeTest : public EngineTest {
 protected:
  using Method = EngineOptions::Speculative::Method;
  // An engine speculating up to `k` tokens by prompt lookup (k = 0: plain decoding),
  // or with `draft` as its draft model.
  static std::unique_ptr<Engine> MakeSpeculative(
      int32_t k, int64_t kv_bytes = int64_t{64} << 20, int32_t block_size = 16,
      bool prefix_caching = false, const ModelWeights* draft = nullptr,
      kernels::CpuMath math = kernels::DefaultCpuMath()) {
    EngineOptions o;
    o.cpu_math = math;
    o.token_masker = Masker();
    o.kv_cache_bytes = kv_bytes;
    o.block_size = block_size;
    o.prefix_caching = prefix_caching;
    o.num_threads = 2;
    o.device = ::tandem::testing::TestDevice();
    o.speculative.method =
        k == 0 ? Method::kOff : (draft != nullptr ? Method::kDraftModel : Method::kNgram);
    o.speculative.draft_weights = draft;
    o.speculative.num_tokens = k;
    o.speculative.disable_by_batch_size = 0;  // these tests batch on purpose
    auto e = Engine::Create(*weights_, o);
    EXPECT_TRUE(e.ok()) << e.status();
    return std::move(*e);
  }

  // A draft that knows nothing: the tiny synthetic shape with random weights and the
  // target's vocabulary and context (its proposals are almost always wrong).
  static const ModelWeights& RandomDraft() {
    static const ModelWeights* w = [] {
      model::ModelConfig c = *SyntheticConfig("tiny");
      c.vocab_size = weights_->config().vocab_size;
      c.context_length = weights_->config().context_length;
      return ModelWeights::Random(c, model::GgmlType::kF32, 7)->release();
    }();
    return *w;
  }

  // Prompts prompt lookup finds drafts in (a text to repeat, code to edit), and plain ones.
  static std::vector<std::vector<int32_t>> MixedPrompts() {
    std::vector<std::vector<int32_t>> out = {
        *tok_->Encode("<|im_start|>user\nRepeat exactly: the quick brown fox jumps over the lazy "
                      "dog, then the quick brown fox jumps over the lazy dog again.<|im_end|>\n"
                      "<|im_start|>assistant\nthe quick brown fox"),
        *tok_->Encode("def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n\n"
                      "def mul(a, b):\n    return"),
        *tok_->Encode("1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17,")};
    for (auto& p : Prompts(4)) out.push_back(std::move(p));
    return out;
  }

  void CheckBlocksThroughRejectionPreemptionAndCancel(const ModelWeights* draft);

  // The settings the output-equality tests run at: greedy, and seeded at T = 0.8 / top-p
  // 0.9 and T = 1.5 / min-p 0.05.
  struct Setting {
    double temperature, top_p, min_p;
  };
  static constexpr Setting kSettings[] = {{0.0, 1.0, 0.0}, {0.8, 0.9, 0.0}, {1.5, 1.0, 0.05}};
  // `n` requests at `st`: max_tokens 24, 32, 40 in turn, seeds from `seed`, stopping at
  // the end token.
  static std::vector<SamplingParams> ParamsAt(const Setting& st, size_t n, uint64_t seed) {
    std::vector<SamplingParams> params;
    for (size_t i = 0; i < n; ++i) {
      SamplingParams p = Params(st.temperature, 24 + static_cast<int>(i % 3) * 8, seed + i);
      p.top_p = st.top_p;
      p.min_p = st.min_p;
      p.ignore_eos = false;
      params.push_back(p);
    }
    return params;
  }

  // Every request at once on `e`; each one's tokens.
  static std::vector<std::vector<int32_t>> RunAll(Engine& e,
                                                  const std::vector<std::vector<int32_t>>& prompts,
                                                  const std::vector<SamplingParams>& params) {
    std::vector<kv::SeqId> ids;
    for (size_t i = 0; i < prompts.size(); ++i) ids.push_back(*e.AddRequest(prompts[i], params[i]));
    auto out = Drain(e);
    std::vector<std::vector<int32_t>> tokens;
    for (kv::SeqId id : ids) tokens.push_back(out[id]);
    return tokens;
  }
};

// Greedy and seeded sampling give exactly plain decoding's tokens with drafts checked
// k at a time: the CPU engine's logits for a position do not depend on how many
// positions a pass computes, and every position is drawn with its own Philox number.
TEST_F(SpeculativeTest, TokensEqualPlainDecoding) {
  const auto prompts = MixedPrompts();
  for (const Setting& st : kSettings) {
    SCOPED_TRACE(st.temperature);
    const std::vector<SamplingParams> params = ParamsAt(st, prompts.size(), 500);
    auto plain_engine = MakeSpeculative(0);
    const auto plain = RunAll(*plain_engine, prompts, params);
    const std::vector<int32_t> ks =
        st.temperature == 0 ? std::vector<int32_t>{1, 4} : std::vector<int32_t>{4};
    for (int32_t k : ks) {
      SCOPED_TRACE(k);
      auto e = MakeSpeculative(k);
      EXPECT_EQ(RunAll(*e, prompts, params), plain);
      const EngineStats s = e->Stats();
      EXPECT_GT(s.spec_drafts, 0);
      EXPECT_LE(s.spec_accepted_tokens, s.spec_draft_tokens);
      if (st.temperature == 0) {
        EXPECT_GT(s.spec_accepted_tokens, 0) << "no draft was ever right";
      }
      EXPECT_LE(s.steps, plain_engine->Stats().steps) << "speculation took more passes";
      ExpectNoLeak(*e);
    }
  }
}

// Accepted, rejected, preempted and cancelled drafts, with a pool too small for all the
// requests, by prompt lookup and by a draft model (the target as its own draft): after
// every step each sequence's blocks cover exactly what it has cached (no block shared
// between two tables), the draft holds K/V only for running sequences, and at the end
// every block of both pools is free; the tokens of the requests that ran to the end
// are plain decoding's.
TEST_F(SpeculativeTest, BlocksStayConsistentThroughRejectionPreemptionAndCancel) {
  CheckBlocksThroughRejectionPreemptionAndCancel(nullptr);
}

TEST_F(SpeculativeTest, DraftBlocksStayConsistentThroughRejectionPreemptionAndCancel) {
  CheckBlocksThroughRejectionPreemptionAndCancel(weights_);
}

void SpeculativeTest::CheckBlocksThroughRejectionPreemptionAndCancel(const ModelWeights* draft) {
  auto prompts = MixedPrompts();
  // Each twice, other seeds (once under a sanitizer: still more than the pool holds).
  if (!kSanitized) {
    for (auto& p : MixedPrompts()) prompts.push_back(std::move(p));
  }
  std::vector<SamplingParams> params;
  for (size_t i = 0; i < prompts.size(); ++i) {
    params.push_back(Params(i % 2 ? 0.0 : 0.9, 20 + static_cast<int>(i % 4) * 6, 70 + i));
  }
  // Plain decoding's tokens, batched (the CPU engine's tokens do not depend on the batch:
  // EngineTest.TokensDoNotDependOnBatchingOrPreemption).
  const auto plain = RunAll(*MakeSpeculative(0), prompts, params);

  const int32_t bs = 4;
  // 48 target blocks of 4 (the self-draft's pool takes as much again).
  auto e = MakeSpeculative(4, int64_t{draft == nullptr ? 48 : 96} * bs * 2 * 30 * 3 * 64 * 4, bs,
                           false, draft);
  ASSERT_EQ(e->Stats().blocks.num_blocks, 48);
  std::vector<kv::SeqId> ids;
  for (size_t i = 0; i < prompts.size(); ++i) ids.push_back(*e->AddRequest(prompts[i], params[i]));
  std::map<kv::SeqId, std::vector<int32_t>> out;
  std::set<kv::SeqId> cancelled;
  int step = 0;
  while (e->HasWork()) {
    if (step == 7) {  // two requests give up mid-way
      e->Cancel(ids[1]);
      e->Cancel(ids[4]);
      cancelled = {ids[1], ids[4]};
    }
    for (const auto& ev : StepOk(*e)) {
      if (ev.token >= 0) out[ev.id].push_back(ev.token);
    }
    ++step;
    std::set<int32_t> seen;
    for (kv::SeqId id : ids) {
      const Sequence* seq = e->Find(id);
      if (seq == nullptr || seq->state != SequenceState::kRunning) continue;
      const auto& table = e->BlockTable(id);
      EXPECT_GE(static_cast<int64_t>(table.size()) * bs, seq->num_cached) << "step " << step;
      EXPECT_EQ(seq->num_cached, seq->size() - 1) << "a decoding sequence caches all but its last";
      for (int32_t b : table) EXPECT_TRUE(seen.insert(b).second) << "block " << b << " shared";
    }
    EXPECT_LE(static_cast<int32_t>(seen.size()), e->Stats().blocks.num_blocks);
    EXPECT_LE(e->Stats().draft_blocks.num_sequences, e->Stats().running);
  }
  EXPECT_GT(e->Stats().preemptions, 0) << "the test meant to force preemption";
  EXPECT_GT(e->Stats().spec_accepted_tokens, 0);
  EXPECT_GT(e->Stats().spec_draft_tokens, e->Stats().spec_accepted_tokens) << "no rejection";
  for (size_t i = 0; i < ids.size(); ++i) {
    if (cancelled.count(ids[i]) == 0) {
      EXPECT_EQ(out[ids[i]], plain[i]) << "request " << i;
    }
  }
  ExpectNoLeak(*e);
}

// The defaults speculate only while one sequence decodes, and a sequence whose drafts
// keep failing stops drafting (adaptive k) but for a probe now and then.
TEST_F(SpeculativeTest, DraftsOnlyWhereTheyPay) {
  const auto prompts = MixedPrompts();
  auto drafts_with = [&](const std::vector<std::vector<int32_t>>& batch,
                         double min_token_acceptance =
                             EngineOptions::Speculative().min_token_acceptance) {
    EngineOptions o;
    o.num_threads = 2;
    o.device = ::tandem::testing::TestDevice();
    o.speculative.method = Method::kNgram;  // the other speculative options at their defaults
    o.speculative.min_token_acceptance = min_token_acceptance;
    auto e = Engine::Create(*weights_, o);
    EXPECT_TRUE(e.ok());
    std::vector<SamplingParams> params(batch.size(), Params(0.0, 48, 1));
    RunAll(**e, batch, params);
    ExpectNoLeak(**e);
    return (*e)->Stats();
  };
  EXPECT_GT(drafts_with({prompts[0]}).spec_drafts, 0);
  EXPECT_EQ(drafts_with({prompts[0], prompts[1], prompts[2]}).spec_drafts, 0);
  // An open-ended answer: drafts mostly fail, and k shrinks (compared with always
  // proposing the full k), so fewer rows are spent on tokens that do not hold.
  const std::vector<int32_t> story = *tok_->Encode(
      "<|im_start|>user\nWrite a short story about a lighthouse keeper.<|im_end|>\n"
      "<|im_start|>assistant\n");
  const EngineStats adaptive = drafts_with({story});
  const EngineStats fixed = drafts_with({story}, 0.0);
  ASSERT_GT(fixed.spec_draft_tokens, 0);
  EXPECT_LT(2 * adaptive.spec_draft_tokens, fixed.spec_draft_tokens)
      << "k did not adapt to a poor acceptance";
}

// With the prefix cache on, only kept tokens are registered: a second run of the same
// requests hits the cache and still gives plain decoding's tokens.
TEST_F(SpeculativeTest, PrefixCacheHoldsOnlyKeptTokens) {
  const auto prompts = MixedPrompts();
  std::vector<SamplingParams> params;
  for (size_t i = 0; i < prompts.size(); ++i) params.push_back(Params(0.0, 32, 9));
  auto plain_engine = MakeSpeculative(0);
  const auto plain = RunAll(*plain_engine, prompts, params);
  auto e = MakeSpeculative(4, int64_t{64} << 20, 4, /*prefix_caching=*/true);
  EXPECT_EQ(RunAll(*e, prompts, params), plain);
  // Continue each output: its prompt is the first run's prompt and output, cached.
  std::vector<std::vector<int32_t>> longer;
  for (size_t i = 0; i < prompts.size(); ++i) {
    longer.push_back(prompts[i]);
    longer.back().insert(longer.back().end(), plain[i].begin(), plain[i].end());
  }
  const int64_t hits_before = e->Stats().blocks.prefix_hit_tokens;
  const auto again = RunAll(*e, longer, params);
  EXPECT_GT(e->Stats().blocks.prefix_hit_tokens, hits_before);
  EXPECT_EQ(again, RunAll(*plain_engine, longer, params));
  const auto s = e->Stats();
  EXPECT_EQ(s.blocks.free_blocks + s.blocks.cached_blocks, s.blocks.num_blocks);
}

// A draft model's proposals are checked as prompt lookup's. With the target as its own
// draft every greedy proposal holds — the CPU engine's arithmetic does not depend on
// the batch, so the draft's arg-max is the target's, and a proposal computed from
// stale or misplaced draft K/V would differ; with a random draft almost none does.
// Either way the tokens are plain decoding's, greedy and seeded, and the draft's
// blocks come back.
TEST_F(SpeculativeTest, DraftModelTokensEqualPlainDecoding) {
  const auto prompts = MixedPrompts();
  for (const Setting& st : kSettings) {
    SCOPED_TRACE(st.temperature);
    const std::vector<SamplingParams> params = ParamsAt(st, prompts.size(), 900);
    auto plain_engine = MakeSpeculative(0);
    const auto plain = RunAll(*plain_engine, prompts, params);
    for (const ModelWeights* draft : {static_cast<const ModelWeights*>(weights_), &RandomDraft()}) {
      const bool self = draft == weights_;
      SCOPED_TRACE(self ? "the target as its draft" : "a random draft");
      auto e = MakeSpeculative(4, int64_t{64} << 20, 16, false, draft);
      EXPECT_EQ(RunAll(*e, prompts, params), plain);
      const EngineStats s = e->Stats();
      EXPECT_GT(s.spec_drafts, 0);
      EXPECT_EQ(s.spec_draft_failures, 0);
      if (self && st.temperature == 0) {
        EXPECT_EQ(s.spec_accepted_tokens, s.spec_draft_tokens) << "a greedy self-draft was wrong";
      }
      if (self) {
        EXPECT_LT(s.steps, plain_engine->Stats().steps);
      }
      if (!self) {
        EXPECT_LT(5 * s.spec_accepted_tokens, s.spec_draft_tokens);
      }
      ExpectNoLeak(*e);
    }
  }
}

// The engine golden prompts (tests/data/engine_golden.json), greedy, 48 tokens each, all
// at once: the same tokens plain, with prompt lookup and with either draft — the
// draft's prompt computed in chunks of a small pass budget (the 291-token prompt takes
// several steps) — and, where `tandem generate` is checked against Hugging Face, its
// continuation. In exact math, which the goldens pin (kernels/backend.h).
TEST_F(SpeculativeTest, GoldenPromptsGiveTheSameGreedyTokens) {
  std::ifstream in(::tandem::testing::TestDataPath("engine_golden.json"));
  const auto golden = nlohmann::json::parse(in);
  std::vector<std::vector<int32_t>> prompts;
  for (const auto& c : golden.at("cases")) prompts.push_back(c.at("prompt_ids"));
  std::vector<SamplingParams> params(prompts.size(), Params(0.0, 48, 1));
  auto plain_engine =
      MakeSpeculative(0, int64_t{64} << 20, 16, false, nullptr, kernels::CpuMath::kExact);
  const auto plain = RunAll(*plain_engine, prompts, params);
  for (int i : {0, 1, 4}) {
    EXPECT_EQ(plain[i],
              golden.at("cases").at(i).at("continuation_ids").get<std::vector<int32_t>>());
  }
  for (const ModelWeights* draft : {static_cast<const ModelWeights*>(nullptr),
                                    static_cast<const ModelWeights*>(weights_), &RandomDraft()}) {
    EngineOptions o;
    o.cpu_math = kernels::CpuMath::kExact;
    o.num_threads = 2;
    o.device = ::tandem::testing::TestDevice();
    o.scheduler.max_batched_tokens = 64;
    o.scheduler.max_prefill_chunk = 64;
    o.speculative.method = draft == nullptr ? Method::kNgram : Method::kDraftModel;
    o.speculative.draft_weights = draft;
    o.speculative.disable_by_batch_size = 0;
    auto e = Engine::Create(*weights_, o);
    ASSERT_TRUE(e.ok()) << e.status();
    SCOPED_TRACE(draft == nullptr ? "ngram" : draft == weights_ ? "self-draft" : "random draft");
    EXPECT_EQ(RunAll(**e, prompts, params), plain);
    const EngineStats s = (*e)->Stats();
    EXPECT_GT(s.spec_drafts, 0);
    if (draft == weights_) {
      EXPECT_EQ(s.spec_accepted_tokens, s.spec_draft_tokens);
    }
    if (draft == nullptr) {
      EXPECT_GT(s.spec_accepted_tokens, 0);
    }
    ExpectNoLeak(**e);
  }
}

// disable_speculation: that request never drafts on a speculating engine, and its
// tokens are the same.
TEST_F(SpeculativeTest, ARequestCanOptOut) {
  const std::vector<std::vector<int32_t>> prompt = {MixedPrompts()[0]};
  for (const ModelWeights* draft :
       {static_cast<const ModelWeights*>(nullptr), static_cast<const ModelWeights*>(weights_)}) {
    auto e = MakeSpeculative(4, int64_t{64} << 20, 16, false, draft);
    SamplingParams p = Params(0.0, 24, 1);
    p.disable_speculation = true;
    const auto plain = RunAll(*e, prompt, {p});
    EXPECT_EQ(e->Stats().spec_drafts, 0);
    EXPECT_EQ(e->Stats().draft_blocks.used_blocks, 0);
    p.disable_speculation = false;
    EXPECT_EQ(RunAll(*e, prompt, {p}), plain);
    EXPECT_GT(e->Stats().spec_drafts, 0);
    ExpectNoLeak(*e);
  }
}

// A pass that fails ends its sequences, and their draft K/V goes with them at once (the
// engine then has no work, so no later step would free it). The fault is injected into
// a step without drafts (one token from max_tokens), so it hits the target's pass.
TEST_F(SpeculativeTest, AFailedPassFreesTheDraftsBlocks) {
  kernels::CpuBackend* backend = nullptr;
  EngineOptions o;
  o.num_threads = 2;
  o.make_backend = kernels::testing::FaultableBackend(&backend, 2);
  o.speculative.method = Method::kDraftModel;
  o.speculative.draft_weights = weights_;
  o.speculative.num_tokens = 4;
  auto e = *Engine::Create(*weights_, o);
  const kv::SeqId id = *e->AddRequest(MixedPrompts()[0], Params(0, 12, 1));
  while (e->Find(id)->output.size() < 11) StepOk(*e);
  EXPECT_GT(e->Stats().spec_drafts, 0);
  EXPECT_GT(e->Stats().draft_blocks.used_blocks, 0);
  backend->InjectFault(absl::InternalError("injected device fault"));
  const auto events = e->Step();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].error.code(), absl::StatusCode::kInternal);
  EXPECT_EQ(e->Stats().failed_steps, 1);
  EXPECT_EQ(e->Stats().spec_draft_failures, 0);
  EXPECT_FALSE(e->HasWork());
  ExpectNoLeak(*e);
}

// A draft must speak the target's vocabulary; the draft method needs a draft.
TEST_F(SpeculativeTest, DraftModelMustShareTheVocabulary) {
  EngineOptions o;
  o.num_threads = 2;
  o.speculative.method = Method::kDraftModel;
  auto none = Engine::Create(*weights_, o);
  EXPECT_EQ(none.status().code(), absl::StatusCode::kInvalidArgument);
  auto tiny = ModelWeights::Random(*SyntheticConfig("tiny"), model::GgmlType::kF32, 1);
  ASSERT_TRUE(tiny.ok());
  o.speculative.draft_weights = tiny->get();
  auto other = Engine::Create(*weights_, o);
  EXPECT_EQ(other.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(other.status().message(), ::testing::HasSubstr("vocabulary"));

  auto target = OpenModelFile(::tandem::testing::DefaultModelPath());
  ASSERT_TRUE(target.ok());
  EXPECT_TRUE(LoadDraftModel(::tandem::testing::DefaultModelPath(), *target).ok());
  EXPECT_FALSE(LoadDraftModel("/nonexistent.gguf", *target).ok());
  // Tokenizers of other families: refused on size; the same one passes.
  auto file = model::GgufFile::Open(::tandem::testing::TestDataPath("bpe_llama3.gguf"));
  ASSERT_TRUE(file.ok());
  auto llama = tokenizer::Tokenizer::FromGguf(**file);
  ASSERT_TRUE(llama.ok());
  const absl::Status st = CheckSameVocabulary(*tok_, **llama);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), ::testing::HasSubstr("vocabulary"));
  EXPECT_TRUE(CheckSameVocabulary(*tok_, *target->tokenizer).ok());
}

// The draft model's cache against no cache: whatever happened before — drafts kept,
// cut, replaced by another token, a sequence forgotten, a catch-up computed in
// chunks of a small pass — its proposal equals that of a fresh draft model given the
// same tokens (the CPU's logits do not depend on how a pass is batched, so they are
// equal only if the cached K/V are exactly the tokens' K/V).
TEST_F(SpeculativeTest, DraftProposalsEqualAFreshDraftsAfterAnyHistory) {
  auto backend =
      kernels::MakeBackend({.device = ::tandem::testing::TestDevice(), .num_threads = 2});
  ASSERT_TRUE(backend.ok());
  auto make = [&](int32_t pass_tokens) {
    auto d = DraftModel::Create(*weights_, weights_->config().vocab_size, backend->get());
    EXPECT_TRUE(d.ok()) << d.status();
    EXPECT_TRUE((*d)->AllocateCache({.kv_bytes = int64_t{16} << 20,
                                     .block_size = 4,
                                     .limits = {.max_tokens = pass_tokens, .max_seqs = 4}})
                    .ok());
    return std::move(*d);
  };
  auto cached = make(24);
  const auto prompts = MixedPrompts();
  std::vector<std::vector<int32_t>> tokens = {prompts[0], prompts[1], prompts[3]};
  std::mt19937 rng(5);
  const int32_t k = 3;
  int compared = 0;
  const int rounds = kSanitized ? 8 : 14;  // the history forgotten at 6 either way
  for (int round = 0; round < rounds; ++round) {
    if (round == 6) cached->Retain([](kv::SeqId id) { return id != 2; });  // forget one
    std::vector<std::vector<int32_t>> drafts(tokens.size());
    std::vector<DraftModel::Request> requests;
    for (size_t i = 0; i < tokens.size(); ++i) {
      requests.push_back({static_cast<kv::SeqId>(i + 1), tokens[i], {}, k, &drafts[i]});
    }
    ASSERT_TRUE(cached->Propose(requests).ok());
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (drafts[i].empty()) continue;  // still catching up in chunks
      std::vector<int32_t> fresh_draft;
      auto fresh = make(512);
      const DraftModel::Request alone{1, tokens[i], {}, k, &fresh_draft};
      ASSERT_TRUE(fresh->Propose({&alone, 1}).ok());
      EXPECT_EQ(drafts[i], fresh_draft) << "round " << round << ", sequence " << i;
      ++compared;
      // The target keeps j of the draft and then samples another token.
      const size_t j = std::uniform_int_distribution<size_t>(0, drafts[i].size())(rng);
      tokens[i].insert(tokens[i].end(), drafts[i].begin(), drafts[i].begin() + j);
      const int32_t other = std::uniform_int_distribution<int32_t>(0, 999)(rng);
      tokens[i].push_back(j < drafts[i].size() && other == drafts[i][j] ? other + 1 : other);
    }
  }
  EXPECT_GT(compared, kSanitized ? 10 : 25);
  cached->Retain([](kv::SeqId) { return false; });
  EXPECT_EQ(cached->block_stats().free_blocks, cached->block_stats().num_blocks);
}

class ConstrainedTest : public EngineTest {
 protected:
  static std::string Text(const std::vector<int32_t>& ids) {
    std::vector<int32_t> body = ids;
    if (!body.empty() && body.back() == tok_->vocab().eos_id) body.pop_back();
    return *tok_->Decode(body);
  }
  // Each prompt alone and all together: the same tokens; returns the texts.
  static std::vector<std::string> Run(const std::vector<std::vector<int32_t>>& prompts,
                                      SamplingParams p) {
    auto batched = MakeEngine();
    std::vector<kv::SeqId> ids;
    for (size_t i = 0; i < prompts.size(); ++i) {
      p.seed = 100 + i;
      auto id = batched->AddRequest(prompts[i], p);
      EXPECT_TRUE(id.ok()) << id.status();
      ids.push_back(*id);
    }
    auto out = Drain(*batched);
    ExpectNoLeak(*batched);
    std::vector<std::string> texts;
    for (size_t i = 0; i < prompts.size(); ++i) {
      p.seed = 100 + i;
      EXPECT_EQ(out[ids[i]], Alone(prompts[i], p)) << "request " << i;
      texts.push_back(Text(out[ids[i]]));
    }
    return texts;
  }
  static SamplingParams Constrained(const std::string& gbnf, double temperature) {
    SamplingParams p;
    p.temperature = temperature;
    p.max_tokens = 120;
    p.grammar = gbnf;
    return p;
  }
};

TEST_F(ConstrainedTest, RegexOutputsMatch) {
  auto gbnf = grammar::RegexToGbnf("[0-9]{3}-[a-z]{2,5}( [A-Z][a-z]{1,8})?");
  ASSERT_TRUE(gbnf.ok());
  const std::regex want("[0-9]{3}-[a-z]{2,5}( [A-Z][a-z]{1,8})?");
  for (double t : {0.0, 1.0}) {
    for (const std::string& text : Run(Prompts(4), Constrained("root ::= " + *gbnf + "\n", t))) {
      EXPECT_TRUE(std::regex_match(text, want)) << "temperature " << t << ": " << text;
    }
  }
}

TEST_F(ConstrainedTest, JsonSchemaOutputsValidate) {
  auto gbnf = grammar::JsonSchemaToGbnf(R"({"type": "object", "properties": {
      "name": {"type": "string", "maxLength": 12},
      "age": {"type": "integer", "minimum": 0, "maximum": 120},
      "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 2}},
      "required": ["name", "age"]})");
  ASSERT_TRUE(gbnf.ok()) << gbnf.status();
  for (double t : {0.0, 1.0}) {
    for (const std::string& text : Run(Prompts(3), Constrained(*gbnf, t))) {
      SCOPED_TRACE(text);
      auto j = nlohmann::json::parse(text, nullptr, false);
      ASSERT_FALSE(j.is_discarded());
      ASSERT_TRUE(j.is_object());
      ASSERT_TRUE(j.contains("name") && j.at("name").is_string());
      EXPECT_LE(j.at("name").get<std::string>().size(), 12u * 4);
      ASSERT_TRUE(j.contains("age") && j.at("age").is_number_integer());
      EXPECT_GE(j.at("age").get<int>(), 0);
      EXPECT_LE(j.at("age").get<int>(), 120);
      for (const auto& [k, v] : j.items())
        EXPECT_TRUE(k == "name" || k == "age" || k == "tags") << k;
    }
  }
}

// An enum far wider than GrammarMatcher::kMaxHeads after a prefix (issue #41: refused
// mid-stream with "the grammar allows no token" before): every answer is one value.
TEST_F(ConstrainedTest, WideEnumAfterAPrefixGivesOneOfItsValues) {
  constexpr int kValues = 20000;
  const std::string gbnf = grammar::WideEnumGbnf("{\"id\": \"", kValues, "\"}");
  const std::regex whole(R"re(\{"id": "v(\d{5})"\})re");
  for (const std::string& text : Run(Prompts(2), Constrained(gbnf, 1.0))) {
    std::smatch m;
    ASSERT_TRUE(std::regex_match(text, m, whole)) << text;
    EXPECT_LT(std::stoi(m[1].str()), kValues) << text;
  }
}

TEST_F(ConstrainedTest, ChoiceEndsWithoutAnEndToken) {
  const std::string gbnf = R"(root ::= "yes" | "no" | "maybe so")";
  for (const std::string& text : Run(Prompts(3), Constrained(gbnf + "\n", 1.0))) {
    EXPECT_TRUE(text == "yes" || text == "no" || text == "maybe so") << text;
  }
  // The grammar is complete after "no": the request stops there (kStop), at most one
  // token past the choice.
  auto e = MakeEngine();
  SamplingParams p = Constrained(R"(root ::= "no")", 0.0);
  auto id = e->AddRequest(Prompts(1)[0], p);
  ASSERT_TRUE(id.ok());
  FinishReason reason = FinishReason::kNone;
  std::vector<int32_t> tokens;
  while (e->HasWork()) {
    for (const auto& ev : StepOk(*e)) {
      if (ev.token >= 0) tokens.push_back(ev.token);
      if (ev.finished) reason = ev.reason;
    }
  }
  EXPECT_EQ(reason, FinishReason::kStop);
  EXPECT_EQ(Text(tokens), "no");
}

TEST_F(ConstrainedTest, PrefillHereDecodeThereFollowsTheGrammar) {
  auto gbnf = grammar::RegexToGbnf("(ab|[0-9]){1,6} [xyz]{4}");
  ASSERT_TRUE(gbnf.ok());
  SamplingParams p = Constrained("root ::= " + *gbnf + "\n", 0.7);
  p.seed = 5;
  const std::vector<int32_t> prompt = Prompts(3)[2];
  auto prefill = MakeEngine();
  auto decode = MakeEngine();
  auto pid = prefill->AddRequest(prompt, p, RequestMode::kPrefillOnly);
  ASSERT_TRUE(pid.ok());
  int32_t first = -1;
  while (prefill->HasWork()) {
    for (const auto& ev : StepOk(*prefill)) first = ev.token;
  }
  auto did = decode->Reserve(static_cast<int64_t>(prompt.size()) + 1);
  ASSERT_TRUE(did.ok());
  ASSERT_NO_FATAL_FAILURE(MoveKv(*prefill, *pid, *decode, *did));
  EXPECT_TRUE(prefill->Release(*pid));
  ASSERT_TRUE(decode->AdmitPrefilled(*did, prompt, first, p).ok());
  auto out = Drain(*decode);
  std::vector<int32_t> got = {first};
  got.insert(got.end(), out[*did].begin(), out[*did].end());
  EXPECT_EQ(got, Alone(prompt, p));
  EXPECT_TRUE(std::regex_match(Text(got), std::regex("(ab|[0-9]){1,6} [xyz]{4}"))) << Text(got);
  ExpectNoLeak(*decode);
}

TEST_F(ConstrainedTest, BadGrammarsAreRefusedNamingTheField) {
  auto e = MakeEngine();
  for (const char* bad : {"root ::= missing", "root ::= \"a\" root", "root ::= [z-a]"}) {
    auto id = e->AddRequest(Prompts(1)[0], Constrained(bad, 0.0));
    ASSERT_FALSE(id.ok()) << bad;
    EXPECT_EQ(id.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(id.status().message()), ::testing::HasSubstr("grammar: ")) << bad;
  }
  SamplingParams endless = Constrained("root ::= \"a\"", 0.0);
  endless.ignore_eos = true;
  auto refused = e->AddRequest(Prompts(1)[0], endless);
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(std::string(refused.status().message()), ::testing::StartsWith("ignore_eos:"));
  // The decode side refuses a first token the grammar does not allow.
  auto did = e->Reserve(8);
  ASSERT_TRUE(did.ok());
  auto x = tok_->vocab().token_to_id.find("x");
  ASSERT_NE(x, tok_->vocab().token_to_id.end());
  const int32_t not_a_digit = x->second;
  auto st =
      e->AdmitPrefilled(*did, Prompts(1)[0], not_a_digit, Constrained("root ::= [0-9]+", 0.0));
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_TRUE(e->Release(*did));  // still a reservation: the caller frees it
  // Without a vocabulary the engine cannot constrain.
  EngineOptions o;
  o.num_threads = 1;
  o.kv_cache_bytes = int64_t{16} << 20;
  auto bare = Engine::Create(*weights_, o);
  ASSERT_TRUE(bare.ok());
  EXPECT_EQ((*bare)->AddRequest(Prompts(1)[0], Constrained("root ::= \"a\"", 0.0)).status().code(),
            absl::StatusCode::kInvalidArgument);
  ExpectNoLeak(*e);
}

}  // namespace
}  // namespace tandem::engine
