// CudaBackend: the Backend on one NVIDIA GPU (--device cuda --gpu N).
//
// Memory. Every buffer is cudaMalloc'd device memory, zero-filled before Allocate
// returns (so another stream may write it at once); weights arrive converted to bf16 (WeightType,
// done by DeviceWeights at load), norms and biases float32. The scratch the ops need — the bf16
// copy of a GEMM's activation operand, the split-K partials of attention, cuBLASLt's workspace — is
// allocated by ReserveScratch when the executor sizes its workspace; no op allocates. When
// ReserveScratch grows it, ScratchEpoch changes and graphs captured before are refused at Replay.
// Memory() counts this backend's own bytes (buffers, scratch, workspace) apart from the device's
// free memory.
//
// Ordering. One non-blocking stream runs every op and copy in call order; ReadNow and
// CopyNow (any thread) copy on a second stream. CopyToDevice / CopyToHost are
// cudaMemcpyAsync: the host bytes must stay valid until Synchronize.
//
// Arithmetic. GEMMs are cuBLASLt bf16 × bf16 with float32 accumulation and a float32
// result; RMSNorm reduces each row in one thread block in a fixed order; attention
// reads the paged cache in its own element type (f32, bf16, f16): a pass with prompt
// rows runs the tensor-core kernel (bf16 Q, K, P, V; float32 accumulation and
// softmax), a decode-only pass the float32 split-K kernel. What varies with batching
// unless options.batch_invariant: the GEMM algorithm (cuBLASLt's heuristic picks per
// shape, so a row's summation order may change with the number of rows), the attention
// kernel (a decode row in a pass with prompts goes through the tensor cores), and
// attention's split count (fewer splits when a pass has more rows than its workspace
// holds at the full count).
//
// Errors. Every CUDA and cuBLAS call and every launch is checked; the first failure
// becomes the sticky error Synchronize returns (the pass's requests fail, the
// process keeps serving where the device still works). Bad indices only the device
// sees (token ids, gather rows, KV slots) are reported through a device error word
// at Synchronize as InvalidArgument — the kernels never read or write out of bounds.
//
// Threads: one engine thread; ReadNow, CopyNow, Memory and Event::Wait from any thread. Each
// entry point makes the backend's GPU current on the calling thread.
#ifndef TANDEM_KERNELS_CUDA_CUDA_BACKEND_H_
#define TANDEM_KERNELS_CUDA_CUDA_BACKEND_H_

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "kernels/backend.h"

namespace tandem::kernels::cuda {

struct CudaBackendOptions {
  int gpu = 0;
  // Split-K of attention: one split per `keys_per_split` keys of a row, at most
  // `max_splits` (1 turns split-K off).
  int32_t keys_per_split = 512;
  int32_t max_splits = 32;
  // Same tokens for a request whatever it is batched with (--batch-invariant): every
  // GEMM shape uses one pinned algorithm without split-K, chosen once per weight shape,
  // and attention always runs the float32 split-K kernel with split points fixed by
  // the row's key count (never by the pass's size). Off: cuBLASLt's heuristic picks per
  // shape, and passes with prefill rows run the tensor-core attention.
  bool batch_invariant = false;
  int64_t gemm_workspace_bytes = int64_t{32} << 20;
};

class CudaBackend : public Backend {
 public:
  // Unavailable when there is no driver or no such GPU.
  static absl::StatusOr<std::unique_ptr<CudaBackend>> Create(const CudaBackendOptions& options);
  ~CudaBackend() override;

  std::string_view name() const override { return "cuda"; }
  int num_threads() const override { return 1; }
  int gpu() const { return options_.gpu; }

  std::optional<model::GgmlType> WeightType() const override { return model::GgmlType::kBF16; }
  absl::StatusOr<DeviceMemory> Memory() const override;
  absl::Status ReserveScratch(const ScratchSize& size) override;
  int64_t ScratchEpoch() const override;
  int64_t ScratchBytes(const ScratchSize& size) const override;

