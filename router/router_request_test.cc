// The router's request state machine against fake workers (fake_workers.h): every
// transition — the happy path, retries, deadlines, cancellation in each state, health
// marking, stop strings — with no process and no network.
#include "router/router_request.h"

#include <dirent.h>

#include <cmath>
#include <condition_variable>
#include <map>
#include <sstream>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "router/fake_workers.h"
#include "router/router.h"
#include "tandem/v1/kv_transfer.pb.h"
#include "tests/default_tokenizer.h"

namespace tandem::router {
namespace {

using namespace std::chrono_literals;
using ::testing::AllOf;
using ::testing::HasSubstr;

// Collects one request's output.
class Collect : public ResponseSink {
 public:
  void OnChunk(OutputChunk chunk) override {
    std::lock_guard<std::mutex> lock(mu_);
    EXPECT_FALSE(ended_) << "a chunk after the end";
    chunks_.push_back(std::move(chunk));
  }
  void OnComplete(const Completion& c) override {
    std::lock_guard<std::mutex> lock(mu_);
    EXPECT_FALSE(ended_) << "a second end";
    done_ = c;
    ended_ = true;
    cv_.notify_all();
  }
  void OnError(const absl::Status& s) override {
    std::lock_guard<std::mutex> lock(mu_);
    EXPECT_FALSE(ended_) << "a second end";
    error_ = s;
    ended_ = true;
    cv_.notify_all();
  }
  // Waits for the end; false on timeout.
  bool Wait(std::chrono::milliseconds timeout = 5000ms) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, timeout, [&] { return ended_; });
  }
  bool ended() {
    std::lock_guard<std::mutex> lock(mu_);
    return ended_;
  }
  std::vector<int32_t> tokens() {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<int32_t> out;
    for (const auto& c : chunks_) out.insert(out.end(), c.token_ids.begin(), c.token_ids.end());
    return out;
  }
  std::string text() {
    std::lock_guard<std::mutex> lock(mu_);
    std::string out;
    for (const auto& c : chunks_) out += c.text;
    return out;
  }
  size_t num_chunks() {
    std::lock_guard<std::mutex> lock(mu_);
    return chunks_.size();
  }
  std::optional<Completion> done() {
    std::lock_guard<std::mutex> lock(mu_);
    return done_;
  }
  absl::Status error() {
    std::lock_guard<std::mutex> lock(mu_);
    return error_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<OutputChunk> chunks_;
  std::optional<Completion> done_;
  absl::Status error_;
  bool ended_ = false;
};

int ThreadCount() {
  int n = 0;
  DIR* d = opendir("/proc/self/task");
  if (d == nullptr) return -1;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] != '.') ++n;
  }
  closedir(d);
  return n;
}

// Polls `pred` for up to 5 s.
template <class F>
bool Eventually(F pred) {
  for (int i = 0; i < 500; ++i) {
    if (pred()) return true;
    std::this_thread::sleep_for(10ms);
  }
  return pred();
}

class RouterRequestTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { tok_ = &::tandem::testing::DefaultTokenizer(); }

  void TearDown() override {
    router_.reset();
    pool_.reset();
  }

  // `prefill` and `decode` workers, each configured before the router starts.
  void Make(int prefill, int decode, RouterOptions options = {},
            std::function<void(FakeWorkers&)> configure = nullptr,
            std::chrono::milliseconds poll_interval = 3600s) {
    std::vector<std::string> p, d;
    for (int i = 0; i < prefill; ++i) p.push_back(StrCat("10.0.0.1:", 100 + i));
    for (int i = 0; i < decode; ++i) d.push_back(StrCat("10.0.0.2:", 100 + i));
    // Polled once at Start; no later poll undoes what a test marks.
    pool_ = std::make_unique<WorkerPool>(p, d, fakes_.Factory(),
                                         WorkerPoolOptions{.poll_interval = poll_interval});
    if (configure) configure(fakes_);
    pool_->Start(nullptr);
    config_.eos_token_id = 2;
    router_ = std::make_unique<Router>(*tok_, config_, pool_.get(), options);
  }
  FakePrefillClient* P(int i) { return fakes_.prefill(StrCat("10.0.0.1:", 100 + i)); }
  FakeDecodeClient* D(int i) { return fakes_.decode(StrCat("10.0.0.2:", 100 + i)); }

  // Spec's, with a prompt of `n` tokens (100, 101, …).
  static RequestSpec SpecOfLength(int32_t n, int32_t max_tokens) {
    RequestSpec s = Spec(max_tokens);
    s.prompt.clear();
    for (int32_t i = 0; i < n; ++i) s.prompt.push_back(100 + i);
    return s;
  }

  static RequestSpec Spec(int32_t max_tokens = 5, bool stream = true) {
    RequestSpec s;
    s.prompt = {1, 5, 9, 14};
    s.params.max_tokens = max_tokens;
    s.params.seed = 1;
    s.stream = stream;
    return s;
  }

  std::shared_ptr<RouterRequest> Submit(RequestSpec spec, std::shared_ptr<Collect> sink,
                                        std::optional<Deadline> deadline = std::nullopt) {
    auto r = router_->Submit(std::move(spec), deadline, sink);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : nullptr;
  }

  // Submits `spec` and waits for its end (done() is set unless it failed).
  std::shared_ptr<Collect> Finish(RequestSpec spec) {
    auto sink = std::make_shared<Collect>();
    Submit(std::move(spec), sink);
    EXPECT_TRUE(sink->Wait());
    return sink;
  }

  // Every count back at rest: nothing in flight on any worker, no lease held.
  void ExpectAtRest() {
    EXPECT_TRUE(Eventually([&] { return router_->Stats().running_requests == 0; }));
    for (WorkerRole role : {WorkerRole::kPrefill, WorkerRole::kDecode}) {
      for (const WorkerSnapshot& w : pool_->Snapshot(role)) {
        EXPECT_EQ(w.in_flight, 0) << w.address;
      }
    }
    for (int i = 0; D(i) != nullptr; ++i) {
      EXPECT_TRUE(Eventually([&] { return D(i)->live_streams() == 0; })) << i;
      EXPECT_EQ(D(i)->outstanding_leases(), 0) << i;
    }
  }

  static const tokenizer::Tokenizer* tok_;
  FakeWorkers fakes_;  // outlives the pool, which owns the clients
  model::ModelConfig config_;
  std::unique_ptr<WorkerPool> pool_;
  std::unique_ptr<Router> router_;
};
const tokenizer::Tokenizer* RouterRequestTest::tok_ = nullptr;

