// kernels/cuda/attention_kernels.cu compiled for the CPU shim (cuda_on_cpu.h): the same source the
// GPU build compiles, its launches run on the calling thread. Built with on_cpu/include/ first on
// the include path, where the CUDA headers' stand-ins are.
#include "kernels/cuda/attention_kernels.cu"  // NOLINT(build/include): the kernel source itself
