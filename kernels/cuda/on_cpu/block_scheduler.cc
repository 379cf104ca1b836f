#include "kernels/cuda/on_cpu/block_scheduler.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/on_cpu/fiber.h"

namespace tandem::kernels::cuda_on_cpu {

thread_local Index3 current_thread_idx;
thread_local Index3 current_block_idx;
thread_local Index3 current_block_dim;
thread_local Index3 current_grid_dim;

namespace {

constexpr int kWarpSize = 32;

enum class Wait : uint8_t { kRunnable, kBarrier, kWarp, kDone };

struct ThreadState {
  Wait wait = Wait::kRunnable;
  // The pending warp operation (kWarp) and, once resolved, its result.
  WarpOpKind kind = WarpOpKind::kSync;
  uint32_t mask = 0;
  uint64_t value = 0;
  int32_t arg = 0;
  int32_t width = kWarpSize;
  uint64_t result = 0;
};

// This OS thread's scheduler: the fibers (kept between launches: each maps a stack)
// and the block being run.
struct Scheduler {
  std::vector<std::unique_ptr<Fiber>> fibers;
  std::vector<ThreadState> threads;
  int32_t current = -1;  // the running thread, -1 outside a kernel
  void (*body)(void*) = nullptr;
  void* arg = nullptr;
  std::string fault;
};

thread_local Scheduler scheduler;

void ThreadMain(void*) { scheduler.body(scheduler.arg); }

void SetThreadIdx(int32_t t) {
  const Index3& d = current_block_dim;
  current_thread_idx = {static_cast<unsigned>(t) % d.x, static_cast<unsigned>(t) / d.x % d.y,
                        static_cast<unsigned>(t) / (d.x * d.y)};
}

ThreadState& Current(const char* what) {
  Scheduler& s = scheduler;
  if (s.current < 0) {
    std::fprintf(stderr, "cuda_on_cpu: %s outside a kernel\n", what);
    std::abort();
  }
  return s.threads[static_cast<size_t>(s.current)];
}

void Block() {
  Scheduler& s = scheduler;
  s.fibers[static_cast<size_t>(s.current)]->Suspend();
}

// Result of a warp operation for `lane`, from the values of the lanes in `mask`.
uint64_t Resolve(const std::vector<ThreadState>& t, int32_t base, int32_t lane, uint32_t mask) {
  const ThreadState& me = t[static_cast<size_t>(base + lane)];
  const int32_t w = me.width;
  const int32_t seg = lane & ~(w - 1);  // the segment's first lane
  auto value_of = [&](int32_t src) {
    const bool in = src >= 0 && src < kWarpSize && (mask >> src & 1u);
    return in ? t[static_cast<size_t>(base + src)].value : me.value;
  };
  uint64_t ballot = 0;
  for (int32_t l = 0; l < kWarpSize; ++l) {
    if ((mask >> l & 1u) && t[static_cast<size_t>(base + l)].value != 0) ballot |= uint64_t{1} << l;
  }
  switch (me.kind) {
    case WarpOpKind::kSync:
      return 0;
    case WarpOpKind::kShuffle:
      return value_of(seg + (me.arg & (w - 1)));
    case WarpOpKind::kShuffleXor: {
      const int32_t src = lane ^ me.arg;
      return (src & ~(w - 1)) > seg ? me.value : value_of(src);
    }
    case WarpOpKind::kShuffleUp:
      return lane - me.arg < seg ? me.value : value_of(lane - me.arg);
    case WarpOpKind::kShuffleDown:
      return lane + me.arg >= seg + w ? me.value : value_of(lane + me.arg);
    case WarpOpKind::kBallot:
      return ballot;
    case WarpOpKind::kAny:
      return ballot != 0;
    case WarpOpKind::kAll:
      return ballot == mask;
  }
  return 0;
}

// Resolves the warp operations of warp `w` whose lanes have all arrived; true if any
// thread was released. A fault is left in s.fault.
bool ResolveWarp(Scheduler& s, int32_t w, int32_t n) {
  const int32_t base = w * kWarpSize;
  const int32_t lanes = std::min(kWarpSize, n - base);
  bool released = false;
  for (int32_t lane = 0; lane < lanes; ++lane) {
    const ThreadState& first = s.threads[static_cast<size_t>(base + lane)];
    if (first.wait != Wait::kWarp) continue;
    const uint32_t mask = first.mask;
    if (!(mask >> lane & 1u)) {
      s.fault = absl::StrCat("thread ", base + lane, ": a warp operation whose mask 0x",
                             absl::Hex(mask), " leaves out its own lane");
      return false;
    }
    bool complete = true;
    for (int32_t l = 0; l < kWarpSize && complete; ++l) {
      if (!(mask >> l & 1u)) continue;
      if (l >= lanes) {
        s.fault = absl::StrCat("warp ", w, ": mask 0x", absl::Hex(mask), " names lane ", l,
                               ", which this block does not have");
        return false;
      }
      const ThreadState& t = s.threads[static_cast<size_t>(base + l)];
      if (t.wait == Wait::kDone) {
        s.fault = absl::StrCat("warp ", w, ": mask 0x", absl::Hex(mask), " names lane ", l,
                               ", which has returned");
        return false;
      }
      if (t.wait != Wait::kWarp) {
        complete = false;  // at a barrier: maybe later (else the block deadlocks)
      } else if (t.mask != mask || t.kind != first.kind || t.width != first.width) {
        s.fault = absl::StrCat("warp ", w, ": lanes ", lane, " and ", l,
                               " wait at different warp operations (or masks)");
        return false;
      }
    }
    if (!complete) continue;
    for (int32_t l = 0; l < kWarpSize; ++l) {
      if (mask >> l & 1u)
        s.threads[static_cast<size_t>(base + l)].result = Resolve(s.threads, base, l, mask);
    }
    for (int32_t l = 0; l < kWarpSize; ++l) {
      if (mask >> l & 1u) s.threads[static_cast<size_t>(base + l)].wait = Wait::kRunnable;
    }
    released = true;
  }
  return released;
}

// Runs one block to its end; false on a fault (in s.fault).
bool RunBlock(Scheduler& s, int32_t n) {
  for (int32_t t = 0; t < n; ++t) {
    s.threads[static_cast<size_t>(t)] = ThreadState{};
    s.fibers[static_cast<size_t>(t)]->Reset(&ThreadMain, nullptr);
  }
  for (int64_t round = 0;; ++round) {
    for (int32_t k = 0; k < n; ++k) {
      const int32_t t = round % 2 == 0 ? k : n - 1 - k;
      ThreadState& st = s.threads[static_cast<size_t>(t)];
      if (st.wait != Wait::kRunnable) continue;
      s.current = t;
      SetThreadIdx(t);
      Fiber& f = *s.fibers[static_cast<size_t>(t)];
      f.Resume();
      if (f.finished()) st.wait = Wait::kDone;
    }
    s.current = -1;
    bool released = false;
    for (int32_t w = 0; w * kWarpSize < n; ++w) {
      released = ResolveWarp(s, w, n) || released;
      if (!s.fault.empty()) return false;
    }
    int32_t live = 0, at_barrier = 0;
    for (const ThreadState& st : s.threads) {
      live += st.wait != Wait::kDone;
      at_barrier += st.wait == Wait::kBarrier;
    }
    if (live == 0) return true;
    if (!released && at_barrier == live) {
      for (ThreadState& st : s.threads) {
        if (st.wait == Wait::kBarrier) st.wait = Wait::kRunnable;
      }
      released = true;
    }
    if (!released) {
      int32_t first_barrier = -1, first_warp = -1;
      for (int32_t t = 0; t < n; ++t) {
        const Wait w = s.threads[static_cast<size_t>(t)].wait;
        if (w == Wait::kBarrier && first_barrier < 0) first_barrier = t;
        if (w == Wait::kWarp && first_warp < 0) first_warp = t;
      }
      s.fault = absl::StrCat("deadlock: ", at_barrier, " of ", live,
                             " live threads wait at __syncthreads (first: thread ", first_barrier,
                             "), the others at warp operations that cannot complete (first: "
                             "thread ",
                             first_warp, ")");
      return false;
    }
  }
}

}  // namespace

int RunGrid(Index3 grid, Index3 block, void (*body)(void*), void* arg) {
  Scheduler& s = scheduler;
  if (s.current >= 0) {
    std::fprintf(stderr, "cuda_on_cpu: a launch from inside a kernel\n");
    std::abort();
  }
  s.fault.clear();
  const uint64_t threads = uint64_t{block.x} * block.y * block.z;
  if (grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.x > 0x7fffffffu || grid.y > 65535 ||
      grid.z > 65535 || threads == 0 || threads > 1024 || block.z > 64) {
    s.fault = absl::StrCat("invalid configuration: grid (", grid.x, ", ", grid.y, ", ", grid.z,
                           "), block (", block.x, ", ", block.y, ", ", block.z, ")");
    return kInvalidConfiguration;
  }
  const int32_t n = static_cast<int32_t>(threads);
  while (s.fibers.size() < static_cast<size_t>(n)) s.fibers.push_back(std::make_unique<Fiber>());
  s.threads.assign(static_cast<size_t>(n), ThreadState{});
  s.body = body;
  s.arg = arg;
  current_block_dim = block;
  current_grid_dim = grid;
  for (unsigned z = 0; z < grid.z; ++z) {
    for (unsigned y = 0; y < grid.y; ++y) {
      for (unsigned x = 0; x < grid.x; ++x) {
        current_block_idx = {x, y, z};
        if (!RunBlock(s, n)) {
          s.fault = absl::StrCat("block (", x, ", ", y, ", ", z, "): ", s.fault);
          std::fprintf(stderr, "cuda_on_cpu: kernel fault in %s\n", s.fault.c_str());
          return kLaunchFailure;
        }
      }
    }
  }
  return kLaunchOk;
}

const std::string& LastFault() { return scheduler.fault; }

void SyncThreads() {
  Current("__syncthreads").wait = Wait::kBarrier;
  Block();
}

uint64_t WarpOp(WarpOpKind kind, uint32_t mask, uint64_t value, int32_t arg, int32_t width) {
  ThreadState& me = Current("a warp operation");
  me.kind = kind;
  me.mask = mask;
  me.value = value;
  me.arg = arg;
  me.width = width >= 1 && width <= kWarpSize && (width & (width - 1)) == 0 ? width : kWarpSize;
  me.wait = Wait::kWarp;
  Block();
  return me.result;
}

}  // namespace tandem::kernels::cuda_on_cpu
