#include "kernels/cuda/cuda_backend.h"

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <tuple>

#include "absl/container/flat_hash_map.h"
#include "common/util/status_macros.h"
#include "common/util/strings.h"
#include "kernels/cuda/attention_kernels.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/ops_kernels.h"
#include "kernels/kv_storage.h"

namespace tandem::kernels::cuda {

namespace {

absl::Status BlasError(cublasStatus_t st, std::string_view what) {
  return absl::InternalError(StrCat("cuda backend: ", what, ": ", cublasLtGetStatusString(st)));
}

#define TANDEM_BLAS_OK(expr)                                                     \
  do {                                                                           \
    if (cublasStatus_t tandem_s_ = (expr); tandem_s_ != CUBLAS_STATUS_SUCCESS) { \
      return BlasError(tandem_s_, #expr);                                        \
    }                                                                            \
  } while (0)

// The bytes of a backend's live buffers (shared with them: a buffer may outlive it).
using ByteCount = std::shared_ptr<std::atomic<int64_t>>;

class CudaBuffer : public Buffer {
 public:
  CudaBuffer(void* p, int64_t bytes, MemoryKind kind, int gpu, ByteCount live)
      : Buffer(p, bytes, kind), gpu_(gpu), live_(std::move(live)) {
    *live_ += bytes;
  }
  ~CudaBuffer() override {
    cudaSetDevice(gpu_);
    cudaFree(address());
    *live_ -= bytes();
  }

 private:
  const int gpu_;
  const ByteCount live_;
};

std::string_view DeviceErrorText(int32_t code) {
  switch (code) {
    case kBadTokenId:
      return "embedding: a token id outside the table";
    case kBadRowIndex:
      return "gather: a row index outside the source";
    case kBadSlot:
      return "write_kv: a slot outside the KV storage";
    default:
      return "a kernel reported an unknown error";
  }
}

// Wait: the pass's error when the event was recorded (an op already failed), else the
// stream up to the event, then the device error word (a bad index a kernel saw) — so a
// transport never ships the K/V of a failed pass as good.
class CudaEvent : public Event {
 public:
  CudaEvent(cudaEvent_t e, int gpu, absl::Status status, const int32_t* d_error)
      : event_(e), gpu_(gpu), status_(std::move(status)), d_error_(d_error) {}
  ~CudaEvent() override {
    if (event_ == nullptr) return;
    cudaSetDevice(gpu_);
    cudaEventDestroy(event_);
  }
  absl::Status Wait() override {
    if (!status_.ok()) return status_;
    TANDEM_CUDA_OK(cudaSetDevice(gpu_));
    TANDEM_CUDA_OK(cudaEventSynchronize(event_));
    int32_t code = 0;
    TANDEM_CUDA_OK(cudaMemcpy(&code, d_error_, sizeof(code), cudaMemcpyDeviceToHost));
    if (code != 0)
      return absl::InvalidArgumentError(StrCat("cuda backend: ", DeviceErrorText(code)));
    return absl::OkStatus();
  }

 private:
  const cudaEvent_t event_;
  const int gpu_;
  const absl::Status status_;
  const int32_t* const d_error_;
};

class CudaGraph : public Graph {
 public:
  CudaGraph(cudaGraph_t graph, cudaGraphExec_t exec, int gpu, int64_t scratch_epoch)
      : graph_(graph), exec_(exec), gpu_(gpu), scratch_epoch_(scratch_epoch) {}
  ~CudaGraph() override {
    cudaSetDevice(gpu_);
    cudaGraphExecDestroy(exec_);
    cudaGraphDestroy(graph_);
  }
  cudaGraphExec_t exec() const { return exec_; }
  int64_t scratch_epoch() const { return scratch_epoch_; }

 private:
  const cudaGraph_t graph_;
  const cudaGraphExec_t exec_;
  const int gpu_;
  const int64_t scratch_epoch_;  // the scratch its kernels point into
};

bool Inside(const Buffer& b, int64_t offset, int64_t bytes) {
  return offset >= 0 && bytes >= 0 && offset + bytes <= b.bytes();
}

template <class T = float>
T* Dev(const Tensor& t) {
  return reinterpret_cast<T*>(static_cast<uint8_t*>(t.buffer->address()) + t.offset);
}

tile::KvGeometry Geometry(const kv::KvLayout& l) {
  return {l.BlockElements(), l.LayerStride(), l.PartStride(),
          l.block_size,      l.n_kv_heads,    l.head_dim};
}

Elem ElemOf(kv::KvDtype d) {
  switch (d) {
    case kv::KvDtype::kBF16:
      return Elem::kBF16;
    case kv::KvDtype::kF16:
      return Elem::kF16;
    default:
      return Elem::kF32;
  }
}

// One GEMM shape's cuBLASLt descriptors and chosen algorithm.
struct GemmPlan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  ~GemmPlan() {
    if (c != nullptr) cublasLtMatrixLayoutDestroy(c);
    if (b != nullptr) cublasLtMatrixLayoutDestroy(b);
    if (a != nullptr) cublasLtMatrixLayoutDestroy(a);
    if (op != nullptr) cublasLtMatmulDescDestroy(op);
  }
};

}  // namespace

struct CudaBackend::State {
  cudaStream_t stream = nullptr;
  cudaStream_t read_stream = nullptr;  // ReadNow's
  cublasLtHandle_t lt = nullptr;
  int32_t* d_error = nullptr;  // the device error word (DeviceError)
  int32_t* h_error = nullptr;  // pinned mirror, read at Synchronize
  void* gemm_ws = nullptr;
  uint16_t* x_bf16 = nullptr;  // a GEMM's activation operand
  int64_t x_bf16_elems = 0;
  float* attn_ws = nullptr;  // split-K partials
  int64_t attn_ws_floats = 0;
  int64_t scratch_epoch = 0;  // ScratchEpoch(): + 1 whenever x_bf16 or attn_ws moves
  ByteCount live = std::make_shared<std::atomic<int64_t>>(0);  // Allocate's buffers
  // (m, n, k) → plan; bounded by the distinct pass sizes times the weight shapes.
  absl::flat_hash_map<std::tuple<int64_t, int64_t, int64_t>, std::unique_ptr<GemmPlan>> plans;
  // Batch-invariant mode: (n, k) → the one algorithm every m uses.
  absl::flat_hash_map<std::pair<int64_t, int64_t>, cublasLtMatmulAlgo_t> pinned;

