// The CPU shim's CUDA semantics, each against its definition: built-in indices cover a
// 3-D grid exactly once; a barrier orders shared memory (and leaving one out shows as
// a wrong result); shuffles, votes and segment widths give what the CUDA programming
// guide defines; returned threads leave barriers; atomics; bf16 / half conversions
// against the project's own (common/util/half.h); and the faults a GPU would hang or
// misbehave on — a barrier not every thread reaches, a mask naming a returned lane,
// a bad configuration — end the launch with an error instead.
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "common/util/half.h"
#include "gtest/gtest.h"
// The CUDA C++ surface last: its macros (threadIdx, __shared__, ...) stay out of the
// other headers.
#include "kernels/cuda/launch.h"
#include "kernels/cuda/on_cpu/cuda_on_cpu.h"

namespace tandem::kernels::cuda_on_cpu {
namespace {

__global__ void WriteLinearIds(int* hits, unsigned long long* where) {
  const unsigned long long block = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  const unsigned threads = blockDim.x * blockDim.y * blockDim.z;
  const unsigned t = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  const unsigned long long id = block * threads + t;
  atomicAdd(&hits[id], 1);
  where[id] = (static_cast<unsigned long long>(blockIdx.z) << 48) |
              (static_cast<unsigned long long>(threadIdx.z) << 32) | (threadIdx.y << 16) |
              threadIdx.x;
}

TEST(CudaOnCpu, BuiltInsCoverAThreeDimensionalGridOnce) {
  const dim3 grid(3, 2, 2), block(5, 4, 3);
  const int n = 3 * 2 * 2 * 5 * 4 * 3;
  std::vector<int> hits(n, 0);
  std::vector<unsigned long long> where(n, 0);
  TANDEM_LAUNCH(WriteLinearIds, grid, block, nullptr)(hits.data(), where.data());
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  for (int h : hits) EXPECT_EQ(h, 1);
  // The last thread of the last block.
  EXPECT_EQ(where[n - 1], (1ull << 48) | (2ull << 32) | (3u << 16) | 4u);
}

// Each thread reads its left neighbour's slot: without the barrier, whichever order
// the threads run in, some block reads a slot before it is written.
template <bool kBarrier>
__global__ void ShiftThroughShared(const float* in, float* out) {
  __shared__ float s[1024];
  const int t = threadIdx.x, n = blockDim.x;
  s[t] = in[blockIdx.x * n + t];
  if (kBarrier) __syncthreads();
  out[blockIdx.x * n + t] = s[(t + n - 1) % n];
}

template <bool kBarrier>
__global__ void ReverseThroughShared(const float* in, float* out) {
  __shared__ float s[1024];
  const int t = threadIdx.x, n = blockDim.x;
  s[t] = in[blockIdx.x * n + t];
  if (kBarrier) __syncthreads();
  out[blockIdx.x * n + t] = s[n - 1 - t];
}

TEST(CudaOnCpu, ABarrierOrdersSharedMemoryAndLeavingItOutShows) {
  for (unsigned threads : {1u, 31u, 32u, 33u, 256u, 1024u}) {
    SCOPED_TRACE(threads);
    const unsigned blocks = 3;
    std::vector<float> in(blocks * threads), out(in.size(), NAN);
    for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>(i) + 0.5f;
    TANDEM_LAUNCH(ReverseThroughShared<true>, blocks, threads, nullptr)(in.data(), out.data());
    ASSERT_EQ(cudaGetLastError(), cudaSuccess);
    for (unsigned b = 0; b < blocks; ++b) {
      for (unsigned t = 0; t < threads; ++t) {
        ASSERT_EQ(out[b * threads + t], in[b * threads + threads - 1 - t]);
      }
    }
    if (threads < 2) continue;
    // Without the barrier a thread reads a slot another thread has not written yet.
    std::fill(out.begin(), out.end(), NAN);
    TANDEM_LAUNCH(ReverseThroughShared<false>, blocks, threads, nullptr)(in.data(), out.data());
    ASSERT_EQ(cudaGetLastError(), cudaSuccess);
    int wrong = 0;
    for (unsigned b = 0; b < blocks; ++b) {
      for (unsigned t = 0; t < threads; ++t) {
        wrong += !(out[b * threads + t] == in[b * threads + threads - 1 - t]);
      }
    }
    EXPECT_GT(wrong, 0);
    // Reading the left neighbour: blocks run forward and backward in turn.
    std::fill(out.begin(), out.end(), NAN);
    TANDEM_LAUNCH(ShiftThroughShared<true>, blocks, threads, nullptr)(in.data(), out.data());
    ASSERT_EQ(cudaGetLastError(), cudaSuccess);
    for (unsigned b = 0; b < blocks; ++b) {
      for (unsigned t = 0; t < threads; ++t) {
        ASSERT_EQ(out[b * threads + t], in[b * threads + (t + threads - 1) % threads]);
      }
    }
    TANDEM_LAUNCH(ShiftThroughShared<false>, blocks, threads, nullptr)(in.data(), out.data());
    ASSERT_EQ(cudaGetLastError(), cudaSuccess);
    wrong = 0;
    for (unsigned b = 0; b < blocks; ++b) {
      for (unsigned t = 0; t < threads; ++t) {
        wrong += !(out[b * threads + t] == in[b * threads + (t + threads - 1) % threads]);
      }
    }
    EXPECT_GT(wrong, 0);
  }
}

struct ShuffleOut {
  float idx, xorv, up, down, idx16, xor8, down8;
  double wide;
  unsigned ballot;
  int any, all;
};

__global__ void Shuffles(const float* in, ShuffleOut* out) {
  const int t = threadIdx.x, lane = t % 32;
  const float v = in[t];
  ShuffleOut& o = out[t];
  o.idx = __shfl_sync(0xffffffffu, v, 5);
  o.xorv = __shfl_xor_sync(0xffffffffu, v, 3);
  o.up = __shfl_up_sync(0xffffffffu, v, 2);
  o.down = __shfl_down_sync(0xffffffffu, v, 7);
  o.idx16 = __shfl_sync(0xffffffffu, v, 17, 16);
  o.xor8 = __shfl_xor_sync(0xffffffffu, v, 9, 8);
  o.down8 = __shfl_down_sync(0xffffffffu, v, 3, 8);
  o.wide = __shfl_xor_sync(0xffffffffu, static_cast<double>(v) * 1e300, 1);
  o.ballot = __ballot_sync(0xffffffffu, lane % 3 == 0);
  o.any = __any_sync(0xffffffffu, lane == 31 && t >= 32);
  o.all = __all_sync(0xffffffffu, v > 0.f);
}

TEST(CudaOnCpu, ShufflesAndVotesFollowTheirDefinitions) {
  const int n = 64;
  std::vector<float> in(n);
  for (int i = 0; i < n; ++i) in[i] = static_cast<float>(i * 10 + 1);
  in[40] = -1.f;  // warp 1 is not all positive
  std::vector<ShuffleOut> out(n);
  TANDEM_LAUNCH(Shuffles, 1, n, nullptr)(in.data(), out.data());
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  for (int t = 0; t < n; ++t) {
    SCOPED_TRACE(t);
    const int w = t / 32 * 32, lane = t % 32;
    auto at = [&](int l) { return in[w + l]; };
    const ShuffleOut& o = out[t];
    EXPECT_EQ(o.idx, at(5));
    EXPECT_EQ(o.xorv, at(lane ^ 3));
    EXPECT_EQ(o.up, lane >= 2 ? at(lane - 2) : at(lane));
    EXPECT_EQ(o.down, lane + 7 < 32 ? at(lane + 7) : at(lane));
    EXPECT_EQ(o.idx16, at(lane / 16 * 16 + 1));  // 17 mod 16 within each half
    // Width 8: lane ^ 9 leaves the segment upwards for even segments (own value),
    // downwards for odd ones (allowed: an earlier segment).
    const int x8 = lane ^ 9;
    EXPECT_EQ(o.xor8, (x8 & ~7) > (lane & ~7) ? at(lane) : at(x8));
    EXPECT_EQ(o.down8, lane % 8 + 3 < 8 ? at(lane + 3) : at(lane));
    EXPECT_EQ(o.wide, static_cast<double>(at(lane ^ 1)) * 1e300);
    EXPECT_EQ(o.ballot, 0x49249249u);  // lanes 0, 3, 6, ..., 30
    EXPECT_EQ(o.any, t >= 32);
    EXPECT_EQ(o.all, t < 32);
  }
}

// A block sum the way the row kernels reduce: warp shuffles, then warp 0 over the
// warps' partials through shared memory.
__global__ void BlockSum(const float* in, int n, float* out) {
  __shared__ float partial[32];
  float v = 0.f;
  for (int i = threadIdx.x; i < n; i += blockDim.x) v += in[blockIdx.x * n + i];
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < static_cast<int>(blockDim.x / 32) ? partial[lane] : 0.f;
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if (lane == 0) out[blockIdx.x] = v;
  }
}

TEST(CudaOnCpu, ABlockReductionSumsExactlyOnIntegers) {
  for (unsigned threads : {32u, 64u, 256u, 1024u}) {
    for (int n : {1, 31, 1000, 5000}) {
      const int rows = 3;
      std::vector<float> in(static_cast<size_t>(rows * n));
      for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>(i % 7);
      std::vector<float> out(rows, NAN);
      TANDEM_LAUNCH(BlockSum, rows, threads, nullptr)(in.data(), n, out.data());
      ASSERT_EQ(cudaGetLastError(), cudaSuccess);
      for (int r = 0; r < rows; ++r) {
        double want = 0;
        for (int i = 0; i < n; ++i) want += in[static_cast<size_t>(r * n + i)];
        EXPECT_EQ(out[r], want) << threads << " threads, n " << n << ", row " << r;
      }
    }
  }
}

__global__ void ReturnEarlyThenBarrier(int n, int* out) {
  __shared__ int s[256];
  if (static_cast<int>(threadIdx.x) >= n) return;
  s[threadIdx.x] = static_cast<int>(threadIdx.x) * 2;
  __syncthreads();
  out[threadIdx.x] = s[n - 1 - static_cast<int>(threadIdx.x)];
}

TEST(CudaOnCpu, ReturnedThreadsDoNotHoldABarrier) {
  std::vector<int> out(256, -1);
  TANDEM_LAUNCH(ReturnEarlyThenBarrier, 1, 256, nullptr)(100, out.data());
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  for (int t = 0; t < 100; ++t) EXPECT_EQ(out[t], (99 - t) * 2);
  EXPECT_EQ(out[100], -1);
}

__global__ void DivergentBarrier(int* out) {
  if (threadIdx.x < 16) {
    __syncthreads();
  } else {
    out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, static_cast<int>(threadIdx.x), 1);
  }
}

