// The CUDA C++ that tandem's kernels use, on the CPU: compiled by the host compiler in
// place of cuda_runtime.h, cuda_bf16.h and cuda_fp16.h (the stand-ins under include/
// include this), so a .cu file of kernels/cuda builds as C++ and its launchers run the
// kernels through the block scheduler (block_scheduler.h). tests/gpu/README.md lists
// the kernels this covers and what only a GPU can check.
//
//   qualifiers       __global__ __device__ __host__ __forceinline__ __launch_bounds__
//                    vanish; __shared__ is a static thread_local (one copy per OS
//                    thread, which runs one block at a time)
//   built-ins        threadIdx blockIdx blockDim gridDim warpSize
//   launches         TANDEM_LAUNCH(kernel, grid, block, stream)(args...) (launch.h)
//                    runs the whole grid before it returns; cudaGetLastError returns
//                    its error (a bad configuration or a fault inside the kernel)
//   synchronisation  __syncthreads, __syncwarp, __shfl{,_xor,_up,_down}_sync,
//                    __ballot_sync, __any_sync, __all_sync, __threadfence*
//   atomics          atomicAdd, atomicCAS, atomicExch, atomicMax, atomicMin (one OS
//                    thread runs a grid, so plain read-modify-writes)
//   numbers          __nv_bfloat16 and __half with round-to-nearest-even conversions
//                    (bit-exact with CUDA's _rn ones, NaN → 0x7fff), rsqrtf, __expf, __sincosf,
//                    __fdividef, __saturatef, min / max, __float_as_int & co.
//
// The fast-math intrinsics are computed exactly here (CUDA's differ by a few ulp), so
// kernels are compared with their CPU references at tolerances that hold on a GPU too.
#ifndef TANDEM_KERNELS_CUDA_ON_CPU_CUDA_ON_CPU_H_
#define TANDEM_KERNELS_CUDA_ON_CPU_CUDA_ON_CPU_H_

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <tuple>
#include <type_traits>
#include <utility>

#include "kernels/cuda/on_cpu/block_scheduler.h"

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...)
#define __restrict__ __restrict
#define __align__(n) __attribute__((aligned(n)))
#define __shared__ static thread_local
#define __constant__ static

// --- runtime types ------------------------------------------------------------------
using uint3 = ::tandem::kernels::cuda_on_cpu::Index3;
struct dim3 {
  unsigned x = 1, y = 1, z = 1;
  constexpr dim3(unsigned vx = 1, unsigned vy = 1, unsigned vz = 1) : x(vx), y(vy), z(vz) {}
  constexpr operator uint3() const { return {x, y, z}; }
};

// cudaError_t's numbering.
enum cudaError_t : int {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorInvalidConfiguration = ::tandem::kernels::cuda_on_cpu::kInvalidConfiguration,
  cudaErrorLaunchFailure = ::tandem::kernels::cuda_on_cpu::kLaunchFailure,
};
using cudaStream_t = struct CUstream_st*;

#define threadIdx (::tandem::kernels::cuda_on_cpu::current_thread_idx)
#define blockIdx (::tandem::kernels::cuda_on_cpu::current_block_idx)
#define blockDim (::tandem::kernels::cuda_on_cpu::current_block_dim)
#define gridDim (::tandem::kernels::cuda_on_cpu::current_grid_dim)
constexpr int warpSize = 32;

namespace tandem::kernels::cuda_on_cpu {

// The sticky-until-read error of the last launch on this OS thread.
inline thread_local int last_error = 0;

template <class... Params>
struct Launcher {
  void (*kernel)(Params...);
  Index3 grid, block;
  // Converts the arguments to the kernel's parameter types (as a launch copies them),
  // runs the grid, and keeps its error for cudaGetLastError.
  template <class... Args>
  void operator()(Args&&... args) const {
    std::tuple<std::decay_t<Params>...> params(std::forward<Args>(args)...);
    auto thread = [&] { std::apply(kernel, params); };  // each thread gets its own copy
    const int e = RunGrid(grid, block, &Thunk<decltype(thread)>, &thread);
    if (e != 0 && last_error == 0) last_error = e;
  }
  template <class F>
  static void Thunk(void* f) {
    (*static_cast<F*>(f))();
  }
};

template <class... Params>
Launcher<Params...> Launch(void (*kernel)(Params...), dim3 grid, dim3 block, cudaStream_t) {
  return {kernel, grid, block};
}

template <class T>
uint64_t ToWord(T v) {
  static_assert(sizeof(T) <= 8 && std::is_trivially_copyable_v<T>);
  uint64_t w = 0;
  std::memcpy(&w, &v, sizeof(T));
  return w;
}
template <class T>
T FromWord(uint64_t w) {
  T v;
  std::memcpy(&v, &w, sizeof(T));
  return v;
}

}  // namespace tandem::kernels::cuda_on_cpu

