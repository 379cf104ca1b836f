// EngineThread: the one thread that drives an engine in a server process, and the
// queue through which other threads reach it.
//
// The loop: run every queued command (in order), then `iterate()` (one engine step
// and its bookkeeping). When `iterate` reports no more work and no command is queued,
// the thread sleeps until a command arrives or `idle_wait` passes. So a command
// always runs at a step boundary, never during a forward pass.
//
// Thread-safe: Post / Run from any thread except the engine thread itself (Run from
// it would deadlock). Stop runs what is still queued, then joins.
#ifndef TANDEM_COMMON_ENGINE_ENGINE_THREAD_H_
#define TANDEM_COMMON_ENGINE_ENGINE_THREAD_H_

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <mutex>
#include <thread>

#include "absl/base/thread_annotations.h"

namespace tandem::engine {

class EngineThread {
 public:
  EngineThread(std::function<bool()> iterate, std::chrono::milliseconds idle_wait)
      : iterate_(std::move(iterate)), idle_wait_(idle_wait), thread_([this] { Loop(); }) {}
  ~EngineThread() { Stop(); }

  void Post(std::function<void()> fn) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      commands_.push_back(std::move(fn));
    }
    cv_.notify_one();
  }

  // Runs `fn` on the engine thread at the next step boundary and waits for it.
  void Run(const std::function<void()>& fn) {
    std::promise<void> done;
    Post([&] {
      fn();
      done.set_value();
    });
    done.get_future().wait();
  }

  void Stop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stop_) return;
      stop_ = true;
    }
    cv_.notify_one();
    thread_.join();
  }

 private:
  void Loop() {
    bool busy = false;
    for (;;) {
      std::deque<std::function<void()>> commands;
      {
        std::unique_lock<std::mutex> lock(mu_);
        if (!busy) cv_.wait_for(lock, idle_wait_, [&] { return stop_ || !commands_.empty(); });
        commands.swap(commands_);
        if (stop_) {
          lock.unlock();
          for (auto& c : commands) c();
          return;
        }
      }
      for (auto& c : commands) c();
      busy = iterate_();
    }
  }

  std::function<bool()> iterate_;
  const std::chrono::milliseconds idle_wait_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> commands_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;  // last: starts once everything above exists
};

}  // namespace tandem::engine

#endif  // TANDEM_COMMON_ENGINE_ENGINE_THREAD_H_
