// NCCL and CUDA IPC peer communicators (gpu_transports.h).
#include <cuda_runtime.h>
#include <nccl.h>

#include <atomic>
#include <cstring>
#include <mutex>
#include <thread>

#include "common/transport/gpu_transports.h"
#include "common/util/status_macros.h"
#include "common/util/strings.h"
#include "kernels/cuda/cuda_status.h"

namespace tandem::transport {

namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kPoll = std::chrono::microseconds(20);

// A CUDA call's status (kernels/cuda/cuda_status.h's mapping).
absl::Status Cuda(cudaError_t e, const char* what) {
  return e == cudaSuccess ? absl::OkStatus() : kernels::cuda::CudaError(e, what);
}
absl::Status Nccl(ncclResult_t r, std::string_view what) {
  if (r == ncclSuccess || r == ncclInProgress) return absl::OkStatus();
  return absl::UnavailableError(StrCat(what, ": ", ncclGetErrorString(r)));
}

std::string Hex(const unsigned char* p, size_t n) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < n; ++i) {
    out.push_back(kDigits[p[i] >> 4]);
    out.push_back(kDigits[p[i] & 15]);
  }
  return out;
}

// What both communicators share: a sticky error, an abort another thread may ask for.
class Sticky {
 public:
  absl::Status error() const {
    std::lock_guard<std::mutex> lock(mu_);
    return error_;
  }
  void Set(const absl::Status& st) {
    std::lock_guard<std::mutex> lock(mu_);
    if (error_.ok()) error_ = st;
  }

 private:
  mutable std::mutex mu_;
  absl::Status error_;
};

// --- NCCL -------------------------------------------------------------------------