  // The first algorithm cuBLASLt's heuristic offers for `p`'s shape; `no_reduction`
  // excludes split-K and every other scheme that splits a dot product across blocks.
  absl::StatusOr<cublasLtMatmulAlgo_t> Heuristic(const GemmPlan& p, int64_t ws_bytes,
                                                 bool no_reduction) {
    cublasLtMatmulPreference_t pref = nullptr;
    TANDEM_BLAS_OK(cublasLtMatmulPreferenceCreate(&pref));
    const uint64_t ws = static_cast<uint64_t>(ws_bytes);
    const uint32_t none = CUBLASLT_REDUCTION_SCHEME_NONE;
    cublasStatus_t st = cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws));
    // Outputs sit in the executor's workspace at 64-byte (not 256-byte) boundaries.
    const uint32_t align = 64;
    for (auto attr :
         {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES}) {
      if (st == CUBLAS_STATUS_SUCCESS) {
        st = cublasLtMatmulPreferenceSetAttribute(pref, attr, &align, sizeof(align));
      }
    }
    if (st == CUBLAS_STATUS_SUCCESS && no_reduction) {
      st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
                                                &none, sizeof(none));
    }
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    if (st == CUBLAS_STATUS_SUCCESS) {
      st = cublasLtMatmulAlgoGetHeuristic(lt, p.op, p.a, p.b, p.c, p.c, pref, 1, &result, &found);
    }
    cublasLtMatmulPreferenceDestroy(pref);
    if (st != CUBLAS_STATUS_SUCCESS) return BlasError(st, "cublasLtMatmulAlgoGetHeuristic");
    if (found == 0) return absl::InternalError("cuda backend: cuBLASLt offers no algorithm");
    return result.algo;
  }

  // Row-major out [m][n] = x [m][k] · W [n][k]ᵀ is, column-major, outᵀ (n × m) =
  // op(A)·B with A = W as a k × n matrix (ld k) transposed and B = xᵀ (k × m, ld k).
  static absl::Status Describe(GemmPlan* p, int64_t m, int64_t n, int64_t k) {
    TANDEM_BLAS_OK(cublasLtMatmulDescCreate(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t t = CUBLAS_OP_T, nt = CUBLAS_OP_N;
    TANDEM_BLAS_OK(
        cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof(t)));
    TANDEM_BLAS_OK(
        cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &nt, sizeof(nt)));
    TANDEM_BLAS_OK(cublasLtMatrixLayoutCreate(&p->a, CUDA_R_16BF, k, n, k));
    TANDEM_BLAS_OK(cublasLtMatrixLayoutCreate(&p->b, CUDA_R_16BF, k, m, k));
    TANDEM_BLAS_OK(cublasLtMatrixLayoutCreate(&p->c, CUDA_R_32F, n, m, n));
    return absl::OkStatus();
  }

  absl::StatusOr<GemmPlan*> Plan(int64_t m, int64_t n, int64_t k, int64_t ws_bytes,
                                 bool batch_invariant) {
    auto& slot = plans[{m, n, k}];
    if (slot != nullptr) return slot.get();
    auto p = std::make_unique<GemmPlan>();
    if (absl::Status st = Describe(p.get(), m, n, k); !st.ok()) return st;
    if (!batch_invariant) {
      absl::StatusOr<cublasLtMatmulAlgo_t> algo = Heuristic(*p, ws_bytes, false);
      if (!algo.ok()) {
        return absl::InternalError(
            StrCat(algo.status().message(), " for a ", m, "x", n, "x", k, " GEMM"));
      }
      p->algo = *algo;
    } else {
      // One algorithm per weight shape, the heuristic's choice for 64 rows with split-K
      // off; every m must accept it (a row's summation order then never depends on m).
      auto it = pinned.find({n, k});
      if (it == pinned.end()) {
        GemmPlan reference;
        if (absl::Status st = Describe(&reference, 64, n, k); !st.ok()) return st;
        absl::StatusOr<cublasLtMatmulAlgo_t> algo = Heuristic(reference, ws_bytes, true);
        if (!algo.ok()) return algo.status();
        const int32_t one = 1;
        TANDEM_BLAS_OK(cublasLtMatmulAlgoConfigSetAttribute(&*algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM,
                                                            &one, sizeof(one)));
        it = pinned.emplace(std::pair{n, k}, *algo).first;
      }
      p->algo = it->second;
      cublasLtMatmulHeuristicResult_t check{};
      if (cublasStatus_t st =
              cublasLtMatmulAlgoCheck(lt, p->op, p->a, p->b, p->c, p->c, &p->algo, &check);
          st != CUBLAS_STATUS_SUCCESS || check.workspaceSize > static_cast<size_t>(ws_bytes)) {
        return absl::InternalError(StrCat("cuda backend: the pinned GEMM algorithm for ", n, "x", k,
                                          " does not run at m = ", m, " (--batch-invariant)"));
      }
    }
    slot = std::move(p);
    return slot.get();
  }
};

