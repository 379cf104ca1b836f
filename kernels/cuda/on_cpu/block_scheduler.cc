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

// The result of `lane`'s warp operation, from the values of the lanes taking part
// (`live`: the mask's lanes that exist and have not returned). False, with the fault,
// when a shuffle reads a lane that does not take part (undefined in CUDA).
bool Resolve(const std::vector<ThreadState>& t, int32_t base, int32_t lane, uint32_t live,
             uint64_t* result, std::string* fault) {
  const ThreadState& me = t[static_cast<size_t>(base + lane)];
  const int32_t w = me.width;
  const int32_t seg = lane & ~(w - 1);  // the segment's first lane
  auto read = [&](int32_t src) {
    if (src < 0 || src >= kWarpSize || !(live >> src & 1u)) {
      *fault =
          absl::StrCat("lane ", lane, " of warp ", base / kWarpSize, " shuffles from lane ", src,
                       ", which does not take part (outside the mask, returned, or "
                       "not in the block)");
      return false;
    }
    *result = t[static_cast<size_t>(base + src)].value;
    return true;
  };
  uint64_t ballot = 0;
  for (int32_t l = 0; l < kWarpSize; ++l) {
    if ((live >> l & 1u) && t[static_cast<size_t>(base + l)].value != 0) ballot |= uint64_t{1} << l;
  }
  switch (me.kind) {
    case WarpOpKind::kSync:
      *result = 0;
      return true;
    case WarpOpKind::kShuffle:
      return read(seg + (me.arg & (w - 1)));
    case WarpOpKind::kShuffleXor: {
      const int32_t src = lane ^ me.arg;
      if ((src & ~(w - 1)) > seg) {  // a later segment: the lane's own value
        *result = me.value;
        return true;
      }
      return read(src);
    }
    case WarpOpKind::kShuffleUp:
      if (lane - me.arg < seg) {
        *result = me.value;
        return true;
      }
      return read(lane - me.arg);
    case WarpOpKind::kShuffleDown:
      if (lane + me.arg >= seg + w) {
        *result = me.value;
        return true;
      }
      return read(lane + me.arg);
    case WarpOpKind::kBallot:
      *result = ballot;
      return true;
    case WarpOpKind::kAny:
      *result = ballot != 0;
      return true;
    case WarpOpKind::kAll:
      *result = ballot == live;
      return true;
  }
  return true;
}

// Resolves the warp operations of warp `w` whose lanes have all arrived — every lane
// their mask names that exists and has not returned waits at the same operation with
// the same mask — and releases those lanes; true if any was released. A group whose
// lanes are elsewhere (a barrier, another operation) waits: if the block can never
// move, RunBlock reports the deadlock. A fault is left in s.fault.
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
    uint32_t live = 0;
    bool complete = true;
    for (int32_t l = 0; l < lanes; ++l) {
      const ThreadState& t = s.threads[static_cast<size_t>(base + l)];
      if (!(mask >> l & 1u) || t.wait == Wait::kDone) continue;
      live |= 1u << l;
      if (t.wait != Wait::kWarp || t.mask != mask || t.kind != first.kind ||
          t.width != first.width) {
        complete = false;
      }
    }
    if (!complete) continue;
    for (int32_t l = 0; l < kWarpSize; ++l) {
      if (!(live >> l & 1u)) continue;
      ThreadState& t = s.threads[static_cast<size_t>(base + l)];
      if (!Resolve(s.threads, base, l, live, &t.result, &s.fault)) return false;
    }
    for (int32_t l = 0; l < kWarpSize; ++l) {
      if (live >> l & 1u) s.threads[static_cast<size_t>(base + l)].wait = Wait::kRunnable;
    }
    released = true;
  }
  return released;
}

// Runs one block to its end; false on a fault (in s.fault).
bool RunBlock(Scheduler& s, int32_t n, int64_t block) {
  for (int32_t t = 0; t < n; ++t) {
    s.threads[static_cast<size_t>(t)] = ThreadState{};
    s.fibers[static_cast<size_t>(t)]->Reset(&ThreadMain, nullptr);
  }
  for (int64_t round = 0;; ++round) {
    // Forward and backward in turn, odd blocks starting backward: whichever way a
    // missing barrier lets threads overtake each other, some block shows it.
    const bool forward = (round + block) % 2 == 0;
    for (int32_t k = 0; k < n; ++k) {
      const int32_t t = forward ? k : n - 1 - k;
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
                             " live threads wait at __syncthreads (first: "
                             "thread ",
                             first_barrier,
                             "), the others at warp operations whose lanes wait "
                             "elsewhere — a barrier, or another operation or mask (first: thread ",
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
        if (!RunBlock(s, n, x + int64_t{grid.x} * (y + int64_t{grid.y} * z))) {
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
