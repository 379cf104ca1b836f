// ThreadPool: a fixed set of worker threads that run one parallel loop at a time.
//
// ParallelFor(n, fn) splits [0, n) into a few contiguous chunks per thread; threads
// (the caller included) take chunks from a shared counter until none are left, so a
// late or slow thread does not hold the others up. It returns when all chunks are
// done. Chunk boundaries depend only on n, the grain and the thread count; which
// thread runs a chunk depends on timing, so `fn` must compute each index the same way
// whichever thread runs it (every kernel here does). Workers spin briefly between
// loops (a decode step runs hundreds of short loops), then sleep.
//
// One caller at a time: ParallelFor is not reentrant and not thread-safe.
#ifndef TANDEM_KERNELS_CPU_THREAD_POOL_H_
#define TANDEM_KERNELS_CPU_THREAD_POOL_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace tandem::kernels {

class ThreadPool {
 public:
  // `num_threads` ≥ 1 includes the calling thread.
  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return num_threads_; }

  // fn(begin, end, thread_index) over contiguous chunks of [0, n); chunk boundaries
  // are multiples of `grain`. thread_index < num_threads() identifies the thread.
  void ParallelFor(int64_t n, const std::function<void(int64_t, int64_t, int)>& fn,
                   int64_t grain = 1);

 private:
  void WorkerLoop(int index);
  void RunChunks(int thread_index);

  int num_threads_;
  std::vector<std::thread> workers_;
  const std::function<void(int64_t, int64_t, int)>* task_ = nullptr;
  int64_t task_n_ = 0;
  int64_t task_grain_ = 1;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<int64_t> next_chunk_{0};
  int64_t num_chunks_ = 0;
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::condition_variable cv_;
};

// [begin, end) of chunk `i` of `parts` over n items, boundaries multiples of grain.
inline void ChunkRange(int64_t n, int parts, int i, int64_t grain, int64_t* begin, int64_t* end) {
  const int64_t units = (n + grain - 1) / grain;
  const int64_t b = units * i / parts, e = units * (i + 1) / parts;
  *begin = std::min(n, b * grain);
  *end = std::min(n, e * grain);
}

}  // namespace tandem::kernels

#endif  // TANDEM_KERNELS_CPU_THREAD_POOL_H_