CudaBackend::CudaBackend(const CudaBackendOptions& options)
    : options_(options), s_(std::make_unique<State>()) {}

absl::StatusOr<std::unique_ptr<CudaBackend>> CudaBackend::Create(const CudaBackendOptions& o) {
  int n = 0;
  TANDEM_CUDA_OK(cudaGetDeviceCount(&n));
  if (o.gpu < 0 || o.gpu >= n) {
    return absl::UnavailableError(
        StrCat("cuda backend: --gpu ", o.gpu, " but ", n, " CUDA device(s) are present"));
  }
  if (o.keys_per_split < 1 || o.max_splits < 1) {
    return absl::InvalidArgumentError("cuda backend: keys_per_split and max_splits must be ≥ 1");
  }
  std::unique_ptr<CudaBackend> b(new CudaBackend(o));
  State& s = *b->s_;
  TANDEM_CUDA_OK(cudaSetDevice(o.gpu));
  TANDEM_CUDA_OK(cudaStreamCreateWithFlags(&s.stream, cudaStreamNonBlocking));
  TANDEM_CUDA_OK(cudaStreamCreateWithFlags(&s.read_stream, cudaStreamNonBlocking));
  TANDEM_BLAS_OK(cublasLtCreate(&s.lt));
  TANDEM_CUDA_OK(cudaMalloc(&s.d_error, sizeof(int32_t)));
  TANDEM_CUDA_OK(cudaMemset(s.d_error, 0, sizeof(int32_t)));
  TANDEM_CUDA_OK(cudaMallocHost(&s.h_error, sizeof(int32_t)));
  TANDEM_CUDA_OK(cudaMalloc(&s.gemm_ws, static_cast<size_t>(o.gemm_workspace_bytes)));
  TANDEM_CUDA_OK(cudaDeviceSynchronize());
  return b;
}

CudaBackend::~CudaBackend() {
  State& s = *s_;
  cudaSetDevice(options_.gpu);
  if (s.stream != nullptr) cudaStreamSynchronize(s.stream);
  s.plans.clear();
  if (s.lt != nullptr) cublasLtDestroy(s.lt);
  cudaFree(s.attn_ws);
  cudaFree(s.x_bf16);
  cudaFree(s.gemm_ws);
  cudaFree(s.d_error);
  if (s.h_error != nullptr) cudaFreeHost(s.h_error);
  if (s.read_stream != nullptr) cudaStreamDestroy(s.read_stream);
  if (s.stream != nullptr) cudaStreamDestroy(s.stream);
}