inline cudaError_t cudaGetLastError() {
  const int e = ::tandem::kernels::cuda_on_cpu::last_error;
  ::tandem::kernels::cuda_on_cpu::last_error = 0;
  return static_cast<cudaError_t>(e);
}
inline cudaError_t cudaPeekAtLastError() {
  return static_cast<cudaError_t>(::tandem::kernels::cuda_on_cpu::last_error);
}

// --- synchronisation ------------------------------------------------------------------
inline void __syncthreads() { ::tandem::kernels::cuda_on_cpu::SyncThreads(); }
inline void __threadfence() {}
inline void __threadfence_block() {}

namespace tandem::kernels::cuda_on_cpu {
template <class T>
T Shuffle(WarpOpKind kind, unsigned mask, T v, int arg, int width) {
  return FromWord<T>(WarpOp(kind, mask, ToWord(v), arg, width));
}
}  // namespace tandem::kernels::cuda_on_cpu

inline void __syncwarp(unsigned mask = 0xffffffffu) {
  ::tandem::kernels::cuda_on_cpu::WarpOp(::tandem::kernels::cuda_on_cpu::WarpOpKind::kSync, mask, 0,
                                         0, 32);
}
template <class T>
T __shfl_sync(unsigned mask, T v, int src, int width = warpSize) {
  return ::tandem::kernels::cuda_on_cpu::Shuffle(
      ::tandem::kernels::cuda_on_cpu::WarpOpKind::kShuffle, mask, v, src, width);
}
template <class T>
T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = warpSize) {
  return ::tandem::kernels::cuda_on_cpu::Shuffle(
      ::tandem::kernels::cuda_on_cpu::WarpOpKind::kShuffleXor, mask, v, lane_mask, width);
}
template <class T>
T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = warpSize) {
  return ::tandem::kernels::cuda_on_cpu::Shuffle(
      ::tandem::kernels::cuda_on_cpu::WarpOpKind::kShuffleUp, mask, v, static_cast<int>(delta),
      width);
}
template <class T>
T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = warpSize) {
  return ::tandem::kernels::cuda_on_cpu::Shuffle(
      ::tandem::kernels::cuda_on_cpu::WarpOpKind::kShuffleDown, mask, v, static_cast<int>(delta),
      width);
}
inline unsigned __ballot_sync(unsigned mask, int predicate) {
  return static_cast<unsigned>(::tandem::kernels::cuda_on_cpu::WarpOp(
      ::tandem::kernels::cuda_on_cpu::WarpOpKind::kBallot, mask, predicate != 0, 0, 32));
}
inline int __any_sync(unsigned mask, int predicate) {
  return static_cast<int>(::tandem::kernels::cuda_on_cpu::WarpOp(
      ::tandem::kernels::cuda_on_cpu::WarpOpKind::kAny, mask, predicate != 0, 0, 32));
}
inline int __all_sync(unsigned mask, int predicate) {
  return static_cast<int>(::tandem::kernels::cuda_on_cpu::WarpOp(
      ::tandem::kernels::cuda_on_cpu::WarpOpKind::kAll, mask, predicate != 0, 0, 32));
}

// --- atomics (one OS thread runs the grid) -----------------------------------------------
// CUDA's overloads (so that an argument converts as it does there, an enum to int).
#define TANDEM_ON_CPU_ATOMICS(T)   \
  inline T atomicAdd(T* p, T v) {  \
    const T old = *p;              \
    *p = old + v;                  \
    return old;                    \
  }                                \
  inline T atomicExch(T* p, T v) { \
    const T old = *p;              \
    *p = v;                        \
    return old;                    \
  }
#define TANDEM_ON_CPU_INTEGER_ATOMICS(T)     \
  TANDEM_ON_CPU_ATOMICS(T)                   \
  inline T atomicCAS(T* p, T compare, T v) { \
    const T old = *p;                        \
    if (old == compare) *p = v;              \
    return old;                              \
  }                                          \
  inline T atomicMax(T* p, T v) {            \
    const T old = *p;                        \
    if (v > old) *p = v;                     \
    return old;                              \
  }                                          \
  inline T atomicMin(T* p, T v) {            \
    const T old = *p;                        \
    if (v < old) *p = v;                     \
    return old;                              \
  }
