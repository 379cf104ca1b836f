// Fiber: one CUDA thread of the CPU shim (cuda_on_cpu.h) — a stack of its own and the
// registers saved when it stops, resumed and suspended cooperatively on one OS thread.
// The block scheduler (block_scheduler.h) owns a block's fibers and runs each until it
// reaches a barrier or a warp operation.
//
// Switching saves only what the System V x86-64 ABI asks a callee to keep (rbx, rbp,
// r12–r15, the stack pointer, MXCSR and the x87 control word), so a switch is a few
// nanoseconds; elsewhere it falls back to ucontext (a system call per switch). Under
// AddressSanitizer every switch is announced (__sanitizer_{start,finish}_switch_fiber),
// so ASan checks a kernel's host-memory accesses as it checks any code.
//
// The stack is mapped with an inaccessible guard page below it: a kernel that
// overflows it faults instead of corrupting its neighbour.
//
// Not thread-safe: a fiber is resumed only from the OS thread that reset it.
#ifndef TANDEM_KERNELS_CUDA_ON_CPU_FIBER_H_
#define TANDEM_KERNELS_CUDA_ON_CPU_FIBER_H_

#include <cstddef>
#include <cstdint>
#include <memory>

namespace tandem::kernels::cuda_on_cpu {

class Fiber {
 public:
  static constexpr size_t kDefaultStackBytes = size_t{256} << 10;

  explicit Fiber(size_t stack_bytes = kDefaultStackBytes);
  ~Fiber();
  Fiber(const Fiber&) = delete;
  Fiber& operator=(const Fiber&) = delete;

  // The next Resume starts `entry(arg)` from the top of the stack; whatever the fiber
  // was doing is abandoned (nothing on its stack is destroyed).
  void Reset(void (*entry)(void*), void* arg);
  // From the owning thread: runs the fiber until it calls Suspend or `entry` returns.
  void Resume();
  // From inside the fiber: back to the Resume that ran it.
  void Suspend();
  // `entry` returned.
  bool finished() const { return finished_; }

 private:
  struct Platform;           // fiber.cc: saved contexts (and the sanitizer's bookkeeping)
  friend struct FiberStart;  // fiber.cc: ucontext's entry point
  // The first frame on the fiber's stack: entry(arg), then back to Resume for good.
  static void Main(Fiber* self);
  void SwitchOut(bool finishing);

  size_t stack_bytes_;
  uint8_t* mapping_ = nullptr;  // guard page, then the stack
  size_t mapping_bytes_ = 0;
  void (*entry_)(void*) = nullptr;
  void* arg_ = nullptr;
  bool finished_ = true;
  std::unique_ptr<Platform> p_;
};

}  // namespace tandem::kernels::cuda_on_cpu

#endif  // TANDEM_KERNELS_CUDA_ON_CPU_FIBER_H_