TEST_F(RouterRequestTest, StreamsEveryTokenAndEndsOnLength) {
  Make(1, 1, {}, [](FakeWorkers& f) {
    f.prefill("10.0.0.1:100")->Set({.first_token = 42, .cached_tokens = 16});
  });
  auto sink = Finish(Spec(5));
  ASSERT_TRUE(sink->done().has_value()) << sink->error();
  const std::vector<int32_t> want = {42, 1000, 1001, 1002, 1003};
  EXPECT_EQ(sink->tokens(), want);
  EXPECT_EQ(sink->text(), *tok_->Decode(want));
  EXPECT_GE(sink->num_chunks(), 5u);  // streamed: one chunk per token at least
  const Completion c = *sink->done();
  EXPECT_EQ(c.reason, engine::FinishReason::kLength);
  EXPECT_EQ(c.completion_tokens, 5);
  EXPECT_EQ(c.prompt_tokens, 4);
  EXPECT_EQ(c.cached_tokens, 16);
  EXPECT_EQ(D(0)->releases(), 0);  // the Decode consumed the lease
  EXPECT_EQ(D(0)->streams(), 1);
  ExpectAtRest();
}

TEST_F(RouterRequestTest, NonStreamingGetsOneChunk) {
  Make(1, 1);
  auto sink = Finish(Spec(4, /*stream=*/false));
  ASSERT_TRUE(sink->done().has_value()) << sink->error();
  EXPECT_EQ(sink->num_chunks(), 1u);
  EXPECT_EQ(sink->tokens(), (std::vector<int32_t>{0, 1000, 1001, 1002}));
  ExpectAtRest();
}

// A prefill worker that went away: the request starts again, after a pause of at least
// half the retry pause, on a fresh reservation and the other prefill worker.
TEST_F(RouterRequestTest, AnUnavailablePrefillStartsAgainOnAnotherWorkerAfterAPause) {
  RouterOptions o;
  o.routing = RoutingPolicy::kRoundRobin;  // the first request goes to worker 0
  Make(2, 1, o, [](FakeWorkers& f) {
    f.prefill("10.0.0.1:100")->Set({.kind = FakePrefillBehaviour::kUnavailable});
    f.prefill("10.0.0.1:101")->Set({.first_token = 7});
  });
  auto sink = std::make_shared<Collect>();
  const auto t0 = std::chrono::steady_clock::now();
  Submit(Spec(3), sink);
  ASSERT_TRUE(sink->Wait());
  ASSERT_TRUE(sink->done().has_value()) << sink->error();
  EXPECT_GE(std::chrono::steady_clock::now() - t0, RouterOptions{}.retry_pause / 2);
  EXPECT_EQ(sink->tokens(), (std::vector<int32_t>{7, 1000, 1001}));
  EXPECT_EQ(P(0)->calls(), 1);
  EXPECT_EQ(P(1)->calls(), 1);
  EXPECT_EQ(D(0)->reserves(), 2);
  EXPECT_EQ(D(0)->releases(), 1);  // the failed attempt's reservation
  ExpectAtRest();
}

// A request waiting out its retry pause holds the queue's first place but not the
// requests behind it: they start at once; it starts when its pause is over.
TEST_F(RouterRequestTest, ARequestWaitingOutItsRetryPauseDoesNotHoldTheOnesBehindIt) {
  RouterOptions o;
  o.routing = RoutingPolicy::kRoundRobin;  // the first request goes to worker 0
  o.retry_pause = 4s;                      // 2 to 6 s: far beyond what the others take
  Make(2, 1, o, [](FakeWorkers& f) {
    f.prefill("10.0.0.1:100")->Set({.kind = FakePrefillBehaviour::kUnavailable});
    f.prefill("10.0.0.1:101")->Set({.first_token = 7});
  });
  auto paused = std::make_shared<Collect>();
  const auto t0 = std::chrono::steady_clock::now();
  Submit(Spec(3), paused);
  ASSERT_TRUE(
      Eventually([&] { return P(0)->calls() == 1 && router_->Stats().queued_requests == 1; }));
  P(0)->Set({.first_token = 7});  // back: the requests behind may go to either worker
  std::vector<std::shared_ptr<Collect>> behind;
  for (int i = 0; i < 3; ++i) {
    behind.push_back(std::make_shared<Collect>());
    Submit(Spec(3), behind.back());
  }
  for (auto& b : behind) {
    ASSERT_TRUE(b->Wait(10s));
    EXPECT_TRUE(b->done().has_value()) << b->error();
  }
  EXPECT_FALSE(paused->ended()) << "the paused request did not wait out its pause";
  EXPECT_EQ(router_->Stats().queued_requests, 1);
  ASSERT_TRUE(paused->Wait(10s));
  ASSERT_TRUE(paused->done().has_value()) << paused->error();
  EXPECT_GE(std::chrono::steady_clock::now() - t0, o.retry_pause / 2);
  EXPECT_EQ(paused->tokens(), (std::vector<int32_t>{7, 1000, 1001}));
  ExpectAtRest();
}

// Records when its first chunk arrived (the request had started).
class Timed : public Collect {
 public:
  void OnChunk(OutputChunk chunk) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!first_) first_ = std::chrono::steady_clock::now();
    }
    Collect::OnChunk(std::move(chunk));
  }
  std::chrono::steady_clock::time_point first() {
    std::lock_guard<std::mutex> lock(mu_);
    return first_.value_or(std::chrono::steady_clock::time_point::max());
  }

 private:
  std::mutex mu_;
  std::optional<std::chrono::steady_clock::time_point> first_;
};

// Priority (lower first): with one prefill at a time and the queue full of
// low-priority requests, a high-priority one that arrives last starts first; the
// low-priority ones then start in arrival order.
TEST_F(RouterRequestTest, AHighPriorityRequestStartsBeforeQueuedLowPriorityOnes) {
  RouterOptions o;
  o.max_prefill_tokens_in_flight = 4;  // one 4-token prompt at a time
  Make(1, 1, o, [](FakeWorkers& f) {
    // Long enough for every Submit below to land while the first prefill runs.
    f.prefill("10.0.0.1:100")->Set({.delay = 200ms, .first_token = 7});
  });
  auto blocker = std::make_shared<Timed>();
  Submit(Spec(2), blocker);
  ASSERT_TRUE(Eventually([&] { return P(0)->calls() == 1; }));
  std::vector<std::shared_ptr<Timed>> low;
  for (int i = 0; i < 5; ++i) {
    RequestSpec s = Spec(2);
    s.params.priority = 10;
    low.push_back(std::make_shared<Timed>());
    Submit(std::move(s), low.back());
  }
  RequestSpec s = Spec(2);
  s.params.priority = -5;
  auto high = std::make_shared<Timed>();
  Submit(std::move(s), high);
  ASSERT_TRUE(high->Wait(10s));
  for (auto& l : low) ASSERT_TRUE(l->Wait(10s));
  std::vector<std::pair<std::chrono::steady_clock::time_point, int>> order;
  order.emplace_back(high->first(), -1);
  for (int i = 0; i < 5; ++i) order.emplace_back(low[i]->first(), i);
  std::sort(order.begin(), order.end());
  std::vector<int> started;
  for (const auto& [t, who] : order) started.push_back(who);
  EXPECT_EQ(started, (std::vector<int>{-1, 0, 1, 2, 3, 4}));
  ExpectAtRest();
}