absl::StatusOr<DeviceMemory> CudaBackend::Memory() const {
  TANDEM_CUDA_OK(cudaSetDevice(options_.gpu));
  size_t free = 0, total = 0;
  TANDEM_CUDA_OK(cudaMemGetInfo(&free, &total));
  const State& s = *s_;
  const int64_t own = *s.live + s.x_bf16_elems * 2 + s.attn_ws_floats * 4 +
                      options_.gemm_workspace_bytes + 2 * int64_t{sizeof(int32_t)};
  return DeviceMemory{static_cast<int64_t>(total), static_cast<int64_t>(free), own};
}

int64_t CudaBackend::AttentionScratchFloats(const ScratchSize& size) const {
  // One split per row at the full pass; short passes get more (up to max_splits). In
  // batch-invariant mode every row gets max_splits (fixed split points).
  return std::max<int64_t>(
      size.rows * size.attention_cols * (options_.batch_invariant ? options_.max_splits : 1),
      int64_t{16} << 20);
}

int64_t CudaBackend::ScratchBytes(const ScratchSize& size) const {
  return size.rows * size.max_cols * 2 + AttentionScratchFloats(size) * 4;
}

absl::Status CudaBackend::ReserveScratch(const ScratchSize& size) {
  TANDEM_CUDA_OK(cudaSetDevice(options_.gpu));
  State& s = *s_;
  TANDEM_CUDA_OK(cudaStreamSynchronize(s.stream));  // the old scratch may be in use
  const int64_t x = size.rows * size.max_cols;
  if (x > s.x_bf16_elems) {
    cudaFree(s.x_bf16);
    s.x_bf16 = nullptr;
    s.x_bf16_elems = 0;
    ++s.scratch_epoch;  // graphs captured so far point at the old one
    TANDEM_CUDA_OK(cudaMalloc(&s.x_bf16, static_cast<size_t>(x) * 2));
    s.x_bf16_elems = x;
  }
  const int64_t a = AttentionScratchFloats(size);
  if (a > s.attn_ws_floats) {
    cudaFree(s.attn_ws);
    s.attn_ws = nullptr;
    s.attn_ws_floats = 0;
    ++s.scratch_epoch;
    TANDEM_CUDA_OK(cudaMalloc(&s.attn_ws, static_cast<size_t>(a) * 4));
    s.attn_ws_floats = a;
  }
  return absl::OkStatus();
}

int64_t CudaBackend::ScratchEpoch() const { return s_->scratch_epoch; }

absl::StatusOr<std::unique_ptr<Buffer>> CudaBackend::Allocate(MemoryKind kind, int64_t bytes) {
  if (bytes < 0) return absl::InvalidArgumentError("buffer size must not be negative");
  TANDEM_CUDA_OK(cudaSetDevice(options_.gpu));
  void* p = nullptr;
  if (cudaError_t e = cudaMalloc(&p, static_cast<size_t>(std::max<int64_t>(bytes, 1)));
      e != cudaSuccess) {
    cudaGetLastError();  // an allocation failure is not sticky
    return absl::ResourceExhaustedError(
        StrCat("cuda backend: cudaMalloc of ", bytes, " bytes failed: ", cudaGetErrorString(e)));
  }
  auto buffer = std::make_unique<CudaBuffer>(p, bytes, kind, options_.gpu, s_->live);
  // Zero before it is returned: a transport may write it at once on a stream of its own
  // (a CUDA IPC or NCCL receive), which a fill still queued on the compute stream would
  // race. Filled on the read stream (nothing queued there can touch new memory), so the
  // wait is for the fill, not for the compute stream's queue.
  TANDEM_CUDA_OK(cudaMemsetAsync(p, 0, static_cast<size_t>(bytes), s_->read_stream));
  TANDEM_CUDA_OK(cudaStreamSynchronize(s_->read_stream));
  return std::unique_ptr<Buffer>(std::move(buffer));
}

absl::StatusOr<std::unique_ptr<Buffer>> CudaBackend::BorrowHost(const void*, int64_t) {
  return absl::FailedPreconditionError("cuda backend: kernels cannot read host memory");
}