class NcclComm : public PeerComm {
 public:
  NcclComm(int gpu, int rank, int nranks, ncclComm_t comm, cudaStream_t stream)
      : gpu_(gpu), rank_(rank), nranks_(nranks), comm_(comm), stream_(stream) {}
  ~NcclComm() override {
    cudaSetDevice(gpu_);
    if (comm_ != nullptr) ncclCommAbort(comm_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }

  absl::Status Send(const kernels::Buffer& src, int64_t offset, int64_t bytes,
                    PeerDeadline deadline) override {
    RETURN_IF_ERROR(Begin(src, offset, bytes, deadline));
    const void* p = static_cast<const uint8_t*>(src.address()) + offset;
    return Finish(
        Nccl(ncclSend(p, static_cast<size_t>(bytes), ncclUint8, 1 - rank_, comm_, stream_),
             "ncclSend"),
        deadline);
  }

  absl::Status Recv(const kernels::Buffer& dst, int64_t offset, int64_t bytes,
                    PeerDeadline deadline) override {
    RETURN_IF_ERROR(Begin(dst, offset, bytes, deadline));
    void* p = static_cast<uint8_t*>(dst.address()) + offset;
    return Finish(
        Nccl(ncclRecv(p, static_cast<size_t>(bytes), ncclUint8, 1 - rank_, comm_, stream_),
             "ncclRecv"),
        deadline);
  }

  // A 1-rank communicator to itself: send and receive in one group.
  absl::Status SelfTransfer(const void* src, void* dst, int64_t bytes, PeerDeadline deadline) {
    RETURN_IF_ERROR(sticky_.error());
    RETURN_IF_ERROR(Cuda(cudaSetDevice(gpu_), "cudaSetDevice"));
    RETURN_IF_ERROR(Ready(deadline));
    absl::Status st = Nccl(ncclGroupStart(), "ncclGroupStart");
    if (st.ok()) st = Nccl(ncclSend(src, bytes, ncclUint8, 0, comm_, stream_), "ncclSend");
    if (st.ok()) st = Nccl(ncclRecv(dst, bytes, ncclUint8, 0, comm_, stream_), "ncclRecv");
    if (absl::Status end = Nccl(ncclGroupEnd(), "ncclGroupEnd"); st.ok()) st = end;
    return Finish(st, deadline);
  }

  void Abort(const absl::Status& why) override {
    sticky_.Set(why);
    abort_requested_ = true;  // carried out by the issuing thread's poll (or the destructor)
  }

 private:
  absl::Status Begin(const kernels::Buffer& b, int64_t offset, int64_t bytes,
                     PeerDeadline deadline) {
    RETURN_IF_ERROR(sticky_.error());
    if (nranks_ != 2) return absl::InternalError("NCCL peer comm: not a pair");
    RETURN_IF_ERROR(CheckPeerRange(b, offset, bytes));
    RETURN_IF_ERROR(Cuda(cudaSetDevice(gpu_), "cudaSetDevice"));
    return Ready(deadline);
  }

  // Waits for the non-blocking init (both ranks joined).
  absl::Status Ready(PeerDeadline deadline) {
    if (ready_) return absl::OkStatus();
    for (;;) {
      ncclResult_t state = ncclSuccess;
      absl::Status st = Nccl(ncclCommGetAsyncError(comm_, &state), "ncclCommGetAsyncError");
      if (st.ok() && state == ncclSuccess) {
        ready_ = true;
        return absl::OkStatus();
      }
      if (st.ok() && state != ncclInProgress) st = Nccl(state, "NCCL communicator init");
      if (st.ok() && Clock::now() >= deadline) {
        st = absl::DeadlineExceededError("NCCL: the peer did not join the communicator in time");
      }
      if (st.ok() && abort_requested_) st = sticky_.error();
      if (!st.ok()) return Broken(st);
      std::this_thread::sleep_for(kPoll);
    }
  }

  // After an enqueue: on a non-blocking communicator the call may return ncclInProgress
  // before anything is on the stream, so first the communicator's state must leave
  // ncclInProgress, and only then does an idle stream mean the bytes have moved. Fails
  // on an error, an abort or the deadline.
  absl::Status Finish(absl::Status enqueued, PeerDeadline deadline) {
    if (!enqueued.ok()) return Broken(enqueued);
    bool issued = false;
    for (;;) {
      absl::Status st;
      ncclResult_t state = ncclSuccess;
      st = Nccl(ncclCommGetAsyncError(comm_, &state), "ncclCommGetAsyncError");
      if (st.ok() && state != ncclInProgress) st = Nccl(state, "NCCL");
      if (st.ok() && state == ncclSuccess) issued = true;
      if (st.ok() && issued) {
        const cudaError_t q = cudaStreamQuery(stream_);
        if (q == cudaSuccess) return absl::OkStatus();
        if (q != cudaErrorNotReady) st = Cuda(q, "NCCL stream");
      }
      if (st.ok() && Clock::now() >= deadline) {
        st = absl::DeadlineExceededError("NCCL: a transfer did not complete in time");
      }
      if (st.ok() && abort_requested_) st = sticky_.error();
      if (!st.ok()) return Broken(st);
      std::this_thread::sleep_for(kPoll);
    }
  }

  // Aborts the communicator (the issuing thread) and keeps the first error.
  absl::Status Broken(const absl::Status& st) {
    sticky_.Set(st);
    if (comm_ != nullptr) {
      ncclCommAbort(comm_);
      comm_ = nullptr;
    }
    return sticky_.error();
  }

  const int gpu_, rank_, nranks_;
  ncclComm_t comm_;
  cudaStream_t stream_;
  bool ready_ = false;
  std::atomic<bool> abort_requested_{false};
  Sticky sticky_;
};

absl::StatusOr<std::unique_ptr<NcclComm>> InitNccl(int gpu, const ncclUniqueId& id, int rank,
                                                   int nranks) {
  RETURN_IF_ERROR(Cuda(cudaSetDevice(gpu), "cudaSetDevice"));
  cudaStream_t stream = nullptr;
  RETURN_IF_ERROR(
      Cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate"));
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // the peer joins later, through the handshake
  ncclComm_t comm = nullptr;
  if (absl::Status st =
          Nccl(ncclCommInitRankConfig(&comm, nranks, id, rank, &config), "ncclCommInitRank");
      !st.ok()) {
    cudaStreamDestroy(stream);
    return st;
  }
  return std::make_unique<NcclComm>(gpu, rank, nranks, comm, stream);
}

class NcclFactory : public PeerCommFactory {
 public:
  explicit NcclFactory(int gpu) : gpu_(gpu) {}
  std::string_view name() const override { return "nccl"; }

  absl::StatusOr<Created> Create() override {
    ncclUniqueId id;
    RETURN_IF_ERROR(Nccl(ncclGetUniqueId(&id), "ncclGetUniqueId"));
    auto comm = InitNccl(gpu_, id, 0, 2);
    if (!comm.ok()) return comm.status();
    return Created{std::string(id.internal, sizeof(id.internal)), *std::move(comm)};
  }

  absl::StatusOr<std::unique_ptr<PeerComm>> Join(std::string_view id) override {
    ncclUniqueId uid;
    if (id.size() != sizeof(uid.internal)) {
      return absl::InvalidArgumentError(StrCat(
          "peer.comm_id: ", id.size(), " bytes, an ncclUniqueId has ", sizeof(uid.internal)));
    }
    std::memcpy(uid.internal, id.data(), id.size());
    auto comm = InitNccl(gpu_, uid, 1, 2);
    if (!comm.ok()) return comm.status();
    return std::unique_ptr<PeerComm>(std::move(*comm));
  }

 private:
  const int gpu_;
};

// --- CUDA IPC ring ---------------------------------------------------------------------

constexpr int64_t kHeaderBytes = 256;
constexpr int64_t kProduced = 0, kConsumed = 8, kAborted = 16;  // header words
constexpr std::string_view kIpcMagic = "tandem-ipc-ring1";
constexpr int64_t kMaxRingBytes = int64_t{4} << 30;

struct IpcId {
  cudaIpcMemHandle_t handle;
  int64_t ring_bytes;
  unsigned char uuid[16];
};

class IpcComm : public PeerComm {
 public:
  // `base`: the ring (header then data), owned (rank 0: cudaMalloc'd) or mapped (rank 1).
  IpcComm(int gpu, int rank, uint8_t* base, int64_t ring_bytes, cudaStream_t stream)
      : gpu_(gpu), rank_(rank), base_(base), ring_(ring_bytes), stream_(stream) {}
  ~IpcComm() override {
    cudaSetDevice(gpu_);
    WriteWord(kAborted, 1).IgnoreError();  // best effort: the peer stops waiting
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
    if (rank_ == 0) {
      cudaFree(base_);
    } else {
      cudaIpcCloseMemHandle(base_);
    }
  }

  absl::Status Send(const kernels::Buffer& src, int64_t offset, int64_t bytes,
                    PeerDeadline deadline) override {
    if (rank_ != 0) return absl::InternalError("CUDA IPC ring: only its owner sends");
    return Move(src, offset, bytes, deadline, /*send=*/true);
  }
  absl::Status Recv(const kernels::Buffer& dst, int64_t offset, int64_t bytes,
                    PeerDeadline deadline) override {
    if (rank_ != 1) return absl::InternalError("CUDA IPC ring: only its mapper receives");
    return Move(dst, offset, bytes, deadline, /*send=*/false);
  }
  void Abort(const absl::Status& why) override {
    sticky_.Set(why);
    abort_requested_ = true;
  }

 private:
  absl::Status Move(const kernels::Buffer& b, int64_t offset, int64_t bytes, PeerDeadline deadline,
                    bool send) {
    RETURN_IF_ERROR(sticky_.error());
    RETURN_IF_ERROR(CheckPeerRange(b, offset, bytes));
    RETURN_IF_ERROR(Cuda(cudaSetDevice(gpu_), "cudaSetDevice"));
    uint8_t* mine = static_cast<uint8_t*>(b.address()) + offset;
    int64_t done = 0;
    while (done < bytes) {
      // Room to write (send) or bytes to read (receive), from the other side's cursor.
      uint64_t theirs = 0;
      absl::Status st = ReadWord(send ? kConsumed : kProduced, &theirs);
      uint64_t aborted = 0;
      if (st.ok()) st = ReadWord(kAborted, &aborted);
      if (st.ok() && aborted != 0) st = absl::AbortedError("CUDA IPC ring: the peer aborted");
      if (st.ok() && abort_requested_) st = sticky_.error();
      if (st.ok() && Clock::now() >= deadline) {
        // Checked on every round: a peer that trickles bytes does not extend it.
        st = absl::DeadlineExceededError("CUDA IPC ring: the transfer did not complete in time");
      }
      if (!st.ok()) return Broken(st);
      const int64_t avail = send ? ring_ - static_cast<int64_t>(cursor_ - theirs)
                                 : static_cast<int64_t>(theirs - cursor_);
      if (avail <= 0) {
        std::this_thread::sleep_for(kPoll);
        continue;
      }
      const int64_t pos = static_cast<int64_t>(cursor_ % static_cast<uint64_t>(ring_));
      const int64_t n = std::min({avail, bytes - done, ring_ - pos});
      uint8_t* slot = base_ + kHeaderBytes + pos;
      st = Cuda(cudaMemcpyAsync(send ? slot : mine + done, send ? mine + done : slot,
                                static_cast<size_t>(n), cudaMemcpyDeviceToDevice, stream_),
                "CUDA IPC copy");
      cursor_ += static_cast<uint64_t>(n);
      if (st.ok()) st = WriteWord(send ? kProduced : kConsumed, cursor_);  // syncs the stream
      if (!st.ok()) return Broken(st);
      done += n;
    }
    return absl::OkStatus();
  }

  absl::Status ReadWord(int64_t word, uint64_t* out) {
    RETURN_IF_ERROR(Cuda(cudaMemcpyAsync(out, base_ + word, 8, cudaMemcpyDeviceToHost, stream_),
                         "CUDA IPC ring header"));
    return Cuda(cudaStreamSynchronize(stream_), "CUDA IPC ring header");
  }
  absl::Status WriteWord(int64_t word, uint64_t value) {
    RETURN_IF_ERROR(Cuda(cudaMemcpyAsync(base_ + word, &value, 8, cudaMemcpyHostToDevice, stream_),
                         "CUDA IPC ring header"));
    return Cuda(cudaStreamSynchronize(stream_), "CUDA IPC ring header");
  }

  absl::Status Broken(const absl::Status& st) {
    sticky_.Set(st);
    WriteWord(kAborted, 1).IgnoreError();  // best effort: the peer stops waiting
    return sticky_.error();
  }

  const int gpu_, rank_;
  uint8_t* const base_;
  const int64_t ring_;
  cudaStream_t stream_;
  uint64_t cursor_ = 0;  // bytes this side has produced (rank 0) or consumed (rank 1)
  std::atomic<bool> abort_requested_{false};
  Sticky sticky_;
};

class IpcFactory : public PeerCommFactory {
 public:
  IpcFactory(int gpu, int64_t ring_bytes) : gpu_(gpu), ring_(ring_bytes) {}
  std::string_view name() const override { return "cuda-ipc"; }

  absl::StatusOr<Created> Create() override {
    RETURN_IF_ERROR(Cuda(cudaSetDevice(gpu_), "cudaSetDevice"));
    IpcId id{};
    id.ring_bytes = ring_;
    cudaDeviceProp prop;
    RETURN_IF_ERROR(Cuda(cudaGetDeviceProperties(&prop, gpu_), "cudaGetDeviceProperties"));
    std::memcpy(id.uuid, prop.uuid.bytes, sizeof(id.uuid));
    void* base = nullptr;
    RETURN_IF_ERROR(Cuda(cudaMalloc(&base, static_cast<size_t>(kHeaderBytes + ring_)),
                         "cudaMalloc (CUDA IPC ring)"));
    cudaStream_t stream = nullptr;
    absl::Status st =
        Cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
    // The header zeroed before anyone reads it (the ring's stream orders nothing else).
    if (st.ok()) st = Cuda(cudaMemsetAsync(base, 0, kHeaderBytes, stream), "cudaMemsetAsync");
    if (st.ok()) st = Cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    if (st.ok()) st = Cuda(cudaIpcGetMemHandle(&id.handle, base), "cudaIpcGetMemHandle");
    if (!st.ok()) {
      if (stream != nullptr) cudaStreamDestroy(stream);
      cudaFree(base);
      return st;
    }
    std::string bytes(kIpcMagic);
    bytes.append(reinterpret_cast<const char*>(&id), sizeof(id));
    return Created{std::move(bytes),
                   std::make_unique<IpcComm>(gpu_, 0, static_cast<uint8_t*>(base), ring_, stream)};
  }

  absl::StatusOr<std::unique_ptr<PeerComm>> Join(std::string_view bytes) override {
    if (bytes.size() != kIpcMagic.size() + sizeof(IpcId) || !bytes.starts_with(kIpcMagic)) {
      return absl::InvalidArgumentError("peer.comm_id: not a CUDA IPC ring's id");
    }
    IpcId id;
    std::memcpy(&id, bytes.data() + kIpcMagic.size(), sizeof(id));
    // The size comes off the network: bounded (a larger claim than the mapping would
    // make the receiver copy past it).
    if (id.ring_bytes <= 0 || id.ring_bytes > kMaxRingBytes) {
      return absl::InvalidArgumentError(
          StrCat("peer.comm_id: a ring of ", id.ring_bytes, " bytes (1 .. ", kMaxRingBytes, ")"));
    }
    RETURN_IF_ERROR(Cuda(cudaSetDevice(gpu_), "cudaSetDevice"));
    cudaDeviceProp prop;
    RETURN_IF_ERROR(Cuda(cudaGetDeviceProperties(&prop, gpu_), "cudaGetDeviceProperties"));
    if (std::memcmp(prop.uuid.bytes, id.uuid, sizeof(id.uuid)) != 0) {
      return absl::FailedPreconditionError(
          StrCat("peer: the CUDA IPC ring is on GPU ", Hex(id.uuid, sizeof(id.uuid)),
                 ", this decode worker on ",
                 Hex(reinterpret_cast<const unsigned char*>(prop.uuid.bytes), 16)));
    }
    void* base = nullptr;
    RETURN_IF_ERROR(Cuda(cudaIpcOpenMemHandle(&base, id.handle, cudaIpcMemLazyEnablePeerAccess),
                         "cudaIpcOpenMemHandle"));
    cudaStream_t stream = nullptr;
    if (absl::Status st =
            Cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
        !st.ok()) {
      cudaIpcCloseMemHandle(base);
      return st;
    }
    return std::unique_ptr<PeerComm>(
        new IpcComm(gpu_, 1, static_cast<uint8_t*>(base), id.ring_bytes, stream));
  }

 private:
  const int gpu_;
  const int64_t ring_;
};

}  // namespace

bool PeerTransportsBuilt() { return true; }

absl::StatusOr<std::string> GpuUuid(int gpu) {
  cudaDeviceProp prop;
  RETURN_IF_ERROR(Cuda(cudaGetDeviceProperties(&prop, gpu), "cudaGetDeviceProperties"));
  return Hex(reinterpret_cast<const unsigned char*>(prop.uuid.bytes), sizeof(prop.uuid.bytes));
}

absl::StatusOr<std::unique_ptr<PeerCommFactory>> MakeNcclFactory(int gpu) {
  int n = 0;
  RETURN_IF_ERROR(Cuda(cudaGetDeviceCount(&n), "cudaGetDeviceCount"));
  if (gpu < 0 || gpu >= n) {
    return absl::InvalidArgumentError(StrCat("--gpu: ", gpu, " outside the ", n, " GPUs here"));
  }
  return std::unique_ptr<PeerCommFactory>(new NcclFactory(gpu));
}

absl::StatusOr<std::unique_ptr<PeerCommFactory>> MakeCudaIpcFactory(int gpu, int64_t ring_bytes) {
  int n = 0;
  RETURN_IF_ERROR(Cuda(cudaGetDeviceCount(&n), "cudaGetDeviceCount"));
  if (gpu < 0 || gpu >= n) {
    return absl::InvalidArgumentError(StrCat("--gpu: ", gpu, " outside the ", n, " GPUs here"));
  }
  if (ring_bytes <= 0 || ring_bytes > kMaxRingBytes) {
    return absl::InvalidArgumentError(StrCat("CUDA IPC ring: ", ring_bytes, " bytes"));
  }
  return std::unique_ptr<PeerCommFactory>(new IpcFactory(gpu, ring_bytes));
}

absl::Status NcclSelfTransfer(int gpu, const void* src, void* dst, int64_t bytes) {
  ncclUniqueId id;
  RETURN_IF_ERROR(Nccl(ncclGetUniqueId(&id), "ncclGetUniqueId"));
  auto comm = InitNccl(gpu, id, 0, 1);
  if (!comm.ok()) return comm.status();
  return (*comm)->SelfTransfer(src, dst, bytes, Clock::now() + std::chrono::seconds(30));
}

}  // namespace tandem::transport