// The bound: a low-priority request queued with a backlog of high-priority ones (more
// than the bound's worth of work) starts once it has waited max_priority_wait (plus the
// prefill in progress), ahead of high-priority requests that were queued before it
// started.
TEST_F(RouterRequestTest, LowPriorityWaitsNoLongerThanTheBound) {
  RouterOptions o;
  o.max_prefill_tokens_in_flight = 4;
  o.queue.max_priority_wait = 300ms;
  Make(1, 1, o,
       [](FakeWorkers& f) { f.prefill("10.0.0.1:100")->Set({.delay = 40ms, .first_token = 7}); });
  auto first = std::make_shared<Timed>();
  Submit(Spec(2), first);
  ASSERT_TRUE(Eventually([&] { return P(0)->calls() == 1; }));
  RequestSpec ls = Spec(2);
  ls.params.priority = 100;
  auto low = std::make_shared<Timed>();
  const auto low_submitted = std::chrono::steady_clock::now();
  Submit(std::move(ls), low);
  // 30 high-priority requests: 1.2 s of prefill, four times the bound.
  std::vector<std::shared_ptr<Timed>> high;
  for (int i = 0; i < 30; ++i) {
    RequestSpec hs = Spec(2);
    hs.params.priority = -1;
    high.push_back(std::make_shared<Timed>());
    Submit(std::move(hs), high.back());
  }
  ASSERT_TRUE(low->Wait(20s));
  const auto waited = low->first() - low_submitted;
  EXPECT_GE(waited, o.queue.max_priority_wait - 50ms) << "priority did not hold it back";
  EXPECT_LE(waited, o.queue.max_priority_wait + 600ms) << "past the bound";
  int before = 0, after = 0;  // high-priority requests started before / after it
  for (auto& h : high) {
    ASSERT_TRUE(h->Wait(20s));
    (h->first() < low->first() ? before : after) += 1;
  }
  EXPECT_GT(before, 2) << "priority did not put the high-priority requests first";
  EXPECT_GT(after, 5) << "the bound did not put it ahead of the waiting backlog";
  ExpectAtRest();
}

// The decode worker lost the reservation under the prefill (it restarted): the request
// starts again on the other decode worker, and the client never sees the failure.
TEST_F(RouterRequestTest, AVanishedDecodeReservationStartsAgainOnAnotherDecodeWorker) {
  Make(1, 2, {}, [](FakeWorkers& f) {
    f.decode("10.0.0.2:100")->Set({.forget_leases = true});
    f.prefill("10.0.0.1:100")->Set({.first_token = 9});
  });
  auto sink = Finish(Spec(3));
  ASSERT_TRUE(sink->done().has_value()) << sink->error();
  EXPECT_EQ(sink->tokens(), (std::vector<int32_t>{9, 1000, 1001}));
  EXPECT_EQ(D(0)->reserves(), 1);
  EXPECT_EQ(D(0)->streams(), 0);
  EXPECT_EQ(D(1)->reserves(), 1);
  EXPECT_EQ(D(1)->streams(), 1);
  EXPECT_EQ(P(0)->calls(), 2);
  ExpectAtRest();
}

// Bounded: max_prefill_attempts attempts, each on a fresh reservation that is released,
// then UNAVAILABLE.
TEST_F(RouterRequestTest, UnavailableEverywhereFailsAfterTheAttemptsAndReleasesEachReservation) {
  Make(1, 1, {}, [](FakeWorkers& f) {
    f.prefill("10.0.0.1:100")->Set({.kind = FakePrefillBehaviour::kUnavailable});
  });
  auto sink = Finish(Spec());
  EXPECT_EQ(sink->error().code(), absl::StatusCode::kUnavailable) << sink->error();
  const int attempts = RouterOptions{}.max_prefill_attempts;
  EXPECT_EQ(P(0)->calls(), attempts);
  EXPECT_EQ(D(0)->reserves(), attempts);
  EXPECT_EQ(D(0)->releases(), attempts);
  EXPECT_EQ(D(0)->streams(), 0);
  ExpectAtRest();
}

TEST_F(RouterRequestTest, APrefillErrorIsNotRetried) {
  RouterOptions o;
  o.routing = RoutingPolicy::kRoundRobin;
  Make(2, 1, o, [](FakeWorkers& f) {
    f.prefill("10.0.0.1:100")->Set({.kind = FakePrefillBehaviour::kError});
  });
  auto sink = Finish(Spec());
  EXPECT_EQ(sink->error().code(), absl::StatusCode::kInternal) << sink->error();
  EXPECT_EQ(P(1)->calls(), 0);
  EXPECT_EQ(D(0)->releases(), 1);
  ExpectAtRest();
}

// A decode reservation that vanished under the prefill (the decode worker restarted:
// NOT_FOUND) or a transfer that stalled is the cluster's failure, not the request's:
// once every attempt failed so, the client gets UNAVAILABLE (HTTP 503, retryable) with
// the worker's reason, and each reservation is released. The request's own errors
// are not retried.
TEST_F(RouterRequestTest, AVanishedReservationOrStalledTransferIsUnavailableToTheClient) {
  const int attempts = RouterOptions{}.max_prefill_attempts;
  const std::pair<absl::Status, absl::StatusCode> cases[] = {
      {absl::NotFoundError("epoch: the decode worker restarted"), absl::StatusCode::kUnavailable},
      {absl::DeadlineExceededError("KV transfer stalled"), absl::StatusCode::kUnavailable},
      {absl::DataLossError("layer 3 got 2 of 4 blocks"), absl::StatusCode::kUnavailable},
      {absl::InvalidArgumentError("prompt: too long for this worker"),
       absl::StatusCode::kInvalidArgument},
      {absl::InternalError("the forward pass failed"), absl::StatusCode::kInternal},
  };
  for (const auto& [worker_error, client_code] : cases) {
    SCOPED_TRACE(worker_error.ToString());
    router_.reset();
    pool_.reset();
    Make(1, 1, {}, [e = worker_error](FakeWorkers& f) {
      f.prefill("10.0.0.1:100")->Set({.kind = FakePrefillBehaviour::kError, .error = e});
    });
    auto sink = Finish(Spec());
    EXPECT_EQ(sink->error().code(), client_code) << sink->error();
    EXPECT_THAT(std::string(sink->error().message()),
                ::testing::HasSubstr(std::string(worker_error.message())));
    const int tries = client_code == absl::StatusCode::kUnavailable ? attempts : 1;
    EXPECT_EQ(P(0)->calls(), tries);
    EXPECT_EQ(D(0)->releases(), tries);
    ExpectAtRest();
  }
}