__global__ void ShuffleWithAReturnedLane(int* out) {
  if (threadIdx.x == 3) return;
  out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, static_cast<int>(threadIdx.x), 1);
}

__global__ void ShuffleFromOutsideTheMask(int* out) {
  if (threadIdx.x < 16) out[threadIdx.x] = __shfl_sync(0x0000ffffu, 1, 20);
}

__global__ void Nothing() {}

// Two groups of one warp at different operations with different masks, then the whole
// warp together (legal since Volta); and votes over the lanes that have not returned.
__global__ void DivergentWarpGroups(int* shifted, unsigned* ballots) {
  const int lane = static_cast<int>(threadIdx.x);
  int v = lane * 10;
  if (lane >= 16) v = __shfl_down_sync(0xffff0000u, v, 8);
  __syncwarp();
  shifted[lane] = v;
  if (lane == 5) return;
  ballots[lane] = __ballot_sync(0xffffffffu, lane % 2 == 0);
}

TEST(CudaOnCpu, WarpGroupsAndReturnedLanesFollowTheGuide) {
  std::vector<int> shifted(32, -1);
  std::vector<unsigned> ballots(32, 0);
  TANDEM_LAUNCH(DivergentWarpGroups, 1, 32, nullptr)(shifted.data(), ballots.data());
  ASSERT_EQ(cudaGetLastError(), cudaSuccess) << LastFault();
  for (int lane = 0; lane < 32; ++lane) {
    const int want = lane < 16 ? lane * 10 : lane + 8 < 32 ? (lane + 8) * 10 : lane * 10;
    EXPECT_EQ(shifted[lane], want) << lane;
    if (lane != 5) {
      EXPECT_EQ(ballots[lane], 0x55555555u & ~(1u << 5)) << lane;
    }
  }
}