TANDEM_ON_CPU_INTEGER_ATOMICS(int)
TANDEM_ON_CPU_INTEGER_ATOMICS(unsigned)
TANDEM_ON_CPU_INTEGER_ATOMICS(unsigned long long)
TANDEM_ON_CPU_ATOMICS(float)
TANDEM_ON_CPU_ATOMICS(double)
#undef TANDEM_ON_CPU_INTEGER_ATOMICS
#undef TANDEM_ON_CPU_ATOMICS

// --- arithmetic -------------------------------------------------------------------------
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
inline long long min(long long a, long long b) { return a < b ? a : b; }
inline long long max(long long a, long long b) { return a > b ? a : b; }
inline long min(long a, long b) { return a < b ? a : b; }
inline long max(long a, long b) { return a > b ? a : b; }
inline float min(float a, float b) { return std::fmin(a, b); }
inline float max(float a, float b) { return std::fmax(a, b); }
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline float __expf(float x) { return std::exp(x); }
inline float __logf(float x) { return std::log(x); }
inline float __fdividef(float a, float b) { return a / b; }
inline float __saturatef(float x) { return x < 0.f ? 0.f : (x > 1.f ? 1.f : x); }
inline void __sincosf(float x, float* s, float* c) {
  *s = std::sin(x);
  *c = std::cos(x);
}
inline int __float_as_int(float x) { return std::bit_cast<int>(x); }
inline float __int_as_float(int x) { return std::bit_cast<float>(x); }
inline unsigned __float_as_uint(float x) { return std::bit_cast<unsigned>(x); }
inline float __uint_as_float(unsigned x) { return std::bit_cast<float>(x); }

// --- bfloat16 and binary16 ----------------------------------------------------------------
struct __nv_bfloat16 {
  uint16_t bits;
};
struct __nv_bfloat162 {
  __nv_bfloat16 x, y;
};
struct __half {
  uint16_t bits;
};

inline float __bfloat162float(__nv_bfloat16 b) {
  return std::bit_cast<float>(static_cast<uint32_t>(b.bits) << 16);
}
inline __nv_bfloat16 __float2bfloat16_rn(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return {0x7fffu};    // NaN: the canonical one, as cvt.rn
  const uint32_t rounded = x + 0x7fffu + ((x >> 16) & 1u);  // to nearest, ties to even
  return {static_cast<uint16_t>(rounded >> 16)};
}
inline __nv_bfloat16 __float2bfloat16(float f) { return __float2bfloat16_rn(f); }
inline __nv_bfloat162 __floats2bfloat162_rn(float lo, float hi) {
  return {__float2bfloat16_rn(lo), __float2bfloat16_rn(hi)};
}
inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 b) { return b.bits; }
inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short u) { return {u}; }

inline float __half2float(__half h) {
  const uint32_t sign = static_cast<uint32_t>(h.bits & 0x8000u) << 16;
  const uint32_t exp = (h.bits >> 10) & 0x1fu, mant = h.bits & 0x3ffu;
  if (exp == 0x1f) return std::bit_cast<float>(sign | 0x7f800000u | (mant << 13));
  if (exp != 0) return std::bit_cast<float>(sign | ((exp + 112) << 23) | (mant << 13));
  const float m = std::ldexp(static_cast<float>(mant), -24);  // ±0 and subnormals, exact
  return sign != 0 ? -m : m;
}
inline __half __float2half_rn(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t a = x & 0x7fffffffu;
  if (a > 0x7f800000u) return {0x7fffu};  // NaN: the canonical one, as cvt.rn
  if (a >= 0x477ff000u) return {static_cast<uint16_t>(sign | 0x7c00u)};  // to ±inf
  // Below 2^-14 the result is a subnormal: count in units of 2^-24, rounding to even.
  if (a < 0x38800000u) {
    const float scaled = std::bit_cast<float>(a) * 16777216.0f;  // exact: a power of two
    return {static_cast<uint16_t>(sign | static_cast<uint16_t>(std::nearbyint(scaled)))};
  }
  const uint32_t half = ((a >> 23) - 112) << 10 | ((a >> 13) & 0x3ffu);
  const uint32_t rest = a & 0x1fffu;
  const uint32_t up = rest > 0x1000u || (rest == 0x1000u && (half & 1u));
  return {static_cast<uint16_t>(sign | (half + up))};
}
inline __half __float2half(float f) { return __float2half_rn(f); }
inline unsigned short __half_as_ushort(__half h) { return h.bits; }
inline __half __ushort_as_half(unsigned short u) { return {u}; }

#endif  // TANDEM_KERNELS_CUDA_ON_CPU_CUDA_ON_CPU_H_