// The decode worker restarted between the prefill and the Decode call: the lease is
// unknown there (NOT_FOUND), and the client is told UNAVAILABLE, with the reason.
TEST_F(RouterRequestTest, ADecodeIntoAVanishedLeaseIsUnavailableToTheClient) {
  Make(1, 1, {}, [](FakeWorkers& f) {
    f.decode("10.0.0.2:100")
        ->Set({.break_after = 0, .break_status = absl::NotFoundError("lease 1: unknown")});
  });
  auto sink = Finish(Spec(5));
  EXPECT_EQ(sink->error().code(), absl::StatusCode::kUnavailable) << sink->error();
  EXPECT_THAT(std::string(sink->error().message()), ::testing::HasSubstr("lease 1: unknown"));
  EXPECT_THAT(std::string(sink->error().message()), ::testing::HasSubstr("NOT_FOUND"));
  ExpectAtRest();
}

// The decode worker cannot be told to release (paused, cut off): the pool keeps the
// Release and sends it again once the worker answers a poll, so its blocks come back
// then, not when the lease runs out.
TEST_F(RouterRequestTest, AReleaseTheWorkerDidNotHearIsSentAgainOnceItAnswers) {
  Make(
      1, 1, {},
      [](FakeWorkers& f) {
        f.prefill("10.0.0.1:100")->Set({.kind = FakePrefillBehaviour::kError});
        f.decode("10.0.0.2:100")->SetReleaseUnreachable(true);
      },
      20ms);
  auto sink = Finish(Spec());
  EXPECT_EQ(sink->error().code(), absl::StatusCode::kInternal) << sink->error();
  std::this_thread::sleep_for(100ms);  // several polls: still out of reach, still held
  EXPECT_EQ(D(0)->outstanding_leases(), 1);
  EXPECT_EQ(D(0)->releases(), 0);
  D(0)->SetReleaseUnreachable(false);
  EXPECT_TRUE(Eventually([&] { return D(0)->outstanding_leases() == 0; }));
  EXPECT_EQ(D(0)->releases(), 1);  // told once, not again
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(D(0)->releases(), 1);
  ExpectAtRest();
}

// The request records its own end and its tokens' gaps: one finished request counts
// its prompt and completion tokens and the gaps after its first token, one failed
// request counts its code, and a token that has not arrived is not a gap.
// Reads a router's metrics into series → value.
std::map<std::string, double> Series(metrics::Metrics& m) {
  std::map<std::string, double> got;
  std::istringstream in(m.Scrape());
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    got[line.substr(0, line.rfind(' '))] = std::stod(line.substr(line.rfind(' ') + 1));
  }
  return got;
}

TEST_F(RouterRequestTest, EachRequestRecordsItsMetrics) {
  metrics::Metrics m({.model_name = "fake", .role = metrics::Role::kRouter});
  RouterOptions o;
  o.metrics = &m;
  o.routing = RoutingPolicy::kRoundRobin;
  Make(2, 1, o, [](FakeWorkers& f) {
    f.prefill("10.0.0.1:101")->Set({.kind = FakePrefillBehaviour::kError});
  });
  auto ok = std::make_shared<Collect>();
  Submit(Spec(5), ok);  // round robin: worker 0 answers
  ASSERT_TRUE(ok->Wait());
  ASSERT_TRUE(ok->done().has_value()) << ok->error();
  auto failed = std::make_shared<Collect>();
  Submit(Spec(5), failed);  // worker 1 fails it
  ASSERT_TRUE(failed->Wait());
  ASSERT_EQ(failed->error().code(), absl::StatusCode::kInternal) << failed->error();
  ExpectAtRest();
  const std::map<std::string, double> got = Series(m);
  const std::string l = R"(model_name="fake",role="router")";
  // A series that is absent fails (it is not read as 0).
  auto value = [&](const std::string& key) {
    auto it = got.find(key);
    if (it == got.end()) {
      ADD_FAILURE() << "no series " << key;
      return std::nan("");
    }
    return it->second;
  };
  EXPECT_EQ(value("tandem:request_success_total{" + l + R"(,finished_reason="length"})"), 1);
  EXPECT_EQ(value("tandem:request_errors_total{" + l + R"(,code="INTERNAL"})"), 1);
  EXPECT_EQ(value("tandem:prompt_tokens_total{" + l + "}"), 4);
  EXPECT_EQ(value("tandem:generation_tokens_total{" + l + "}"), 5);
  EXPECT_EQ(value("tandem:time_to_first_token_seconds_count{" + l + "}"), 1);
  EXPECT_EQ(value("tandem:inter_token_latency_seconds_count{" + l + "}"), 4);
  EXPECT_EQ(value("tandem:e2e_request_latency_seconds_count{" + l + "}"), 1);
}

// Selective disaggregation: a prompt shorter than disagg_min_tokens is prefilled by its
// decode worker (no prefill call; the stream carries the first token, which is the
// request's TTFT and no inter-token gap); one at the threshold goes to a prefill worker.
TEST_F(RouterRequestTest, ShortPromptsArePrefilledOnTheirDecodeWorker) {
  metrics::Metrics m({.model_name = "fake", .role = metrics::Role::kRouter});
  RouterOptions o;
  o.metrics = &m;
  o.disagg_min_tokens = 5;
  Make(1, 1, o, [](FakeWorkers& f) {
    f.prefill("10.0.0.1:100")->Set({.first_token = 42});
    f.decode("10.0.0.2:100")->Set({.first_token = 77});
  });
  auto local = std::make_shared<Collect>();
  Submit(Spec(5), local);  // 4 prompt tokens
  ASSERT_TRUE(local->Wait());
  ASSERT_TRUE(local->done().has_value()) << local->error();
  EXPECT_EQ(local->tokens(), (std::vector<int32_t>{77, 1000, 1001, 1002, 1003}));
  EXPECT_EQ(P(0)->calls(), 0);
  EXPECT_EQ(D(0)->local_prefills(), 1);
  EXPECT_EQ(local->done()->completion_tokens, 5);
  EXPECT_GT(local->done()->timings.ttft_ms, 0);
  EXPECT_EQ(local->done()->timings.kv_transfer_ms, 0);
  RequestSpec five = Spec(5);
  five.prompt = {1, 5, 9, 14, 20};
  auto remote = Finish(five);
  ASSERT_TRUE(remote->done().has_value()) << remote->error();
  EXPECT_EQ(remote->tokens(), (std::vector<int32_t>{42, 1000, 1001, 1002, 1003}));
  EXPECT_EQ(P(0)->calls(), 1);
  EXPECT_EQ(D(0)->local_prefills(), 1);
  ExpectAtRest();
  const auto got = Series(m);
  const std::string l = R"(model_name="fake",role="router")";
  auto value = [&](const std::string& key) {
    auto it = got.find(key);
    EXPECT_NE(it, got.end()) << "no series " << key;
    return it == got.end() ? std::nan("") : it->second;
  };
  EXPECT_EQ(value("tandem:prefill_placement_total{" + l + R"(,where="local"})"), 1);
  EXPECT_EQ(value("tandem:prefill_placement_total{" + l + R"(,where="remote"})"), 1);
  EXPECT_EQ(value("tandem:time_to_first_token_seconds_count{" + l + "}"), 2);
  EXPECT_EQ(value("tandem:inter_token_latency_seconds_count{" + l + "}"), 8);
}

