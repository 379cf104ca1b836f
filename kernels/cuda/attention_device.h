// Device helpers both attention kernel files use (attention_kernels.cu: paged split-K
// decode; prefill_attention.cu: the tensor-core prefill): which keys a row sees, the
// score soft-cap, and reading a cache element of any type as float. Included by .cu
// files only (and by their CPU-shim builds, on_cpu/); internal linkage in each.
#ifndef TANDEM_KERNELS_CUDA_ATTENTION_DEVICE_H_
#define TANDEM_KERNELS_CUDA_ATTENTION_DEVICE_H_

#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace tandem::kernels::cuda {
namespace {

// The first key the row at `pos` sees.
__device__ __forceinline__ int FirstKey(int pos, int window) {
  return window > 0 && pos >= window ? pos - window + 1 : 0;
}

// A scaled score, soft-capped when softcap > 0.
__device__ __forceinline__ float SoftCap(float x, float softcap) {
  return softcap > 0.f ? softcap * tanhf(x / softcap) : x;
}

__device__ __forceinline__ float ToFloat(float x) { return x; }
__device__ __forceinline__ float ToFloat(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float ToFloat(__half x) { return __half2float(x); }

}  // namespace
}  // namespace tandem::kernels::cuda

#endif  // TANDEM_KERNELS_CUDA_ATTENTION_DEVICE_H_
