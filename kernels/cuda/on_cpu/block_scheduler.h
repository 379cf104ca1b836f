// The CPU shim's scheduler: runs a CUDA grid on the calling thread, block after block,
// each block's threads as fibers (fiber.h), so that tandem's own kernels run in CTest
// on machines without a GPU (cuda_on_cpu.h is the CUDA C++ surface on top of this).
//
// Within a block every thread runs until it reaches a synchronisation point — a
// __syncthreads barrier or a warp operation (shuffle, vote, __syncwarp) — or returns;
// then the scheduler resolves what can be resolved and runs the released threads
// again. Threads run in index order and in reverse order in turn (odd blocks start
// reversed), each as far ahead as the code lets it, so a missing barrier shows up as a
// read of a value another thread has not written yet (or has already overwritten).
//   - A barrier is passed when every thread of the block that has not returned waits
//     at one (returned threads do not count, as on sm_70 and later).
//   - A warp operation is resolved when every lane its mask names — of those that exist
//     and have not returned, as the CUDA programming guide has it — waits at the same
//     operation with the same mask; results are computed from those lanes' values.
//   - Faults end the launch: a shuffle reading a lane that takes no part (outside the
//     mask, returned, not in the block: undefined on a GPU), a mask without the
//     caller's own lane, and a block where no thread can move (a barrier some threads
//     never reach while others wait at a warp operation; lanes waiting at different
//     operations). The grid stops, the fault is printed to stderr and kept for
//     LastFault(), and RunGrid returns kLaunchFailure.
//
// Not modelled: concurrency between blocks (blocks run one at a time, so a race
// between blocks, or a kernel that waits for another block, is not found), memory
// spaces (every pointer is host memory; run the tests under ASan to check bounds;
// shared memory keeps the previous block's bytes, so a read of a slot never written
// sees stale values, not garbage), and timing. Thread-safe: each OS thread has its own
// scheduler state.
#ifndef TANDEM_KERNELS_CUDA_ON_CPU_BLOCK_SCHEDULER_H_
#define TANDEM_KERNELS_CUDA_ON_CPU_BLOCK_SCHEDULER_H_

#include <cstdint>
#include <string>

namespace tandem::kernels::cuda_on_cpu {

// CUDA's uint3 / dim3 fields.
struct Index3 {
  unsigned x = 1, y = 1, z = 1;
};

// The running thread's built-in variables (threadIdx, blockIdx, blockDim, gridDim),
// set by the scheduler before each fiber runs.
extern thread_local Index3 current_thread_idx;
extern thread_local Index3 current_block_idx;
extern thread_local Index3 current_block_dim;
extern thread_local Index3 current_grid_dim;

// RunGrid's results: cudaError_t's values.
constexpr int kLaunchOk = 0;
constexpr int kInvalidConfiguration = 9;  // an empty grid or block, or one past CUDA's limits
constexpr int kLaunchFailure = 719;       // a fault inside the kernel (above)

// Runs `body(arg)` once for every thread of every block of `grid` (blocks of `block`
// threads, at most 1,024). Not from inside a kernel.
int RunGrid(Index3 grid, Index3 block, void (*body)(void*), void* arg);

// The fault of this OS thread's last RunGrid ("" if it had none).
const std::string& LastFault();

// --- from inside a kernel (a fiber of RunGrid) ------------------------------------
void SyncThreads();

enum class WarpOpKind : int32_t {
  kSync,         // __syncwarp
  kShuffle,      // __shfl_sync: the value of lane `arg` of the segment
  kShuffleXor,   // __shfl_xor_sync: of lane ^ arg
  kShuffleUp,    // __shfl_up_sync: of lane − arg (own value below the segment)
  kShuffleDown,  // __shfl_down_sync: of lane + arg (own value past the segment)
  kBallot,       // __ballot_sync: bit l set where lane l gave a non-zero value
  kAny,          // __any_sync
  kAll,          // __all_sync
};

// One warp operation of the calling lane: `value` is its operand (the bytes of a
// shuffled value, or a predicate), `width` the shuffle segment (a power of two ≤ 32).
uint64_t WarpOp(WarpOpKind kind, uint32_t mask, uint64_t value, int32_t arg, int32_t width);

}  // namespace tandem::kernels::cuda_on_cpu

#endif  // TANDEM_KERNELS_CUDA_ON_CPU_BLOCK_SCHEDULER_H_