// What counts is the part the decode worker does not hold: a 40-token prompt goes to a
// prefill worker, and once its decode worker has finished it (two full blocks of 16
// cached there), the same prompt again — 8 uncached tokens — is prefilled there.
TEST_F(RouterRequestTest, TheDecodeWorkersCachedPrefixCountsAgainstTheThreshold) {
  RouterOptions o;
  o.disagg_min_tokens = 10;
  Make(1, 1, o);
  RequestSpec spec = SpecOfLength(40, 3);
  for (int round = 0; round < 2; ++round) {
    auto sink = Finish(spec);
    ASSERT_TRUE(sink->done().has_value()) << sink->error();
    EXPECT_EQ(P(0)->calls(), 1) << round;
    EXPECT_EQ(D(0)->local_prefills(), round) << round;
  }
  spec.cache_salt = 9;  // another namespace: nothing cached
  auto salted = Finish(spec);
  EXPECT_EQ(P(0)->calls(), 2);
  ExpectAtRest();
}

// A request whose first token ended it never reached its decode worker, which then does
// not hold its prompt: the same prompt again still goes to a prefill worker.
TEST_F(RouterRequestTest, APromptNeverDecodedIsNotCountedAsCachedOnTheDecodeWorker) {
  RouterOptions o;
  o.disagg_min_tokens = 10;
  Make(1, 1, o, [](FakeWorkers& f) {
    f.prefill("10.0.0.1:100")->Set({.first_token = 2, .finish = engine::FinishReason::kStop});
  });
  RequestSpec spec = SpecOfLength(40, 3);
  for (int round = 0; round < 2; ++round) {
    auto sink = Finish(spec);
    ASSERT_TRUE(sink->done().has_value()) << sink->error();
    EXPECT_EQ(sink->tokens(), (std::vector<int32_t>{2})) << round;
  }
  EXPECT_EQ(P(0)->calls(), 2);
  EXPECT_EQ(D(0)->local_prefills(), 0);
  EXPECT_EQ(D(0)->streams(), 0);
  ExpectAtRest();
}

// A decode worker that fails a local prefill before its first token (its stream
// broke: the worker is gone) costs the client nothing: the request starts again on
// another decode worker, and the first is marked unhealthy.
TEST_F(RouterRequestTest, ALocalPrefillThatBreaksBeforeItsFirstTokenStartsAgainElsewhere) {
  RouterOptions o;
  o.disagg_min_tokens = 1000;
  Make(1, 2, o, [](FakeWorkers& f) {
    // Worker 0 is tried first (more free blocks), and breaks at once.
    f.decode("10.0.0.2:100")->Set({.first_token = 5, .break_after = 0, .num_blocks = 2048});
    f.decode("10.0.0.2:101")->Set({.first_token = 6});
  });
  auto sink = Finish(Spec(3));
  ASSERT_TRUE(sink->done().has_value()) << sink->error();
  EXPECT_EQ(sink->tokens(), (std::vector<int32_t>{6, 1000, 1001}));
  EXPECT_EQ(D(0)->local_prefills(), 1);
  EXPECT_EQ(D(1)->local_prefills(), 1);
  EXPECT_EQ(P(0)->calls(), 0);
  const auto decode = pool_->Snapshot(WorkerRole::kDecode);
  ASSERT_EQ(decode.size(), 2u);
  EXPECT_FALSE(decode[0].healthy);
  ExpectAtRest();
}

// Cancelled while its decode worker prefills it: the stream is cancelled, the request
// ends CANCELLED, nothing is held.
TEST_F(RouterRequestTest, CancelWhilePrefillingOnTheDecodeWorker) {
  RouterOptions o;
  o.disagg_min_tokens = 1000;
  Make(1, 1, o, [](FakeWorkers& f) { f.decode("10.0.0.2:100")->Set({.stall = true}); });
  auto sink = std::make_shared<Collect>();
  auto r = Submit(Spec(3), sink);
  ASSERT_TRUE(Eventually([&] { return D(0)->live_streams() == 1; }));
  EXPECT_EQ(r->state(), RequestState::kPrefilling);
  router_->Cancel(r);
  ASSERT_TRUE(sink->Wait());
  EXPECT_EQ(sink->error().code(), absl::StatusCode::kCancelled) << sink->error();
  EXPECT_EQ(D(0)->cancels(), 1);
  ExpectAtRest();
}

TEST_F(RouterRequestTest, AStreamBrokenMidwayFailsMarksTheWorkerAndReleases) {
  Make(1, 1, {}, [](FakeWorkers& f) { f.decode("10.0.0.2:100")->Set({.break_after = 2}); });
  auto sink = Finish(Spec(10));
  EXPECT_EQ(sink->error().code(), absl::StatusCode::kUnavailable) << sink->error();
  EXPECT_EQ(sink->tokens().size(), 3u);  // the first token and two chunks got through
  EXPECT_EQ(D(0)->releases(), 1);
  const auto decode = pool_->Snapshot(WorkerRole::kDecode);
  ASSERT_EQ(decode.size(), 1u);
  EXPECT_FALSE(decode[0].healthy);
  ExpectAtRest();
}

TEST_F(RouterRequestTest, AStopStringCancelsTheStream) {
  const std::vector<int32_t> ids = *tok_->Encode(" one two three four five six seven");
  ASSERT_GE(ids.size(), 6u);
  Make(1, 1, {}, [&](FakeWorkers& f) {
    f.prefill("10.0.0.1:100")->Set({.first_token = ids[0]});
    f.decode("10.0.0.2:100")->Set({.tokens = {ids.begin() + 1, ids.end()}});
  });
  auto sink = std::make_shared<Collect>();
  RequestSpec spec = Spec(50);
  spec.stop = {" three"};
  Submit(spec, sink);
  ASSERT_TRUE(sink->Wait());
  ASSERT_TRUE(sink->done().has_value()) << sink->error();
  EXPECT_EQ(sink->text(), " one two");
  EXPECT_EQ(sink->done()->reason, engine::FinishReason::kStop);
  EXPECT_EQ(sink->done()->stop_reason, " three");
  EXPECT_EQ(D(0)->cancels(), 1);
  ExpectAtRest();
}