  absl::StatusOr<std::unique_ptr<Buffer>> Allocate(MemoryKind kind, int64_t bytes) override;
  absl::StatusOr<std::unique_ptr<Buffer>> BorrowHost(const void* host, int64_t bytes) override;
  void CopyToDevice(const void* src, const Buffer& dst, int64_t offset, int64_t bytes) override;
  void CopyToHost(const Buffer& src, int64_t offset, int64_t bytes, void* dst) override;
  absl::Status ReadNow(const Buffer& src, int64_t offset, int64_t bytes, void* dst) const override;
  absl::Status CopyNow(const Copy2D& copy) const override;
  std::shared_ptr<Event> RecordEvent() override;
  absl::Status Synchronize() override;

  // CUDA graphs: the stream is captured (relaxed mode) between the two calls.
  bool BeginCapture() override;
  absl::StatusOr<std::unique_ptr<Graph>> EndCapture() override;
  void Replay(const Graph& graph) override;

  void Embedding(const Tensor& table, const Tensor& ids, const Tensor& out) override;
  void MatMul(const Tensor& x, const Tensor& w, const Tensor& out) override;
  void MatMul2(const Tensor& x, const Tensor& w0, const Tensor& out0, const Tensor& w1,
               const Tensor& out1) override;
  void MatMul3(const Tensor& x, const Tensor& w0, const Tensor& out0, const Tensor& w1,
               const Tensor& out1, const Tensor& w2, const Tensor& out2) override;
  void RmsNorm(const Tensor& x, const Tensor& weight, float eps, const Tensor& out) override;
  void RopeTable(const Tensor& positions, const Tensor& freq_factors, const RopeParams& p,
                 const Tensor& table) override;
  void Rope(const Tensor& x, int32_t n_heads, const Tensor& table, const RopeParams& p) override;
  void SwiGlu(const Tensor& gate, const Tensor& up, const Tensor& out) override;
  void GeGlu(const Tensor& gate, const Tensor& up, const Tensor& out) override;
  void Scale(const Tensor& x, float factor) override;
  void SoftCap(const Tensor& x, float cap) override;
  void Add(const Tensor& x, const Tensor& y) override;
  void AddRmsNorm(const Tensor& x, const Tensor& y, const Tensor& weight, float eps,
                  const Tensor& out) override;
  // Not yet on the device: each fails the pass with Unimplemented (DeviceWeights
  // refuses a mixture of experts on this backend before any pass).
  void MoeRoute(const Tensor& logits, const Tensor& bias, const MoeRouting& r, const Tensor& ids,
                const Tensor& weights) override;
  void MoeFfn(const Tensor& x, const Tensor& ids, const Tensor& weights,
              const ExpertWeights& experts, GatedActivation act, const Tensor& out) override;
  void AddBias(const Tensor& x, const Tensor& bias) override;
  void GatherRows(const Tensor& src, const Tensor& rows, const Tensor& dst) override;
  void ArgMax(const Tensor& logits, const Tensor& ids) override;
  void WriteKv(const Tensor& k, const Tensor& v, const StepView& step, int32_t layer,
               KvStorage* kv) override;
  void Attention(const Tensor& q, const StepView& step, const AttentionShape& shape, int32_t layer,
                 const KvStorage& kv, const Tensor& out) override;

 private:
  struct State;  // CUDA handles, scratch and the GEMM plan cache (cuda_backend.cc)
  explicit CudaBackend(const CudaBackendOptions& options);
  // False (the op is skipped) once the pass has failed; makes the GPU current.
  bool Proceed();
  void Fail(absl::Status error);
  // Records a failed launch or call (`err` a cudaError_t) as the sticky error.
  void Check(int err, const char* what);
  int64_t AttentionScratchFloats(const ScratchSize& size) const;
  // x as bf16 in scratch, then out_i = x · w_iᵀ for each (w_i, out_i).
  void Gemms(const Tensor& x, std::initializer_list<std::pair<const Tensor*, const Tensor*>> wo);

  const CudaBackendOptions options_;
  std::unique_ptr<State> s_;
  absl::Status error_;  // sticky until Synchronize
};

}  // namespace tandem::kernels::cuda

#endif  // TANDEM_KERNELS_CUDA_CUDA_BACKEND_H_
