// StreamOutbox under concurrent producers, without gRPC: a fake reactor stands in for
// gRPC's (its writes complete on a "network" thread after a random pause, or inline, as
// gRPC may), so the whole protocol runs on threads TSan sees (scripts/sanitize.sh).
//
// Checked: at most one write in flight and none after Finish; Finish exactly once;
// after an OK end every message arrives, each producer's in its order, merged or not;
// an error end drops what is queued and finishes at once; a failed write ends the
// stream CANCELLED; the first End wins; producers that outlive the finish never reach
// the reactor.
#include "common/rpc/stream_outbox.h"

#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <random>
#include <thread>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace tandem::rpc {
namespace {

// One message: (producer, seq) items; merging appends.
struct Msg {
  std::vector<std::pair<int, int>> items;
};

class FakeReactor {
 public:
  using Outbox = StreamOutbox<Msg, FakeReactor>;

  // fail_write: the 1-based index of the write that fails (0: none).
  explicit FakeReactor(uint32_t seed, int fail_write = 0)
      : rng_(seed), fail_write_(fail_write), network_([this] { Network(); }) {}
  ~FakeReactor() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    network_.join();
  }
  void Attach(Outbox* outbox) { outbox_ = outbox; }

  // gRPC's contract, checked: one write at a time, nothing after Finish. The message
  // is read when the write completes (gRPC owns it until then).
  void StartWrite(const Msg* msg) {
    if (writing_.exchange(true)) violations_++;
    if (finished_.load()) violations_++;
    bool inline_done = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++writes_;
      inline_done = std::uniform_int_distribution<int>(0, 3)(rng_) == 0;
      if (!inline_done) {
        pending_.push_back(msg);
        cv_.notify_all();
        return;
      }
    }
    Complete(msg);
  }
  // The status is stored before `finished_` is set, under the lock AwaitFinish waits
  // with: set first, a waiter could wake on `finished_` and read the status not yet
  // stored (OK), which failed this test now and then under load.
  void Finish(const grpc::Status& status) {
    if (writing_.load()) violations_++;
    std::lock_guard<std::mutex> lock(mu_);
    status_ = status;
    if (finished_.exchange(true)) violations_++;
    done_cv_.notify_all();
  }

  // Waits for Finish; its status.
  grpc::Status AwaitFinish() {
    std::unique_lock<std::mutex> lock(mu_);
    EXPECT_TRUE(done_cv_.wait_for(lock, std::chrono::seconds(60), [&] { return finished_.load(); }))
        << "Finish never came";
    return status_;
  }
  std::vector<std::pair<int, int>> delivered() {
    std::lock_guard<std::mutex> lock(mu_);
    return delivered_;
  }
  int violations() const { return violations_.load(); }
  int writes() {
    std::lock_guard<std::mutex> lock(mu_);
    return writes_;
  }

 private:
  void Network() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      cv_.wait(lock, [&] { return stop_ || !pending_.empty(); });
      if (pending_.empty()) return;
      const Msg* msg = pending_.front();
      pending_.pop_front();
      const int pause_us = std::uniform_int_distribution<int>(0, 50)(rng_);
      lock.unlock();
      std::this_thread::sleep_for(std::chrono::microseconds(pause_us));
      Complete(msg);
      lock.lock();
    }
  }
  void Complete(const Msg* msg) {
    bool ok = true;
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++completed_;
      ok = completed_ != fail_write_;
      if (ok) delivered_.insert(delivered_.end(), msg->items.begin(), msg->items.end());
    }
    writing_ = false;
    outbox_->WriteDone(ok);
  }

  std::mutex mu_;
  std::condition_variable cv_, done_cv_;
  std::mt19937 rng_;
  const int fail_write_;
  std::deque<const Msg*> pending_;
  std::vector<std::pair<int, int>> delivered_;
  grpc::Status status_;
  int writes_ = 0, completed_ = 0;
  bool stop_ = false;
  std::atomic<bool> writing_{false}, finished_{false};
  std::atomic<int> violations_{0};
  Outbox* outbox_ = nullptr;
  std::thread network_;
};

bool Append(Msg* into, const Msg& next) {
  if (into->items.size() >= 16) return false;
  into->items.insert(into->items.end(), next.items.begin(), next.items.end());
  return true;
}

// Producers push `per_producer` messages each, concurrently.
void Produce(FakeReactor::Outbox& outbox, int producers, int per_producer) {
  std::vector<std::thread> threads;
  for (int p = 0; p < producers; ++p) {
    threads.emplace_back([&outbox, p, per_producer] {
      for (int i = 0; i < per_producer; ++i) outbox.Push(Msg{{{p, i}}});
    });
  }
  for (auto& t : threads) t.join();
}