void CudaBackend::CopyToDevice(const void* src, const Buffer& dst, int64_t offset, int64_t bytes) {
  if (!Proceed()) return;
  if (!Inside(dst, offset, bytes)) {
    return Fail(absl::OutOfRangeError("CopyToDevice: range outside the buffer"));
  }
  Check(cudaMemcpyAsync(static_cast<uint8_t*>(dst.address()) + offset, src,
                        static_cast<size_t>(bytes), cudaMemcpyHostToDevice, s_->stream),
        "CopyToDevice");
}

void CudaBackend::CopyToHost(const Buffer& src, int64_t offset, int64_t bytes, void* dst) {
  if (!Proceed()) return;
  if (!Inside(src, offset, bytes)) {
    return Fail(absl::OutOfRangeError("CopyToHost: range outside the buffer"));
  }
  Check(cudaMemcpyAsync(dst, static_cast<const uint8_t*>(src.address()) + offset,
                        static_cast<size_t>(bytes), cudaMemcpyDeviceToHost, s_->stream),
        "CopyToHost");
}

absl::Status CudaBackend::ReadNow(const Buffer& src, int64_t offset, int64_t bytes,
                                  void* dst) const {
  if (!Inside(src, offset, bytes))
    return absl::OutOfRangeError("ReadNow: range outside the buffer");
  TANDEM_CUDA_OK(cudaSetDevice(options_.gpu));
  TANDEM_CUDA_OK(cudaMemcpyAsync(dst, static_cast<const uint8_t*>(src.address()) + offset,
                                 static_cast<size_t>(bytes), cudaMemcpyDeviceToHost,
                                 s_->read_stream));
  TANDEM_CUDA_OK(cudaStreamSynchronize(s_->read_stream));
  return absl::OkStatus();
}

absl::Status CudaBackend::CopyNow(const Copy2D& c) const {
  RETURN_IF_ERROR(CheckCopy2D(c));
  if (c.rows == 0 || c.width == 0) return absl::OkStatus();
  TANDEM_CUDA_OK(cudaSetDevice(options_.gpu));
  TANDEM_CUDA_OK(cudaMemcpy2DAsync(
      static_cast<uint8_t*>(c.dst->address()) + c.dst_offset, static_cast<size_t>(c.dst_pitch),
      static_cast<const uint8_t*>(c.src->address()) + c.src_offset,
      static_cast<size_t>(c.src_pitch), static_cast<size_t>(c.width), static_cast<size_t>(c.rows),
      cudaMemcpyDeviceToDevice, s_->read_stream));
  TANDEM_CUDA_OK(cudaStreamSynchronize(s_->read_stream));
  return absl::OkStatus();
}

std::shared_ptr<Event> CudaBackend::RecordEvent() {
  cudaEvent_t e = nullptr;
  if (Proceed()) {
    if (cudaError_t err = cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
        err != cudaSuccess) {
      Fail(CudaError(err, "cudaEventCreate"));
      e = nullptr;
    } else {
      Check(cudaEventRecord(e, s_->stream), "cudaEventRecord");
    }
  }
  absl::Status status = error_;
  if (status.ok() && e == nullptr) status = absl::InternalError("cuda backend: no event");
  return std::make_shared<CudaEvent>(e, options_.gpu, std::move(status), s_->d_error);
}

absl::Status CudaBackend::Synchronize() {
  State& s = *s_;
  absl::Status st = std::move(error_);
  error_ = absl::OkStatus();
  auto first = [&](absl::Status e) {
    if (st.ok()) st = std::move(e);
  };
  if (cudaError_t e = cudaSetDevice(options_.gpu); e != cudaSuccess) {
    first(CudaError(e, "cudaSetDevice"));
    return st;
  }
  if (cudaError_t e =
          cudaMemcpyAsync(s.h_error, s.d_error, sizeof(int32_t), cudaMemcpyDeviceToHost, s.stream);
      e != cudaSuccess) {
    first(CudaError(e, "reading the device error word"));
  }
  if (cudaError_t e = cudaStreamSynchronize(s.stream); e != cudaSuccess) {
    first(CudaError(e, "a kernel or copy of this pass"));
    return st;
  }
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) first(CudaError(e, "a launch"));
  if (*s.h_error != kDeviceOk) {
    first(absl::InvalidArgumentError(StrCat("cuda backend: ", DeviceErrorText(*s.h_error))));
    *s.h_error = kDeviceOk;
    if (cudaError_t e = cudaMemcpy(s.d_error, s.h_error, sizeof(int32_t), cudaMemcpyHostToDevice);
        e != cudaSuccess) {
      first(CudaError(e, "clearing the device error word"));
    }
  }
  return st;
}