TEST_F(RouterRequestTest, AFirstTokenThatEndsItNeedsNoDecode) {
  Make(1, 1, {}, [](FakeWorkers& f) {
    f.prefill("10.0.0.1:100")->Set({.first_token = 2, .finish = engine::FinishReason::kStop});
  });
  auto sink = Finish(Spec());
  ASSERT_TRUE(sink->done().has_value()) << sink->error();
  EXPECT_EQ(sink->done()->reason, engine::FinishReason::kStop);
  EXPECT_EQ(sink->text(), "");  // end-of-sequence shows no text
  EXPECT_EQ(D(0)->streams(), 0);
  EXPECT_EQ(D(0)->releases(), 1);
  ExpectAtRest();
}

TEST_F(RouterRequestTest, CancelWhileQueued) {
  Make(1, 1, {}, [](FakeWorkers& f) {
    f.decode("10.0.0.2:100")->Set({.reserve = FakeDecodeBehaviour::kExhausted});
  });
  auto sink = std::make_shared<Collect>();
  auto r = Submit(Spec(), sink);
  ASSERT_TRUE(Eventually([&] { return D(0)->reserves() >= 2; }));  // tried, still queued
  EXPECT_TRUE(Eventually([&] { return r->state() == RequestState::kQueued; }));
  router_->Cancel(r);
  ASSERT_TRUE(sink->Wait());
  EXPECT_EQ(sink->error().code(), absl::StatusCode::kCancelled) << sink->error();
  EXPECT_EQ(r->state(), RequestState::kCancelled);
  EXPECT_EQ(router_->Stats().queued_requests, 0);
  EXPECT_EQ(P(0)->calls(), 0);
  ExpectAtRest();
}

TEST_F(RouterRequestTest, DeadlineWhileQueued) {
  Make(1, 1, {}, [](FakeWorkers& f) {
    f.decode("10.0.0.2:100")->Set({.reserve = FakeDecodeBehaviour::kExhausted});
  });
  auto sink = std::make_shared<Collect>();
  auto r = Submit(Spec(), sink, std::chrono::system_clock::now() + 100ms);
  ASSERT_TRUE(sink->Wait());
  EXPECT_EQ(sink->error().code(), absl::StatusCode::kDeadlineExceeded) << sink->error();
  EXPECT_EQ(r->state(), RequestState::kFailed);
  ExpectAtRest();
}

TEST_F(RouterRequestTest, CancelWhilePrefillingReleasesTheReservation) {
  Make(1, 1, {}, [](FakeWorkers& f) {
    f.prefill("10.0.0.1:100")->Set({.kind = FakePrefillBehaviour::kStall});
  });
  auto sink = std::make_shared<Collect>();
  auto r = Submit(Spec(), sink);
  ASSERT_TRUE(Eventually([&] { return r->state() == RequestState::kPrefilling; }));
  router_->Cancel(r);
  ASSERT_TRUE(sink->Wait());
  EXPECT_EQ(sink->error().code(), absl::StatusCode::kCancelled) << sink->error();
  EXPECT_EQ(P(0)->cancels(), 1);
  EXPECT_EQ(D(0)->releases(), 1);
  ExpectAtRest();
}

TEST_F(RouterRequestTest, DeadlineWhilePrefilling) {
  Make(1, 1, {}, [](FakeWorkers& f) {
    f.prefill("10.0.0.1:100")->Set({.kind = FakePrefillBehaviour::kStall});
  });
  auto sink = std::make_shared<Collect>();
  Submit(Spec(), sink, std::chrono::system_clock::now() + 200ms);
  ASSERT_TRUE(sink->Wait());
  EXPECT_EQ(sink->error().code(), absl::StatusCode::kDeadlineExceeded) << sink->error();
  EXPECT_EQ(D(0)->releases(), 1);
  ExpectAtRest();
}

TEST_F(RouterRequestTest, ALateAnswerAfterCancelStillEndsCancelledWithoutDecoding) {
  Make(1, 1, {}, [](FakeWorkers& f) {
    f.prefill("10.0.0.1:100")->Set({.delay = 300ms, .ignore_cancel = true});
  });
  auto sink = std::make_shared<Collect>();
  auto r = Submit(Spec(), sink);
  ASSERT_TRUE(Eventually([&] { return r->state() == RequestState::kPrefilling; }));
  EXPECT_TRUE(router_->Abort(r->id()));
  EXPECT_FALSE(router_->Abort(r->id()));  // already cancelled
  ASSERT_TRUE(sink->Wait());
  EXPECT_EQ(sink->error().code(), absl::StatusCode::kCancelled) << sink->error();
  EXPECT_EQ(sink->tokens().size(), 0u);
  EXPECT_EQ(D(0)->streams(), 0);
  EXPECT_EQ(D(0)->releases(), 1);
  ExpectAtRest();
}

TEST_F(RouterRequestTest, CancelWhileDecodingCancelsTheStream) {
  Make(1, 1, {}, [](FakeWorkers& f) { f.decode("10.0.0.2:100")->Set({.stall = true}); });
  auto sink = std::make_shared<Collect>();
  auto r = Submit(Spec(), sink);
  ASSERT_TRUE(Eventually([&] { return D(0)->live_streams() == 1; }));
  EXPECT_EQ(r->state(), RequestState::kDecoding);
  router_->Cancel(r);
  ASSERT_TRUE(sink->Wait());
  EXPECT_EQ(sink->error().code(), absl::StatusCode::kCancelled) << sink->error();
  EXPECT_EQ(D(0)->cancels(), 1);
  EXPECT_EQ(r->state(), RequestState::kCancelled);
  ExpectAtRest();
}

TEST_F(RouterRequestTest, AnUnreachableDecodeWorkerIsMarkedAndTheNextTaken) {
  Make(1, 2, {}, [](FakeWorkers& f) {
    f.decode("10.0.0.2:100")->Set({.reserve = FakeDecodeBehaviour::kUnavailable});
  });
  auto sink = Finish(Spec(3));
  ASSERT_TRUE(sink->done().has_value()) << sink->error();
  EXPECT_EQ(D(1)->streams(), 1);
  for (const WorkerSnapshot& w : pool_->Snapshot(WorkerRole::kDecode)) {
    EXPECT_EQ(w.healthy, w.address != "10.0.0.2:100") << w.address;
  }
  ExpectAtRest();
}

