#include "kernels/cpu/thread_pool.h"

#include <algorithm>

namespace tandem::kernels {

namespace {
constexpr int kSpinPauses = 20000;  // ≈ 0.5 ms of pause instructions
constexpr int kSpinYields = 2000;

inline void Pause() {
#if defined(__x86_64__)
  __builtin_ia32_pause();
#endif
}
}  // namespace

ThreadPool::ThreadPool(int num_threads) : num_threads_(std::max(1, num_threads)) {
  for (int i = 1; i < num_threads_; ++i) workers_.emplace_back([this, i] { WorkerLoop(i); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true);
  {
    std::lock_guard<std::mutex> lock(mu_);
    generation_.fetch_add(1);
  }
  cv_.notify_all();
  for (auto& w : workers_) w.join();
}

void ThreadPool::ParallelFor(int64_t n, const std::function<void(int64_t, int64_t, int)>& fn,
                             int64_t grain) {
  if (n <= 0) return;
  if (num_threads_ == 1 || n <= grain) {
    fn(0, n, 0);
    return;
  }
  task_ = &fn;
  task_n_ = n;
  task_grain_ = grain;
  const int64_t units = (n + grain - 1) / grain;
  num_chunks_ = std::min<int64_t>(units, int64_t{4} * num_threads_);
  next_chunk_.store(0, std::memory_order_relaxed);
  pending_.store(num_threads_ - 1, std::memory_order_relaxed);
  {
    std::lock_guard<std::mutex> lock(mu_);
    generation_.fetch_add(1, std::memory_order_release);
  }
  cv_.notify_all();
  RunChunks(0);
  // Spin briefly, then yield: when cores are oversubscribed (two engines, or ctest -j)
  // the worker we wait for may need this core to run at all.
  for (int spin = 0; pending_.load(std::memory_order_acquire) != 0; ++spin) {
    if (spin < kSpinPauses) {
      Pause();
    } else {
      std::this_thread::yield();
    }
  }
  task_ = nullptr;
}

void ThreadPool::RunChunks(int thread_index) {
  for (int64_t c = next_chunk_.fetch_add(1, std::memory_order_relaxed); c < num_chunks_;
       c = next_chunk_.fetch_add(1, std::memory_order_relaxed)) {
    int64_t b, e;
    ChunkRange(task_n_, static_cast<int>(num_chunks_), static_cast<int>(c), task_grain_, &b, &e);
    if (b < e) (*task_)(b, e, thread_index);
  }
}

void ThreadPool::WorkerLoop(int index) {
  uint64_t seen = 0;
  while (true) {
    // Spin, then yield, then sleep: the next loop of a forward pass usually starts
    // within microseconds, but an idle engine must not burn a core.
    uint64_t gen = generation_.load(std::memory_order_acquire);
    for (int spin = 0; gen == seen && spin < kSpinPauses + kSpinYields; ++spin) {
      if (spin < kSpinPauses) {
        Pause();
      } else {
        std::this_thread::yield();
      }
      gen = generation_.load(std::memory_order_acquire);
    }
    if (gen == seen) {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return generation_.load(std::memory_order_acquire) != seen; });
      gen = generation_.load(std::memory_order_acquire);
    }
    seen = gen;
    if (stop_.load()) return;
    RunChunks(index);
    pending_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

}  // namespace tandem::kernels