TEST(CudaOnCpu, FaultsEndTheLaunchWithAnError) {
  std::vector<int> out(64, 0);
  TANDEM_LAUNCH(DivergentBarrier, 2, 64, nullptr)(out.data());
  EXPECT_EQ(cudaGetLastError(), cudaErrorLaunchFailure);
  EXPECT_NE(LastFault().find("deadlock"), std::string::npos) << LastFault();
  EXPECT_NE(LastFault().find("block (0, 0, 0)"), std::string::npos) << LastFault();
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);  // read once, then cleared

  TANDEM_LAUNCH(ShuffleWithAReturnedLane, 1, 32, nullptr)(out.data());
  EXPECT_EQ(cudaGetLastError(), cudaErrorLaunchFailure);
  EXPECT_NE(LastFault().find("shuffles from lane 3, which does not take part"), std::string::npos)
      << LastFault();

  TANDEM_LAUNCH(ShuffleFromOutsideTheMask, 1, 32, nullptr)(out.data());
  EXPECT_EQ(cudaGetLastError(), cudaErrorLaunchFailure);
  EXPECT_NE(LastFault().find("shuffles from lane 20"), std::string::npos) << LastFault();

  TANDEM_LAUNCH(Nothing, 1, 1025, nullptr)();
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  TANDEM_LAUNCH(Nothing, 0, 32, nullptr)();
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  // And the next launch runs.
  TANDEM_LAUNCH(ReturnEarlyThenBarrier, 1, 256, nullptr)(10, out.data());
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_EQ(out[0], 18);
}