// The first decode worker is busy: it reserves, but answers past the deadline.
TEST_F(RouterRequestTest, AReserveWithoutAnswerTimesOutAndTheNextIsTakenThenFirst) {
  Make(1, 2, {}, [](FakeWorkers& f) {
    f.decode("10.0.0.2:100")->Set({.reserve = FakeDecodeBehaviour::kReserveLate});
  });
  auto sink = std::make_shared<Collect>();
  Submit(Spec(3), sink);
  ASSERT_TRUE(sink->Wait(10000ms));  // the dispatcher waits out the 2 s Reserve deadline
  ASSERT_TRUE(sink->done().has_value()) << sink->error();
  EXPECT_EQ(D(1)->streams(), 1);
  // Busy is not dead: both stay healthy, and the slow one is now tried last, so the
  // next request does not wait for it.
  for (const WorkerSnapshot& w : pool_->Snapshot(WorkerRole::kDecode)) {
    EXPECT_TRUE(w.healthy) << w.address;
  }
  const int stalled_reserves = D(0)->reserves();
  auto second = std::make_shared<Collect>();
  const auto t0 = std::chrono::steady_clock::now();
  Submit(Spec(3), second);
  ASSERT_TRUE(second->Wait(10000ms));
  ASSERT_TRUE(second->done().has_value()) << second->error();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 1500ms);
  EXPECT_EQ(D(0)->reserves(), stalled_reserves);
  EXPECT_EQ(D(1)->streams(), 2);
  // The reservation it made without answering was abandoned by its key at once (not
  // left to its lease): ExpectAtRest finds no lease outstanding.
  EXPECT_EQ(D(0)->abandons(), stalled_reserves);
  EXPECT_EQ(D(0)->releases(), 0);
  ExpectAtRest();
}

// The only decode worker is too busy to answer Reserve in time: requests wait in the
// queue (never "no healthy decode worker") until it answers, their deadline passes or
// their client goes.
TEST_F(RouterRequestTest, ABusyOnlyDecodeWorkerKeepsRequestsQueued) {
  Make(1, 1, {}, [](FakeWorkers& f) {
    f.decode("10.0.0.2:100")->Set({.reserve = FakeDecodeBehaviour::kStall});
  });
  auto sink = std::make_shared<Collect>();
  auto r = Submit(Spec(3), sink);
  EXPECT_FALSE(sink->Wait(4500ms));  // two Reserve deadlines went by, still queued
  EXPECT_TRUE(pool_->Snapshot(WorkerRole::kDecode)[0].healthy);
  D(0)->Set({});  // it answers again
  ASSERT_TRUE(sink->Wait(10000ms));
  ASSERT_TRUE(sink->done().has_value()) << sink->error();
  EXPECT_EQ(sink->tokens().size(), 3u);
  ExpectAtRest();
}

TEST_F(RouterRequestTest, AnEndedRequestLetsGoOfItsSink) {
  // A sink may hold what holds the request (an HTTP call holds its router requests):
  // the request must drop its sink when it ends, or the pair is never freed.
  Make(1, 1);
  auto sink = std::make_shared<Collect>();
  auto r = Submit(Spec(3), sink);
  ASSERT_TRUE(sink->Wait());
  EXPECT_TRUE(Eventually([&] { return sink.use_count() == 1; })) << sink.use_count();
  ExpectAtRest();
}

TEST_F(RouterRequestTest, NoHealthyDecodeWorkerFailsAtOnce) {
  Make(1, 1, {}, [](FakeWorkers& f) { f.decode("10.0.0.2:100")->SetHealthy(false); });
  auto sink = Finish(Spec());
  EXPECT_EQ(sink->error().code(), absl::StatusCode::kUnavailable) << sink->error();
}

TEST_F(RouterRequestTest, ShutdownEndsEveryRequest) {
  Make(1, 1, {}, [](FakeWorkers& f) { f.decode("10.0.0.2:100")->Set({.stall = true}); });
  std::vector<std::shared_ptr<Collect>> sinks;
  for (int i = 0; i < 3; ++i) {
    sinks.push_back(std::make_shared<Collect>());
    Submit(Spec(), sinks.back());
  }
  ASSERT_TRUE(Eventually([&] { return D(0)->live_streams() == 3; }));
  router_.reset();  // returns once every request has ended
  for (auto& s : sinks) {
    ASSERT_TRUE(s->ended());
    EXPECT_EQ(s->error().code(), absl::StatusCode::kCancelled) << s->error();
  }
}

TEST_F(RouterRequestTest, ThousandsOfConcurrentStreamsAddNoThread) {
  RouterOptions o;
  o.queue.max_requests = 4000;
  o.max_prefill_tokens_in_flight = 1 << 30;
  Make(1, 1, o, [](FakeWorkers& f) {
    // Each stream lasts 20 × 50 ms: long enough that all 2,000 overlap even when
    // submitting them is slow (ASan, a loaded machine).
    f.decode("10.0.0.2:100")->Set({.interval = 50ms, .num_blocks = 1 << 20});
  });
  const int before = ThreadCount();
  constexpr int kStreams = 2000;
  std::vector<std::shared_ptr<Collect>> sinks;
  for (int i = 0; i < kStreams; ++i) {
    sinks.push_back(std::make_shared<Collect>());
    Submit(Spec(20), sinks.back());
  }
  int most = 0, most_live = 0;
  for (int i = 0; i < 300 && !sinks.back()->ended(); ++i) {
    most = std::max(most, ThreadCount());
    most_live = std::max(most_live, D(0)->live_streams());
    std::this_thread::sleep_for(10ms);
  }
  for (auto& s : sinks) {
    ASSERT_TRUE(s->Wait(20000ms));
    ASSERT_TRUE(s->done().has_value()) << s->error();
    EXPECT_EQ(s->done()->completion_tokens, 20);
  }
  EXPECT_GT(most_live, kStreams / 2);  // they really were concurrent
  EXPECT_EQ(most, before);             // and took no thread each
  ExpectAtRest();
}

}  // namespace
}  // namespace tandem::router

