#include "common/http/connection_pool.h"

namespace tandem::http {

namespace {
constexpr int kRejectors = 2;
thread_local bool rejecting = false;
}  // namespace

ConnectionPool::ConnectionPool(int threads, int max_waiting)
    : threads_(threads), max_waiting_(max_waiting) {
  for (int i = 0; i < threads_; ++i) workers_.emplace_back([this] { Serve(); });
  for (int i = 0; i < kRejectors; ++i) workers_.emplace_back([this] { Reject(); });
}

ConnectionPool::~ConnectionPool() { shutdown(); }

bool ConnectionPool::Rejecting() { return rejecting; }

void ConnectionPool::enqueue(std::function<void()> fn) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (busy_ + static_cast<int>(jobs_.size()) < threads_ + max_waiting_) {
      jobs_.push_back(std::move(fn));
    } else {
      rejected_.push_back(std::move(fn));
    }
  }
  cv_.notify_all();
}

void ConnectionPool::shutdown() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_) return;
    stop_ = true;
  }
  cv_.notify_all();
  for (std::thread& t : workers_) t.join();
}

void ConnectionPool::Serve() {
  for (;;) {
    std::function<void()> fn;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !jobs_.empty(); });
      if (jobs_.empty()) return;  // stopping, nothing left
      fn = std::move(jobs_.front());
      jobs_.pop_front();
      ++busy_;
    }
    fn();
    std::lock_guard<std::mutex> lock(mu_);
    --busy_;
  }
}

void ConnectionPool::Reject() {
  rejecting = true;
  for (;;) {
    std::function<void()> fn;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !rejected_.empty(); });
      if (rejected_.empty()) return;
      fn = std::move(rejected_.front());
      rejected_.pop_front();
    }
    fn();
  }
}

}  // namespace tandem::http
