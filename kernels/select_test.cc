// The arg-max rule of select.h against the CPU sampler's (std::max_element: the first,
// i.e. lowest-id, maximum), in every reduction order a GPU might use, and the CPU
// backend's ArgMax op built on it.
#include "kernels/select.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"

namespace tandem::kernels {
namespace {

// Reduces v[begin, end) pairwise as a tree of the given fan-in (a warp's shuffles, a
// block's shared-memory step), or left to right when fan_in is 0.
Best Reduce(const std::vector<float>& v, int fan_in) {
  std::vector<Best> level;
  for (size_t i = 0; i < v.size(); ++i) level.push_back({v[i], static_cast<int32_t>(i)});
  if (fan_in == 0) {
    Best b = NoBest();
    for (const Best& x : level) b = Better(b, x);
    return b;
  }
  while (level.size() > 1) {
    std::vector<Best> next;
    for (size_t i = 0; i < level.size(); i += fan_in) {
      Best b = NoBest();
      for (size_t j = i; j < std::min(level.size(), i + fan_in); ++j) b = Better(level[j], b);
      next.push_back(b);
    }
    level = next;
  }
  return level.empty() ? NoBest() : level[0];
}

TEST(Select, ArgMaxIsTheLowestIdMaximumInAnyOrder) {
  std::mt19937 rng(3);
  for (int trial = 0; trial < 200; ++trial) {
    const int n = 1 + static_cast<int>(rng() % 3000);
    std::vector<float> v(n);
    for (float& x : v) x = static_cast<float>(static_cast<int>(rng() % 7)) - 3.0f;  // ties
    if (trial % 5 == 0) v[rng() % n] = NAN;
    std::vector<float> clean = v;
    for (float& x : clean) x = std::isnan(x) ? -INFINITY : x;
    const int32_t want =
        static_cast<int32_t>(std::max_element(clean.begin(), clean.end()) - clean.begin());
    for (int fan_in : {0, 2, 32, 256}) {
      const Best b = Reduce(v, fan_in);
      if (std::isnan(v[want])) continue;  // only NaNs and -inf: nothing sensible to pick
      EXPECT_EQ(b.id, want) << "n " << n << " fan-in " << fan_in;
    }
  }
  EXPECT_EQ(Reduce({NAN, NAN}, 0).id, -1);
}

TEST(Select, CpuBackendArgMaxOp) {
  CpuBackend b({.num_threads = 2});
  const int64_t rows = 17, cols = 4097;
  std::vector<float> v(rows * cols);
  std::mt19937 rng(4);
  for (float& x : v) x = static_cast<float>(rng() % 50);
  auto buf = *b.Allocate(MemoryKind::kActivations, rows * cols * 4 + rows * 4);
  b.CopyToDevice(v.data(), *buf, 0, rows * cols * 4);
  b.ArgMax({buf.get(), 0, model::GgmlType::kF32, rows, cols},
           {buf.get(), rows * cols * 4, model::GgmlType::kI32, 1, rows});
  std::vector<int32_t> ids(rows);
  b.CopyToHost(*buf, rows * cols * 4, rows * 4, ids.data());
  ASSERT_TRUE(b.Synchronize().ok());
  for (int64_t r = 0; r < rows; ++r) {
    EXPECT_EQ(ids[r], std::max_element(v.begin() + r * cols, v.begin() + (r + 1) * cols) -
                          (v.begin() + r * cols));
  }
}

}  // namespace
}  // namespace tandem::kernels
