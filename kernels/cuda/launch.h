// TANDEM_LAUNCH(kernel, grid, block, stream)(args...): a kernel launch written once for
// both compilers of a kernel file. Under nvcc it is kernel<<<grid, block, 0, stream>>>;
// compiled as C++ for the CPU shim (on_cpu/cuda_on_cpu.h), it runs the grid on the
// calling thread. A launch reports its error through cudaGetLastError either way.
#ifndef TANDEM_KERNELS_CUDA_LAUNCH_H_
#define TANDEM_KERNELS_CUDA_LAUNCH_H_

#if defined(__CUDACC__)
#define TANDEM_LAUNCH(kernel, grid, block, stream) kernel<<<(grid), (block), 0, (stream)>>>
#else
#define TANDEM_LAUNCH(kernel, grid, block, stream) \
  ::tandem::kernels::cuda_on_cpu::Launch((kernel), (grid), (block), (stream))
#endif

#endif  // TANDEM_KERNELS_CUDA_LAUNCH_H_