bool CudaBackend::BeginCapture() {
  if (!Proceed()) return false;
  if (cudaStreamBeginCapture(s_->stream, cudaStreamCaptureModeRelaxed) != cudaSuccess) {
    cudaGetLastError();  // not this pass's error: it runs eagerly instead
    return false;
  }
  return true;
}

absl::StatusOr<std::unique_ptr<Graph>> CudaBackend::EndCapture() {
  cudaGraph_t graph = nullptr;
  const cudaError_t end = cudaStreamEndCapture(s_->stream, &graph);
  absl::Status st = std::move(error_);  // an op that failed while recording
  error_ = absl::OkStatus();
  if (st.ok() && end != cudaSuccess) st = CudaError(end, "cudaStreamEndCapture");
  cudaGraphExec_t exec = nullptr;
  if (st.ok()) {
    if (cudaError_t e = cudaGraphInstantiate(&exec, graph, 0); e != cudaSuccess) {
      st = CudaError(e, "cudaGraphInstantiate");
    }
  }
  if (!st.ok()) {
    if (graph != nullptr) cudaGraphDestroy(graph);
    cudaGetLastError();  // a capture failure is not the next pass's error
    return st;
  }
  return std::unique_ptr<Graph>(new CudaGraph(graph, exec, options_.gpu, s_->scratch_epoch));
}

void CudaBackend::Replay(const Graph& graph) {
  if (!Proceed()) return;
  const auto& g = static_cast<const CudaGraph&>(graph);
  if (g.scratch_epoch() != s_->scratch_epoch) {
    return Fail(absl::FailedPreconditionError(
        "cuda backend: a graph captured before ReserveScratch moved the scratch (capture again)"));
  }
  Check(cudaGraphLaunch(g.exec(), s_->stream), "cudaGraphLaunch");
}

bool CudaBackend::Proceed() {
  if (!error_.ok()) return false;
  if (cudaError_t e = cudaSetDevice(options_.gpu); e != cudaSuccess) {
    Fail(CudaError(e, "cudaSetDevice"));
    return false;
  }
  return true;
}

void CudaBackend::Fail(absl::Status error) {
  if (error_.ok()) error_ = std::move(error);
}

void CudaBackend::Check(int err, const char* what) {
  if (err != cudaSuccess) Fail(CudaError(static_cast<cudaError_t>(err), what));
}

void CudaBackend::Embedding(const Tensor& table, const Tensor& ids, const Tensor& out) {
  if (!Proceed()) return;
  Elem e;
  switch (table.type) {
    case model::GgmlType::kF32:
      e = Elem::kF32;
      break;
    case model::GgmlType::kBF16:
      e = Elem::kBF16;
      break;
    case model::GgmlType::kF16:
      e = Elem::kF16;
      break;
    default:
      return Fail(absl::InvalidArgumentError(StrCat("cuda backend: embedding table of type ",
                                                    model::Traits(table.type).name,
                                                    " (weights are converted to bf16 at load)")));
  }
  Check(LaunchEmbedding(Dev<void>(table), e, table.rows, table.cols, Dev<int32_t>(ids), ids.cols,
                        Dev(out), s_->d_error, s_->stream),
        "embedding");
}

void CudaBackend::Gemms(const Tensor& x,
                        std::initializer_list<std::pair<const Tensor*, const Tensor*>> wo) {
  if (!Proceed()) return;
  State& s = *s_;
  const int64_t m = x.rows, k = x.cols;
  if (m == 0) return;
  for (const auto& [w, out] : wo) {
    if (w->type != model::GgmlType::kBF16) {
      return Fail(absl::InvalidArgumentError(StrCat("cuda backend: matmul weights of type ",
                                                    model::Traits(w->type).name,
                                                    " (weights are converted to bf16 at load)")));
    }
    if (w->cols != k || out->rows != m || out->cols != w->rows) {
      return Fail(absl::InvalidArgumentError("cuda backend: matmul shapes do not agree"));
    }
  }
  if (m * k > s.x_bf16_elems) {
    return Fail(absl::ResourceExhaustedError(StrCat(
        "cuda backend: a ", m, "x", k, " GEMM operand exceeds the scratch ReserveScratch sized")));
  }
  Check(LaunchToBf16(Dev(x), m * k, s.x_bf16, s.stream), "to bf16");
  if (!error_.ok()) return;
  const float alpha = 1.0f, beta = 0.0f;
  for (const auto& [w, out] : wo) {
    auto plan = s.Plan(m, w->rows, k, options_.gemm_workspace_bytes, options_.batch_invariant);
    if (!plan.ok()) return Fail(plan.status());
    const GemmPlan& p = **plan;
    if (cublasStatus_t st = cublasLtMatmul(
            s.lt, p.op, &alpha, Dev<void>(*w), p.a, s.x_bf16, p.b, &beta, Dev(*out), p.c, Dev(*out),
            p.c, &p.algo, s.gemm_ws, static_cast<size_t>(options_.gemm_workspace_bytes), s.stream);
        st != CUBLAS_STATUS_SUCCESS) {
      return Fail(BlasError(st, "cublasLtMatmul"));
    }
  }
}

