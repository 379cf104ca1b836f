#include "kernels/cuda/on_cpu/fiber.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#if defined(__SANITIZE_ADDRESS__)
#define TANDEM_FIBER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TANDEM_FIBER_ASAN 1
#endif
#endif
#ifndef TANDEM_FIBER_ASAN
#define TANDEM_FIBER_ASAN 0
#endif
#if TANDEM_FIBER_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

// TANDEM_FIBER_UCONTEXT forces the portable path on x86-64 too (fiber_test runs both).
#if defined(__x86_64__) && !defined(TANDEM_FIBER_UCONTEXT)
#define TANDEM_FIBER_ASM 1
#else
#define TANDEM_FIBER_ASM 0
#include <ucontext.h>
#endif

#if TANDEM_FIBER_ASM
extern "C" {
// Saves the callee-saved registers, MXCSR and the x87 control word on the current
// stack, stores the stack pointer in *save_sp, and restores the same from load_sp.
void tandem_fiber_switch(void** save_sp, void* load_sp);
// Where a fresh fiber's first switch returns to: calls r13(r12); never returns.
void tandem_fiber_start();
}
asm(R"(
  .text
  .p2align 4
  .globl tandem_fiber_switch
  .hidden tandem_fiber_switch
  .type tandem_fiber_switch, @function
tandem_fiber_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size tandem_fiber_switch, .-tandem_fiber_switch

  .p2align 4
  .globl tandem_fiber_start
  .hidden tandem_fiber_start
  .type tandem_fiber_start, @function
tandem_fiber_start:
  movq %r12, %rdi
  callq *%r13
  ud2
  .size tandem_fiber_start, .-tandem_fiber_start
)");
#endif

namespace tandem::kernels::cuda_on_cpu {

struct Fiber::Platform {
#if TANDEM_FIBER_ASM
  void* sp = nullptr;         // the fiber's, while it is suspended
  void* caller_sp = nullptr;  // Resume's, while the fiber runs
#else
  ucontext_t context;
  ucontext_t caller;
#endif
#if TANDEM_FIBER_ASAN
  const void* caller_bottom = nullptr;  // Resume's stack, told to ASan on the way back
  size_t caller_size = 0;
  void* fake_stack = nullptr;  // the fiber's fake frames while it is suspended
#endif
};

namespace {

size_t PageBytes() { return static_cast<size_t>(sysconf(_SC_PAGESIZE)); }

}  // namespace

// makecontext passes ints: the fiber's address comes in two halves.
struct FiberStart {
  static void Ucontext(unsigned hi, unsigned lo) {
    Fiber::Main(reinterpret_cast<Fiber*>((uint64_t{hi} << 32) | lo));
  }
};

Fiber::Fiber(size_t stack_bytes) : p_(std::make_unique<Platform>()) {
  const size_t page = PageBytes();
  stack_bytes_ = (stack_bytes + page - 1) / page * page;
  mapping_bytes_ = stack_bytes_ + page;
  void* m = mmap(nullptr, mapping_bytes_, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (m == MAP_FAILED || mprotect(m, page, PROT_NONE) != 0) {
    std::fprintf(stderr, "cuda_on_cpu: cannot map a fiber stack of %zu bytes\n", stack_bytes_);
    std::abort();
  }
  mapping_ = static_cast<uint8_t*>(m);
}

Fiber::~Fiber() {
#if TANDEM_FIBER_ASAN
  // An abandoned run's redzones would poison whatever is mapped here next.
  if (!finished_) __asan_unpoison_memory_region(mapping_, mapping_bytes_);
#endif
  munmap(mapping_, mapping_bytes_);
}

void Fiber::Reset(void (*entry)(void*), void* arg) {
  uint8_t* stack = mapping_ + (mapping_bytes_ - stack_bytes_);
#if TANDEM_FIBER_ASAN
  // Frames abandoned mid-run leave their redzones poisoned (a finished run unwound).
  if (!finished_) __asan_unpoison_memory_region(stack, stack_bytes_);
#endif
  entry_ = entry;
  arg_ = arg;
  finished_ = false;
#if TANDEM_FIBER_ASM
  // The frame tandem_fiber_switch pops, topped by a return into tandem_fiber_start; after
  // that return the stack pointer is top - 16, 16-byte aligned as a call expects.
  auto* top = reinterpret_cast<uint64_t*>(stack + stack_bytes_);
  uint32_t mxcsr = 0;
  uint16_t control = 0;
  asm volatile("stmxcsr %0" : "=m"(mxcsr));
  asm volatile("fnstcw %0" : "=m"(control));
  top[-1] = top[-2] = 0;
  top[-3] = reinterpret_cast<uint64_t>(&tandem_fiber_start);
  top[-4] = 0;                                         // rbp
  top[-5] = 0;                                         // rbx
  top[-6] = reinterpret_cast<uint64_t>(this);          // r12: the argument
  top[-7] = reinterpret_cast<uint64_t>(&Fiber::Main);  // r13: the function
  top[-8] = 0;                                         // r14
  top[-9] = 0;                                         // r15
  top[-10] = mxcsr | (uint64_t{control} << 32);
  p_->sp = &top[-10];
#else
  getcontext(&p_->context);
  p_->context.uc_stack.ss_sp = stack;
  p_->context.uc_stack.ss_size = stack_bytes_;
  p_->context.uc_link = nullptr;
  const auto self = reinterpret_cast<uintptr_t>(this);
  makecontext(&p_->context, reinterpret_cast<void (*)()>(&FiberStart::Ucontext), 2,
              static_cast<unsigned>(uint64_t{self} >> 32), static_cast<unsigned>(self));
#endif
}

void Fiber::Resume() {
#if TANDEM_FIBER_ASAN
  void* fake = nullptr;
  __sanitizer_start_switch_fiber(&fake, mapping_ + (mapping_bytes_ - stack_bytes_), stack_bytes_);
#endif
#if TANDEM_FIBER_ASM
  tandem_fiber_switch(&p_->caller_sp, p_->sp);
#else
  swapcontext(&p_->caller, &p_->context);
#endif
#if TANDEM_FIBER_ASAN
  __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#endif
}

void Fiber::Suspend() {
  SwitchOut(false);
#if TANDEM_FIBER_ASAN
  __sanitizer_finish_switch_fiber(p_->fake_stack, &p_->caller_bottom, &p_->caller_size);
#endif
}

void Fiber::SwitchOut(bool finishing) {
#if TANDEM_FIBER_ASAN
  __sanitizer_start_switch_fiber(finishing ? nullptr : &p_->fake_stack, p_->caller_bottom,
                                 p_->caller_size);
#else
  (void)finishing;
#endif
#if TANDEM_FIBER_ASM
  tandem_fiber_switch(&p_->sp, p_->caller_sp);
#else
  swapcontext(&p_->context, &p_->caller);
#endif
}

void Fiber::Main(Fiber* self) {
#if TANDEM_FIBER_ASAN
  __sanitizer_finish_switch_fiber(nullptr, &self->p_->caller_bottom, &self->p_->caller_size);
#endif
  self->entry_(self->arg_);
  self->finished_ = true;
  self->SwitchOut(true);
  std::abort();  // a finished fiber is never resumed (Reset starts a new one)
}

}  // namespace tandem::kernels::cuda_on_cpu
