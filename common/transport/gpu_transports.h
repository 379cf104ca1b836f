// The peer communicators that need a GPU: NCCL (two GPUs) and a CUDA IPC ring (two
// processes on one GPU). Built only with CUDA (gpu_transports_cuda.cc); without it
// every factory answers Unimplemented and PeerTransportsBuilt() is false.
//
// NCCL: one 2-rank communicator per pair, initialised non-blocking (the handshake
// returns at once; the first Send/Recv waits for both ranks until its deadline); one
// stream per communicator; each Send/Recv polls its stream and the communicator's
// async error, and at the deadline or on an error calls ncclCommAbort on the issuing
// thread (an Abort from another thread is noted and carried out there).
//
// CUDA IPC: the sending side allocates a ring in its device memory — a 256-byte header
// (bytes produced, bytes consumed, an abort word) and `ring_bytes` of data — and
// exports it with cudaIpcGetMemHandle; the id carries the handle, the ring size and the
// GPU's UUID. The receiving side (which must be on that GPU) maps it; Send copies into
// the ring and advances `produced`, Recv copies out and advances `consumed`, each
// waiting (polling) for room or data until its deadline. Every copy runs on the
// communicator's own stream.
#ifndef TANDEM_COMMON_TRANSPORT_GPU_TRANSPORTS_H_
#define TANDEM_COMMON_TRANSPORT_GPU_TRANSPORTS_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/transport/peer_comm.h"

namespace tandem::transport {

bool PeerTransportsBuilt();

// The UUID of GPU `gpu`, 32 hex digits.
absl::StatusOr<std::string> GpuUuid(int gpu);

absl::StatusOr<std::unique_ptr<PeerCommFactory>> MakeNcclFactory(int gpu);
absl::StatusOr<std::unique_ptr<PeerCommFactory>> MakeCudaIpcFactory(int gpu,
                                                                    int64_t ring_bytes = int64_t{64}
                                                                                         << 20);

// NCCL on one GPU, as far as it goes (it refuses two ranks on one device): a 1-rank
// communicator sends `bytes` of `src` to itself into `dst` through the same
// issue-and-poll path as the pair. For tests/gpu.
absl::Status NcclSelfTransfer(int gpu, const void* src, void* dst, int64_t bytes);

}  // namespace tandem::transport

#endif  // TANDEM_COMMON_TRANSPORT_GPU_TRANSPORTS_H_