namespace tandem::router {
namespace {

// The queue's order: lowest priority value first, arrival order among equals; an entry
// put back goes first; one that has waited max_priority_wait goes before all that have
// not, whatever their priority.
TEST(AdmissionQueue, PriorityOrderWithABoundOnWaiting) {
  struct Item {
    int id;
  };
  AdmissionQueue<Item> q({.max_requests = 16,
                          .max_tokens = 1000,
                          .max_priority_wait = std::chrono::milliseconds(300)});
  auto item = [](int id) { return std::make_shared<Item>(Item{id}); };
  std::vector<std::shared_ptr<Item>> items;
  for (int id : {0, 1, 2, 3, 4}) items.push_back(item(id));
  ASSERT_TRUE(q.Push(items[0], 1, 10).ok());
  ASSERT_TRUE(q.Push(items[1], 1, 10).ok());
  ASSERT_TRUE(q.Push(items[2], 1, -5).ok());
  ASSERT_TRUE(q.Push(items[3], 1, 0).ok());
  std::vector<int> order;
  auto drain = [&] {
    order.clear();
    while (auto f = q.Front(std::chrono::milliseconds(0))) {
      order.push_back(f->id);
      q.PopFront(f);
    }
  };
  drain();
  EXPECT_EQ(order, (std::vector<int>{2, 3, 0, 1}));
  ASSERT_TRUE(q.Push(items[0], 1, 10).ok());
  ASSERT_TRUE(q.Push(items[1], 1, -5).ok());
  q.PushFront(items[4], 1);  // put back: first
  drain();
  EXPECT_EQ(order, (std::vector<int>{4, 1, 0}));
  // Waited past the bound: ahead of newer higher-priority entries.
  ASSERT_TRUE(q.Push(items[0], 1, 10).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(350));
  ASSERT_TRUE(q.Push(items[1], 1, -5).ok());
  ASSERT_TRUE(q.Push(items[2], 1, -7).ok());
  drain();
  EXPECT_EQ(order, (std::vector<int>{0, 2, 1}));
}

// The decode pool's KV as a gateway reads it: blocks held by sequences over the healthy
// workers' blocks (cached blocks are free), workers that are down or have not reported
// left out.
// A KV layout as a worker reports it (GetWorkerStats.kv_layout).
std::string Layout(int32_t block_size) {
  v1::KvLayoutFingerprint f;
  f.set_model_hash("0123abcd");
  f.set_block_size(block_size);
  return f.SerializeAsString();
}

// Issue #41: workers whose KV layouts match no worker of the other role are unpaired:
// they get no work, each says why naming the other worker, and the pair that matches
// serves every request.
TEST_F(RouterRequestTest, UnpairedWorkersGetNoWorkAndThePairThatMatchesServes) {
  Make(2, 2, {}, [](FakeWorkers& f) {
    f.prefill("10.0.0.1:100")->Set({.kv_layout = Layout(16)});
    f.prefill("10.0.0.1:101")->Set({.kv_layout = Layout(32)});
    f.decode("10.0.0.2:100")->Set({.kv_layout = Layout(64)});
    f.decode("10.0.0.2:101")->Set({.kv_layout = Layout(32)});
  });
  EXPECT_TRUE(pool_->Ready());
  EXPECT_EQ(pool_->NotReadyReason(), "");
  const auto prefill = pool_->Snapshot(WorkerRole::kPrefill);
  const auto decode = pool_->Snapshot(WorkerRole::kDecode);
  ASSERT_EQ(prefill.size(), 2u);
  ASSERT_EQ(decode.size(), 2u);
  EXPECT_THAT(
      prefill[0].unpaired,
      AllOf(HasSubstr("10.0.0.2:100"),
            HasSubstr("block_size is 16 on the prefill worker and 64 on the decode worker")));
  EXPECT_EQ(prefill[1].unpaired, "");
  EXPECT_THAT(decode[0].unpaired, AllOf(HasSubstr("10.0.0.1:100"), HasSubstr("block_size")));
  EXPECT_EQ(decode[1].unpaired, "");
  EXPECT_TRUE(prefill[0].healthy && decode[0].healthy);  // healthy, only unpaired
  constexpr int kRequests = 6;
  std::vector<std::shared_ptr<Collect>> sinks;
  for (int i = 0; i < kRequests; ++i) {
    sinks.push_back(std::make_shared<Collect>());
    Submit(Spec(3), sinks.back());
  }
  for (auto& sink : sinks) {
    ASSERT_TRUE(sink->Wait());
    EXPECT_TRUE(sink->done().has_value()) << sink->error();
  }
  EXPECT_EQ(P(0)->calls(), 0);
  EXPECT_EQ(P(1)->calls(), kRequests);
  EXPECT_EQ(D(0)->reserves(), 0);
  EXPECT_EQ(D(1)->streams(), kRequests);
  ExpectAtRest();
}

// With no pair that matches, the pool is not ready and says why (naming the field, no
// address: /health is public); a request fails UNAVAILABLE with that reason and
// reserves nothing.
TEST_F(RouterRequestTest, NoMatchingPairIsNotReadyAndSaysWhy) {
  Make(1, 1, {}, [](FakeWorkers& f) {
    f.prefill("10.0.0.1:100")->Set({.kv_layout = Layout(16)});
    f.decode("10.0.0.2:100")->Set({.kv_layout = Layout(32)});
  });
  EXPECT_FALSE(pool_->Ready());
  EXPECT_EQ(pool_->NotReadyReason(),
            "no prefill worker pairs with a decode worker: KV layout mismatch: block_size is 16 "
            "on the prefill worker and 32 on the decode worker");
  auto sink = Finish(Spec(3));
  EXPECT_EQ(sink->error().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(sink->error().message()), HasSubstr("block_size is 16"));
  EXPECT_EQ(D(0)->reserves(), 0);
  EXPECT_EQ(P(0)->calls(), 0);
  ExpectAtRest();
}

// A worker that reports no layout (an older worker) pairs with any.
TEST_F(RouterRequestTest, AWorkerWithoutALayoutPairsWithAny) {
  Make(1, 1, {}, [](FakeWorkers& f) { f.decode("10.0.0.2:100")->Set({.kv_layout = Layout(32)}); });
  EXPECT_TRUE(pool_->Ready());
  auto sink = Finish(Spec(3));
  EXPECT_TRUE(sink->done().has_value()) << sink->error();
  ExpectAtRest();
}

TEST(PoolKv, SumsTheHealthyDecodeWorkers) {
  std::vector<WorkerSnapshot> w = {
      {"a", true, 1, {.num_blocks = 100, .block_size = 16, .free_blocks = 50, .cached_blocks = 10}},
      {"b", true, 0, {.num_blocks = 300, .block_size = 16, .free_blocks = 300, .cached_blocks = 0}},
      {"c", false, 0, {.num_blocks = 100, .block_size = 16, .free_blocks = 0, .cached_blocks = 0}},
      {"d", true, 0, {}}};
  const PoolKv kv = SummarizePoolKv(w);
  EXPECT_EQ(kv.num_blocks, 400);
  EXPECT_EQ(kv.block_size, 16);
  EXPECT_DOUBLE_EQ(kv.usage, 40.0 / 400);
  EXPECT_EQ(SummarizePoolKv({}).usage, 1);  // no healthy worker: full
  EXPECT_EQ(SummarizePoolKv({}).num_blocks, 0);
}

}  // namespace
}  // namespace tandem::router
