// StagingPool: a fixed set of equal staging buffers in a backend's memory, allocated
// once (before serving) and lent to transport threads: a KV payload is gathered into
// one (sender) or received into one (receiver) before it moves on. Acquire waits for a
// free buffer until a deadline, so the pool bounds the bytes a transport holds.
//
// Thread-safe.
#ifndef TANDEM_COMMON_TRANSPORT_STAGING_POOL_H_
#define TANDEM_COMMON_TRANSPORT_STAGING_POOL_H_

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "common/util/strings.h"
#include "kernels/kv_storage.h"

namespace tandem::transport {

class StagingPool {
 public:
  // `count` buffers of `bytes` through kv.AllocateStaging (before serving).
  static absl::StatusOr<std::unique_ptr<StagingPool>> Create(const kernels::KvStorage& kv,
                                                             int32_t count, int64_t bytes) {
    if (count < 1 || bytes < kv.layout().LayerBytes()) {
      return absl::InvalidArgumentError(StrCat("KV staging: ", count, " buffers of ", bytes,
                                               " bytes cannot hold one block's layer (",
                                               kv.layout().LayerBytes(), " bytes)"));
    }
    std::unique_ptr<StagingPool> pool(new StagingPool(bytes));
    for (int32_t i = 0; i < count; ++i) {
      auto b = kv.AllocateStaging(bytes);
      if (!b.ok()) return b.status();
      pool->free_.push_back(b->get());
      pool->all_.push_back(*std::move(b));
    }
    return pool;
  }

  int64_t bytes() const { return bytes_; }  // of each buffer

  // A buffer, returned to the pool by its deleter. DeadlineExceeded when none frees up;
  // Cancelled soon after `*cancel` turns true (checked every 10 ms).
  using Lent = std::unique_ptr<const kernels::Buffer, std::function<void(const kernels::Buffer*)>>;
  absl::StatusOr<Lent> Acquire(std::chrono::steady_clock::time_point deadline,
                               const std::atomic<bool>* cancel = nullptr) {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      if (cancel != nullptr && cancel->load()) {
        return absl::CancelledError("KV staging: the wait was called off");
      }
      const auto now = std::chrono::steady_clock::now();
      if (now >= deadline) break;
      const auto until =
          cancel == nullptr ? deadline : std::min(deadline, now + std::chrono::milliseconds(10));
      if (cv_.wait_until(lock, until, [&] { return !free_.empty(); })) break;
    }
    if (free_.empty())
      return absl::DeadlineExceededError("KV staging: no buffer came free in time");
    const kernels::Buffer* b = free_.back();
    free_.pop_back();
    return Lent(b, [this](const kernels::Buffer* p) {
      {
        std::lock_guard<std::mutex> l(mu_);
        free_.push_back(p);
      }
      cv_.notify_one();
    });
  }

  int32_t free_count() const {
    std::lock_guard<std::mutex> lock(mu_);
    return static_cast<int32_t>(free_.size());
  }

 private:
  explicit StagingPool(int64_t bytes) : bytes_(bytes) {}
  const int64_t bytes_;
  std::vector<std::unique_ptr<kernels::Buffer>> all_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<const kernels::Buffer*> free_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tandem::transport

#endif  // TANDEM_COMMON_TRANSPORT_STAGING_POOL_H_