void CudaBackend::MatMul(const Tensor& x, const Tensor& w, const Tensor& out) {
  Gemms(x, {{&w, &out}});
}

void CudaBackend::MatMul2(const Tensor& x, const Tensor& w0, const Tensor& out0, const Tensor& w1,
                          const Tensor& out1) {
  Gemms(x, {{&w0, &out0}, {&w1, &out1}});
}

void CudaBackend::MatMul3(const Tensor& x, const Tensor& w0, const Tensor& out0, const Tensor& w1,
                          const Tensor& out1, const Tensor& w2, const Tensor& out2) {
  Gemms(x, {{&w0, &out0}, {&w1, &out1}, {&w2, &out2}});
}

void CudaBackend::RmsNorm(const Tensor& x, const Tensor& weight, float eps, const Tensor& out) {
  if (!Proceed()) return;
  Check(LaunchRmsNorm(Dev(x), Dev(weight), x.rows, x.cols, eps, Dev(out), s_->stream), "rms_norm");
}

void CudaBackend::RopeTable(const Tensor& positions, const Tensor& freq_factors,
                            const RopeParams& p, const Tensor& table) {
  if (!Proceed()) return;
  Check(LaunchRopeTable(Dev<int32_t>(positions), positions.cols,
                        freq_factors.empty() ? nullptr : Dev(freq_factors), p.rope_dim, p.theta,
                        p.position_scale, p.attention_factor, Dev(table), s_->stream),
        "rope_table");
}

void CudaBackend::Rope(const Tensor& x, int32_t n_heads, const Tensor& table, const RopeParams& p) {
  if (!Proceed()) return;
  Check(LaunchRope(Dev(x), x.rows, n_heads, p.head_dim, p.rope_dim, p.style == RopeStyle::kHalves,
                   Dev(table), s_->stream),
        "rope");
}

void CudaBackend::SwiGlu(const Tensor& gate, const Tensor& up, const Tensor& out) {
  if (!Proceed()) return;
  Check(LaunchSwiGlu(Dev(gate), Dev(up), gate.elements(), Dev(out), s_->stream), "swiglu");
}

void CudaBackend::GeGlu(const Tensor& gate, const Tensor& up, const Tensor& out) {
  if (!Proceed()) return;
  Check(LaunchGeGlu(Dev(gate), Dev(up), gate.elements(), Dev(out), s_->stream), "geglu");
}

void CudaBackend::Scale(const Tensor& x, float factor) {
  if (!Proceed()) return;
  Check(LaunchScale(Dev(x), x.elements(), factor, s_->stream), "scale");
}

void CudaBackend::SoftCap(const Tensor& x, float cap) {
  if (!Proceed()) return;
  Check(LaunchSoftCap(Dev(x), x.elements(), cap, s_->stream), "softcap");
}

void CudaBackend::Add(const Tensor& x, const Tensor& y) {
  if (!Proceed()) return;
  Check(LaunchAdd(Dev(x), Dev(y), x.elements(), s_->stream), "add");
}

void CudaBackend::AddRmsNorm(const Tensor& x, const Tensor& y, const Tensor& weight, float eps,
                             const Tensor& out) {
  if (!Proceed()) return;
  Check(LaunchAddRmsNorm(Dev(x), Dev(y), Dev(weight), x.rows, x.cols, eps, Dev(out), s_->stream),
        "add_rms_norm");
}

void CudaBackend::MoeRoute(const Tensor&, const Tensor&, const MoeRouting&, const Tensor&,
                           const Tensor&) {
  if (!Proceed()) return;
  Fail(absl::UnimplementedError("cuda backend: mixture-of-experts routing is not implemented"));
}

void CudaBackend::MoeFfn(const Tensor&, const Tensor&, const Tensor&, const ExpertWeights&,
                         GatedActivation, const Tensor&) {
  if (!Proceed()) return;
  Fail(absl::UnimplementedError("cuda backend: mixture-of-experts FFN is not implemented"));
}

