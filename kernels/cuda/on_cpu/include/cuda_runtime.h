// Stand-in for CUDA's <cuda_runtime.h> when a kernel file is compiled for the CPU shim: this folder
// is on the include path of the shim's kernels only (kernels/CMakeLists.txt).
#ifndef TANDEM_KERNELS_CUDA_ON_CPU_INCLUDE_CUDA_RUNTIME_H_
#define TANDEM_KERNELS_CUDA_ON_CPU_INCLUDE_CUDA_RUNTIME_H_

#include "kernels/cuda/on_cpu/cuda_on_cpu.h"

#endif  // TANDEM_KERNELS_CUDA_ON_CPU_INCLUDE_CUDA_RUNTIME_H_