// Each producer's items appear in order, and (complete) all of them.
void ExpectInOrder(const std::vector<std::pair<int, int>>& got, int producers, int per_producer,
                   bool complete) {
  std::vector<int> next(producers, 0);
  for (auto [p, i] : got) {
    ASSERT_GE(p, 0);
    ASSERT_LT(p, producers);
    ASSERT_EQ(i, next[p]) << "producer " << p << " out of order";
    ++next[p];
  }
  if (complete) {
    for (int p = 0; p < producers; ++p) {
      EXPECT_EQ(next[p], per_producer) << "producer " << p;
    }
  }
}

class StreamOutboxTest : public ::testing::TestWithParam<bool> {
 protected:
  FakeReactor::Outbox::MergeFn Merge() const {
    return GetParam() ? FakeReactor::Outbox::MergeFn(&Append) : nullptr;
  }
};

TEST_P(StreamOutboxTest, AnOkEndDeliversEveryMessageInEachProducersOrder) {
  constexpr int kProducers = 8, kEach = 400;
  for (uint32_t seed = 1; seed <= 4; ++seed) {
    FakeReactor reactor(seed);
    FakeReactor::Outbox outbox(&reactor, Merge());
    reactor.Attach(&outbox);
    Produce(outbox, kProducers, kEach);
    outbox.End(grpc::Status::OK);
    EXPECT_TRUE(reactor.AwaitFinish().ok());
    ExpectInOrder(reactor.delivered(), kProducers, kEach, /*complete=*/true);
    EXPECT_EQ(reactor.violations(), 0);
    if (!GetParam()) {
      EXPECT_EQ(reactor.writes(), kProducers * kEach);
    }
  }
}

// End races the producers and a second End: the first End wins; an error drops the
// queue, so what arrived is a prefix of each producer's messages.
TEST_P(StreamOutboxTest, TheFirstEndWinsAndAnErrorDropsTheQueue) {
  constexpr int kProducers = 4, kEach = 300;
  for (uint32_t seed = 1; seed <= 8; ++seed) {
    FakeReactor reactor(seed);
    FakeReactor::Outbox outbox(&reactor, Merge());
    reactor.Attach(&outbox);
    std::thread ender([&] {
      std::this_thread::sleep_for(std::chrono::microseconds(200 * seed));
      outbox.End(grpc::Status(grpc::StatusCode::UNAVAILABLE, "worker gone"));
    });
    std::thread second([&] {
      std::this_thread::sleep_for(std::chrono::microseconds(150 * seed));
      outbox.End(grpc::Status(grpc::StatusCode::INTERNAL, "late"));
    });
    Produce(outbox, kProducers, kEach);
    ender.join();
    second.join();
    const grpc::Status st = reactor.AwaitFinish();
    EXPECT_TRUE(st.error_code() == grpc::StatusCode::UNAVAILABLE ||
                st.error_code() == grpc::StatusCode::INTERNAL)
        << st.error_message();
    ExpectInOrder(reactor.delivered(), kProducers, kEach, /*complete=*/false);
    // Producers after the finish: dropped, the reactor untouched.
    const int writes = reactor.writes();
    outbox.Push(Msg{{{0, kEach}}});
    outbox.End(grpc::Status::OK);
    EXPECT_EQ(reactor.writes(), writes);
    EXPECT_EQ(reactor.violations(), 0);
  }
}

TEST_P(StreamOutboxTest, AFailedWriteEndsTheStreamCancelled) {
  constexpr int kProducers = 4, kEach = 200;
  FakeReactor reactor(3, /*fail_write=*/10);
  FakeReactor::Outbox outbox(&reactor, Merge());
  reactor.Attach(&outbox);
  Produce(outbox, kProducers, kEach);
  const grpc::Status st = reactor.AwaitFinish();
  EXPECT_EQ(st.error_code(), grpc::StatusCode::CANCELLED) << st.error_message();
  EXPECT_EQ(reactor.writes(), 10) << "a write started after the client went away";
  ExpectInOrder(reactor.delivered(), kProducers, kEach, /*complete=*/false);
  outbox.End(grpc::Status::OK);  // too late: the stream has ended
  EXPECT_EQ(reactor.violations(), 0);
}

INSTANTIATE_TEST_SUITE_P(MergedOrNot, StreamOutboxTest, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "Merged" : "Unmerged"; });

}  // namespace
}  // namespace tandem::rpc