__global__ void Atomics(int* counter, int* maximum, int* first, float* sum) {
  const int id = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  atomicAdd(counter, 1);
  atomicMax(maximum, id);
  atomicCAS(first, -1, id);
  atomicAdd(sum, 0.5f);
}

TEST(CudaOnCpu, AtomicsSeeEveryThread) {
  int counter = 0, maximum = -1, first = -1;
  float sum = 0;
  TANDEM_LAUNCH(Atomics, 7, 96, nullptr)(&counter, &maximum, &first, &sum);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_EQ(counter, 7 * 96);
  EXPECT_EQ(maximum, 7 * 96 - 1);
  EXPECT_NE(first, -1);
  EXPECT_EQ(sum, 7 * 96 * 0.5f);
}

TEST(CudaOnCpu, HalfAndBf16ConversionsAreRoundToNearestEven) {
  // Every binary16 value converts to float and back to itself.
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = __half2float(__ushort_as_half(static_cast<uint16_t>(h)));
    EXPECT_EQ(std::bit_cast<uint32_t>(f),
              std::bit_cast<uint32_t>(HalfToFloat(static_cast<uint16_t>(h))));
    if (!std::isnan(f)) {
      ASSERT_EQ(__half_as_ushort(__float2half_rn(f)), h) << std::hex << h;
    }
  }
  // Random floats (all exponents) round as the project's converters do.
  std::mt19937 rng(7);
  for (int i = 0; i < 2000000; ++i) {
    const float f = std::bit_cast<float>(static_cast<uint32_t>(rng()));
    if (std::isnan(f)) {
      EXPECT_EQ(__bfloat16_as_ushort(__float2bfloat16_rn(f)), 0x7fffu);
      EXPECT_EQ(__half_as_ushort(__float2half_rn(f)), 0x7fffu);
      continue;
    }
    ASSERT_EQ(__bfloat16_as_ushort(__float2bfloat16_rn(f)), FloatToBf16(f)) << f;
    ASSERT_EQ(__half_as_ushort(__float2half_rn(f)), FloatToHalf(f)) << f;
  }
  // Ties go to even, and the largest finite floats overflow to infinity.
  EXPECT_EQ(__bfloat16_as_ushort(__float2bfloat16_rn(std::bit_cast<float>(0x3f808000u))), 0x3f80u);
  EXPECT_EQ(__bfloat16_as_ushort(__float2bfloat16_rn(std::bit_cast<float>(0x3f818000u))), 0x3f82u);
  EXPECT_EQ(__bfloat16_as_ushort(__float2bfloat16_rn(3.4028235e38f)), 0x7f80u);
  EXPECT_EQ(__half_as_ushort(__float2half_rn(65520.f)), 0x7c00u);
  EXPECT_EQ(__half_as_ushort(__float2half_rn(65519.f)), 0x7bffu);
}

}  // namespace
}  // namespace tandem::kernels::cuda_on_cpu
