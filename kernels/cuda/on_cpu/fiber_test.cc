// Fiber on its own: suspends and resumes where it left off, interleaves with another
// fiber, keeps its own floating-point control state, uses its whole stack, and starts
// over after Reset. Built twice: the x86-64 switch (cuda_on_cpu_test) and the portable
// ucontext one (fiber_ucontext_test).
#include "kernels/cuda/on_cpu/fiber.h"

#include <cfenv>
#include <cstring>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace tandem::kernels::cuda_on_cpu {
namespace {

struct Ctx {
  Fiber* self = nullptr;
  std::vector<std::string>* log = nullptr;
  std::string name;
  int steps = 0;
};

void Stepper(void* p) {
  auto* c = static_cast<Ctx*>(p);
  for (int i = 0; i < c->steps; ++i) {
    c->log->push_back(c->name);
    c->log->back() += std::to_string(i);  // (operator+ trips GCC 12's -Wrestrict)
    c->self->Suspend();
  }
  c->log->push_back(c->name);
  c->log->back() += " done";
}

TEST(Fiber, SuspendsAndResumesWhereItLeftOff) {
  Fiber f;
  std::vector<std::string> log;
  Ctx c{&f, &log, "a", 3};
  f.Reset(&Stepper, &c);
  for (int i = 0; i < 3; ++i) {
    EXPECT_FALSE(f.finished());
    f.Resume();
    EXPECT_EQ(log.back(), std::string("a") += std::to_string(i));
  }
  f.Resume();
  EXPECT_TRUE(f.finished());
  EXPECT_EQ(log, (std::vector<std::string>{"a0", "a1", "a2", "a done"}));
}

TEST(Fiber, TwoFibersInterleave) {
  Fiber a, b;
  std::vector<std::string> log;
  Ctx ca{&a, &log, "a", 2}, cb{&b, &log, "b", 2};
  a.Reset(&Stepper, &ca);
  b.Reset(&Stepper, &cb);
  while (!a.finished() || !b.finished()) {
    if (!a.finished()) a.Resume();
    if (!b.finished()) b.Resume();
  }
  EXPECT_EQ(log, (std::vector<std::string>{"a0", "b0", "a1", "b1", "a done", "b done"}));
}

struct RoundingCtx {
  Fiber* self = nullptr;
  int seen = -1;
};

void RoundsTowardZero(void* p) {
  auto* c = static_cast<RoundingCtx*>(p);
  std::fesetround(FE_TOWARDZERO);
  c->self->Suspend();
  c->seen = std::fegetround();
  std::fesetround(FE_TONEAREST);
}

// MXCSR and the x87 control word belong to the context that set them.
TEST(Fiber, KeepsItsOwnRoundingMode) {
  Fiber f;
  RoundingCtx c{&f};
  f.Reset(&RoundsTowardZero, &c);
  f.Resume();
  EXPECT_EQ(std::fegetround(), FE_TONEAREST);
  volatile float third = 1.0f;
  third = third / 3.0f;
  EXPECT_EQ(third, 1.0f / 3.0f);
  f.Resume();
  EXPECT_EQ(c.seen, FE_TOWARDZERO);
  EXPECT_TRUE(f.finished());
}

struct DeepCtx {
  Fiber* self = nullptr;
  uint64_t sum = 0;
};

void Deep(void* p) {
  auto* c = static_cast<DeepCtx*>(p);
  volatile uint8_t big[192 << 10];  // most of the default stack
  std::memset(const_cast<uint8_t*>(big), 3, sizeof(big));
  c->self->Suspend();
  for (size_t i = 0; i < sizeof(big); i += 4096) c->sum += big[i];
}

TEST(Fiber, UsesItsWholeStackAcrossASuspend) {
  Fiber f;
  DeepCtx c{&f};
  f.Reset(&Deep, &c);
  f.Resume();
  f.Resume();
  EXPECT_TRUE(f.finished());
  EXPECT_EQ(c.sum, uint64_t{3} * (192 << 10) / 4096);
}

TEST(Fiber, ResetAbandonsASuspendedRunAndStartsOver) {
  Fiber f;
  std::vector<std::string> log;
  Ctx c{&f, &log, "x", 5};
  f.Reset(&Stepper, &c);
  f.Resume();
  f.Resume();
  Ctx d{&f, &log, "y", 1};
  f.Reset(&Stepper, &d);
  f.Resume();
  f.Resume();
  EXPECT_TRUE(f.finished());
  EXPECT_EQ(log, (std::vector<std::string>{"x0", "x1", "y0", "y done"}));
}

}  // namespace
}  // namespace tandem::kernels::cuda_on_cpu
