#include "kernels/cpu/thread_pool.h"

#include <atomic>
#include <vector>

#include "gtest/gtest.h"

namespace tandem::kernels {
namespace {

TEST(ThreadPool, CoversEveryIndexOnceWithAlignedChunks) {
  for (int threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    for (int64_t n : {1, 5, 16, 17, 1000}) {
      std::vector<std::atomic<int>> hits(n);
      pool.ParallelFor(
          n,
          [&](int64_t b, int64_t e, int) {
            EXPECT_EQ(b % 4, 0);
            for (int64_t i = b; i < e; ++i) hits[i]++;
          },
          4);
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << n << " " << i;
    }
  }
}

TEST(ThreadPool, RunsManyShortLoops) {
  ThreadPool pool(2);
  std::atomic<int64_t> total{0};
  for (int r = 0; r < 5000; ++r) {
    pool.ParallelFor(10, [&](int64_t b, int64_t e, int) { total += e - b; });
  }
  EXPECT_EQ(total.load(), 50000);
}

}  // namespace
}  // namespace tandem::kernels
