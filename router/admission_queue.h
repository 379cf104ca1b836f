// AdmissionQueue: the router's bounded FIFO of requests waiting for decode memory.
//
// Bounded twice — requests and prompt tokens; Push past either limit fails at once
// with ResourceExhausted (the client should back off), never blocks. Entries leave in
// order (Front/PopFront) or, when cancelled or past their deadline, from anywhere
// (RemoveIf).
//
// Thread-safe.
#ifndef TANDEM_ROUTER_ADMISSION_QUEUE_H_
#define TANDEM_ROUTER_ADMISSION_QUEUE_H_

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "common/util/strings.h"

namespace tandem::router {

struct QueueLimits {
  int32_t max_requests = 256;
  int64_t max_tokens = 1 << 20;
};

template <class T>
class AdmissionQueue {
 public:
  explicit AdmissionQueue(QueueLimits limits) : limits_(limits) {}

  absl::Status Push(std::shared_ptr<T> item, int64_t tokens) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (static_cast<int32_t>(items_.size()) >= limits_.max_requests) {
        return absl::ResourceExhaustedError(StrCat("admission queue full: ", items_.size(),
                                                   " requests waiting (limit ",
                                                   limits_.max_requests, "); retry later"));
      }
      if (tokens_ + tokens > limits_.max_tokens) {
        return absl::ResourceExhaustedError(StrCat("admission queue full: ", tokens_,
                                                   " prompt tokens waiting (limit ",
                                                   limits_.max_tokens, "); retry later"));
      }
      items_.push_back({std::move(item), tokens});
      tokens_ += tokens;
    }
    cv_.notify_all();
    return absl::OkStatus();
  }

  // The oldest entry, waiting up to `wait` for one; null if none.
  std::shared_ptr<T> Front(std::chrono::milliseconds wait) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, wait, [&] { return !items_.empty() || woken_; });
    woken_ = false;
    return items_.empty() ? nullptr : items_.front().item;
  }

  // Removes `item` if it is still the oldest entry.
  void PopFront(const std::shared_ptr<T>& item) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!items_.empty() && items_.front().item == item) {
      tokens_ -= items_.front().tokens;
      items_.pop_front();
    }
  }

  // Removes every entry for which `pred` is true and hands each to `removed`
  // (outside the lock).
  void RemoveIf(const std::function<bool(const T&)>& pred,
                const std::function<void(std::shared_ptr<T>)>& removed) {
    std::deque<std::shared_ptr<T>> out;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (auto it = items_.begin(); it != items_.end();) {
        if (pred(*it->item)) {
          tokens_ -= it->tokens;
          out.push_back(std::move(it->item));
          it = items_.erase(it);
        } else {
          ++it;
        }
      }
    }
    for (auto& item : out) removed(std::move(item));
  }

  // Wakes a Front() that is waiting (e.g. decode memory was freed).
  void Wake() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      woken_ = true;
    }
    cv_.notify_all();
  }

  int32_t size() const {
    std::lock_guard<std::mutex> lock(mu_);
    return static_cast<int32_t>(items_.size());
  }
  int64_t tokens() const {
    std::lock_guard<std::mutex> lock(mu_);
    return tokens_;
  }

 private:
  struct Entry {
    std::shared_ptr<T> item;
    int64_t tokens;
  };
  const QueueLimits limits_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Entry> items_ ABSL_GUARDED_BY(mu_);
  int64_t tokens_ ABSL_GUARDED_BY(mu_) = 0;
  bool woken_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace tandem::router

#endif  // TANDEM_ROUTER_ADMISSION_QUEUE_H_