void CudaBackend::AddBias(const Tensor& x, const Tensor& bias) {
  if (!Proceed()) return;
  Check(LaunchAddBias(Dev(x), Dev(bias), x.rows, x.cols, s_->stream), "add_bias");
}

void CudaBackend::GatherRows(const Tensor& src, const Tensor& rows, const Tensor& dst) {
  if (!Proceed()) return;
  Check(LaunchGatherRows(Dev<void>(src), src.rows, src.RowBytes(), Dev<int32_t>(rows), rows.cols,
                         Dev<void>(dst), s_->d_error, s_->stream),
        "gather_rows");
}

void CudaBackend::ArgMax(const Tensor& logits, const Tensor& ids) {
  if (!Proceed()) return;
  Check(LaunchArgMax(Dev(logits), logits.rows, logits.cols, Dev<int32_t>(ids), s_->stream),
        "argmax");
}

void CudaBackend::WriteKv(const Tensor& k, const Tensor& v, const StepView& step, int32_t layer,
                          KvStorage* kv) {
  if (!Proceed()) return;
  const kv::KvLayout& l = kv->layout();
  Check(LaunchWriteKv(Dev(k), Dev(v), Dev<int32_t>(step.slot_mapping), k.rows, layer, Geometry(l),
                      kv->num_blocks(), ElemOf(l.dtype), kv->buffer().address(), s_->d_error,
                      s_->stream),
        "write_kv");
}

void CudaBackend::Attention(const Tensor& q, const StepView& step, const AttentionShape& shape,
                            int32_t layer, const KvStorage& kv, const Tensor& out) {
  if (!Proceed()) return;
  if (!shape.sinks.empty()) {
    return Fail(absl::UnimplementedError("cuda backend: attention sinks are not implemented"));
  }
  State& s = *s_;
  const kv::KvLayout& l = kv.layout();
  if (shape.head_dim > 256 || shape.head_dim != l.head_dim || shape.n_kv_heads != l.n_kv_heads ||
      shape.n_kv_heads < 1 || shape.n_heads % shape.n_kv_heads != 0 ||
      q.cols != int64_t{shape.n_heads} * shape.head_dim || out.rows != q.rows ||
      out.cols != q.cols) {
    return Fail(absl::InvalidArgumentError(
        "cuda backend: attention shape does not match the KV layout or q (or head_dim > 256)"));
  }
  const int64_t per_split = q.rows * shape.n_heads * (int64_t{shape.head_dim} + 2);
  if (per_split > s.attn_ws_floats) {
    return Fail(absl::ResourceExhaustedError(
        "cuda backend: attention over more rows than ReserveScratch sized"));
  }
  AttentionLaunch a;
  a.q = Dev(q);
  a.cache = kv.buffer().address();
  a.cache_type = ElemOf(l.dtype);
  a.geometry = Geometry(l);
  a.layer = layer;
  a.q_indptr = Dev<int32_t>(step.q_indptr);
  a.positions = Dev<int32_t>(step.positions);
  a.seqs = static_cast<int32_t>(step.kv_len.cols);
  a.block_indptr = Dev<int32_t>(step.block_indptr);
  a.block_ids = Dev<int32_t>(step.block_ids);
  a.rows = static_cast<int32_t>(q.rows);
  a.n_heads = shape.n_heads;
  a.n_kv_heads = shape.n_kv_heads;
  a.head_dim = shape.head_dim;
  a.scale = shape.scale;
  a.window = shape.window;
  a.softcap = shape.softcap;
  a.keys_per_split = options_.keys_per_split;
  a.workspace = s.attn_ws;
  a.out = Dev(out);
  a.stream = s.stream;
  if (!options_.batch_invariant && step.max_new_tokens > 1 &&
      PrefillAttentionSupports(shape.head_dim)) {
    return Check(LaunchPrefillAttention(a), "prefill attention");
  }
  // Batch-invariant: the full split count always (ReserveScratch sized for it), so a
  // row's split points depend on its key count alone.
  const int64_t fits = per_split == 0 ? options_.max_splits : s.attn_ws_floats / per_split;
  if (options_.batch_invariant && fits < options_.max_splits) {
    return Fail(absl::ResourceExhaustedError(
        "cuda backend: attention workspace too small for the fixed split count"));
  }
  a.max_splits = static_cast<int32_t>(std::clamp<int64_t>(fits, 1, options_.max_splits));
  Check(LaunchPagedAttention(a), "attention");
}

}  // namespace tandem::kernels::cuda
