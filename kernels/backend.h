// Backend: the memory and the operations the model executor needs, implemented once
// per device (docs/architecture.md, "The CUDA backend"; in the spirit of ggml-backend).
//
// Memory. The backend owns every byte the model touches: it allocates buffers by
// purpose (tensor.h), copies host bytes in and out on its own stream, and records
// events. The executor and the layers above it hold only Tensor views; no host
// pointer into backend memory crosses this interface.
//
// Ordering and errors. Ops and CopyTo* are enqueued on the backend's stream in call
// order (the CPU backend runs them at once). An op that fails — bad input it can see,
// a device error — records a sticky error and the rest of the pass is skipped;
// Synchronize() waits for the stream and returns that error (then clears it), so a
// pass checks once. Nothing here aborts the process on bad input.
//
// Shapes. Activations are float32 [rows][cols] Tensors; weights are Tensors in
// whatever type the backend prepared (GGUF quantized types on the CPU). Every op is
// batch-invariant on the CPU: a row's result depends only on that row's inputs.
//
// Threads. One engine thread calls everything, except ReadNow, CopyNow and
// Event::Wait (any thread).
#ifndef TANDEM_KERNELS_BACKEND_H_
#define TANDEM_KERNELS_BACKEND_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/tensor.h"

namespace tandem::kernels {

class KvStorage;

// How RoPE pairs dimensions: kAdjacent rotates (2i, 2i+1) (llama/mistral GGUF, whose
// Q/K weights are stored permuted); kHalves rotates (i, i + rope_dim/2) (qwen2, NeoX).
enum class RopeStyle { kAdjacent, kHalves };

struct RopeParams {
  int32_t head_dim = 0;
  int32_t rope_dim = 0;  // leading dims that rotate (≤ head_dim, even)
  float theta = 10000.0f;
  float position_scale = 1.0f;  // linear scaling: position / factor
  RopeStyle style = RopeStyle::kAdjacent;
  // YaRN's attention factor: cos and sin multiplied by it (so q·k by its square).
  float attention_factor = 1.0f;
};

struct AttentionShape {
  int32_t n_heads = 0;
  int32_t n_kv_heads = 0;
  int32_t head_dim = 0;
  float scale = 0;  // usually 1/sqrt(head_dim)
  // Sliding window: > 0 lets the query at position p see only keys p − window + 1 .. p
  // (Mistral, Gemma's local layers, Phi-3); 0 sees every earlier key.
  int32_t window = 0;
  // Soft-capping: > 0 maps each scaled score x to softcap · tanh(x / softcap) before
  // the softmax (Gemma 2); 0 leaves scores as they are.
  float softcap = 0;
  // Attention sinks (gpt-oss): [1][n_heads] f32, one logit per query head that joins its
  // softmax's normaliser and weighs no value (kernels/cpu/attention.h); empty: none.
  Tensor sinks;
  // The first key position row `pos` sees.
  int32_t FirstKey(int32_t pos) const { return window > 0 && pos >= window ? pos - window + 1 : 0; }
};

// The step plan in backend memory: built once per step on the host, uploaded once,
// read by every layer. All int32 [1][n]. Sequence s owns q rows
// q_indptr[s]..q_indptr[s+1]; its cache holds kv_len[s] tokens after the pass, the
// last q-row-count of them new; its block table is block_ids[block_indptr[s]..
// block_indptr[s+1]). slot_mapping[t] = block × block_size + offset of token t's
// cache slot (FlashInfer's paged layout; vLLM's slot mapping).
struct StepView {
  Tensor tokens;        // [T]
  Tensor positions;     // [T]
  Tensor slot_mapping;  // [T]
  Tensor q_indptr;      // [S+1]
  Tensor kv_len;        // [S]
  Tensor block_indptr;  // [S+1]
  Tensor block_ids;     // [block_indptr[S]]
  // Host-side: the most new tokens of any sequence (1 for a pure decode step), so a
  // device backend can pick its prefill or decode kernels without reading the plan.
  int32_t max_new_tokens = 0;
};

// StepView::slot_mapping from the step's CSR arrays, on the host, into `slots`
// [q_indptr.back()].
inline void SlotMapping(std::span<const int32_t> q_indptr, std::span<const int32_t> kv_len,
                        std::span<const int32_t> block_indptr, std::span<const int32_t> block_ids,
                        int32_t block_size, int32_t* slots) {
  for (size_t s = 0; s < kv_len.size(); ++s) {
    const int32_t q0 = q_indptr[s], n = q_indptr[s + 1] - q0;
    for (int32_t t = 0; t < n; ++t) {
      const int32_t pos = kv_len[s] - n + t;
      slots[q0 + t] = block_ids[block_indptr[s] + pos / block_size] * block_size + pos % block_size;
    }
  }
}

// `rows` rows of `width` bytes: row r from src at src_offset + r × src_pitch to dst at
// dst_offset + r × dst_pitch.
struct Copy2D {
  const Buffer* src = nullptr;
  int64_t src_offset = 0;
  int64_t src_pitch = 0;
  const Buffer* dst = nullptr;
  int64_t dst_offset = 0;
  int64_t dst_pitch = 0;
  int64_t width = 0;
  int64_t rows = 0;
};

// OutOfRange unless every row of `c` lies inside both buffers (and the sizes are sane).
inline absl::Status CheckCopy2D(const Copy2D& c) {
  auto inside = [&](const Buffer* b, int64_t offset, int64_t pitch) {
    if (b == nullptr || offset < 0 || pitch < c.width) return false;
    if (c.rows == 0) return true;
    int64_t span = 0, last = 0;  // the last row's start, without overflow
    if (__builtin_mul_overflow(c.rows - 1, pitch, &span) ||
        __builtin_add_overflow(offset, span, &last)) {
      return false;
    }
    return last <= b->bytes() - c.width;
  };
  if (c.width < 0 || c.rows < 0 || !inside(c.src, c.src_offset, c.src_pitch) ||
      !inside(c.dst, c.dst_offset, c.dst_pitch)) {
    return absl::OutOfRangeError("CopyNow: a row outside its buffer");
  }
  return absl::OkStatus();
}

// A mixture of experts' routing as the kernels take it (model_config.h's MoeConfig).
enum class MoeGating {
  kSoftmax,        // softmax over every expert's logit; the k largest picked
  kSigmoid,        // sigmoid of each logit; picked by sigmoid + bias
  kSoftmaxWeight,  // the k largest logits picked; softmax over those k
};
struct MoeRouting {
  int32_t experts = 0;
  int32_t used = 0;  // k
  MoeGating gating = MoeGating::kSoftmax;
  bool normalize = false;  // the k weights divided by their sum
  float scale = 1.0f;      // then multiplied by this
};

// The gate of a gated FFN: down(act(gate · x, up · x)), act(g, u) = silu(g) × u,
// gelu_tanh(g) × u, or gpt-oss's clamped form.
enum class GatedActivation {
  kSilu,
  kGeluTanh,
  kSwigluOai,  // gpt-oss's clamped SwiGLU (kernels/cpu/ops.h, SwigluOai)
};

// One mixture-of-experts layer's matrices for Backend::MoeFfn.
struct ExpertWeights {
  std::span<const Tensor> gate, up, down;  // one of each per expert
  // Biases (gpt-oss): row e is expert e's, added after its product; empty: none.
  Tensor gate_bias, up_bias;  // [experts][expert ffn] f32
  Tensor down_bias;           // [experts][hidden] f32
  // A shared expert that every row runs, scaled by sigmoid(shared_gate · x)
  // (qwen2moe); empty tensors: none.
  Tensor shared_gate;  // [1][hidden] f32
  Tensor shared_w_gate, shared_w_up, shared_w_down;
};

// A point in the backend's stream. Wait blocks until every op enqueued before it has
// finished; thread-safe.
class Event {
 public:
  virtual ~Event() = default;
  virtual absl::Status Wait() = 0;
};

// How the CPU backend multiplies float32 activations by quantized weights
// (--cpu-math; other backends ignore it):
//   exact  every weight decoded to float32, float32 products (within 1e-4 of
//          transformers; the golden tests pin it)
//   fast   activations quantized to 8 bits per block (of 32, or of 256 for the
//          super-block types) and integer dot products (cpu/matmul_q8.h) for every
//          block-quantized weight type; float32 for the rest (F32, F16, BF16), so the
//          same as exact there; still batch-invariant and deterministic
// Both halves of a disaggregated pair must agree (the KV layout fingerprint carries it).
enum class CpuMath { kExact, kFast };

// The default of every command and of EngineOptions: fast where this CPU has the
// integer SIMD path (AVX2 with FMA), exact elsewhere, where the portable integer loop
// would be slower than the float32 one (defined in backend_factory.cc).
CpuMath DefaultCpuMath();

inline std::string_view CpuMathName(CpuMath m) { return m == CpuMath::kFast ? "fast" : "exact"; }
// InvalidArgument naming the flag for another name.
inline absl::StatusOr<CpuMath> ParseCpuMath(std::string_view name) {
  if (name == "exact") return CpuMath::kExact;
  if (name == "fast") return CpuMath::kFast;
  return absl::InvalidArgumentError("--cpu-math: must be exact or fast");
}

// A device's memory, for sizing the KV pool (--gpu-memory-utilization).
struct DeviceMemory {
  int64_t total_bytes = 0;
  int64_t free_bytes = 0;  // free on the device now, whoever holds the rest
  // Held by this backend: every live Allocate buffer, the scratch and its library
  // workspaces — not the runtime's own context, nor other processes' memory.
  int64_t own_bytes = 0;
};

// Scratch an op needs beyond the executor's workspace, for passes of up to `rows`
// tokens: activations up to `max_cols` wide (a GEMM's operand converted to the
// weights' type), attention over `attention_cols` = n_heads × (head_dim + 2) floats
// per row (split-K partials).
struct ScratchSize {
  int64_t rows = 0;
  int64_t max_cols = 0;
  int64_t attention_cols = 0;
};

// A recorded sequence of ops (a CUDA graph), replayed with Backend::Replay: the same
// kernels on the same addresses and shapes; the bytes they read may differ.
class Graph {
 public:
  virtual ~Graph() = default;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string_view name() const = 0;
  virtual int num_threads() const = 0;

  // --- preparation (at load, never while serving) -----------------------------------
  // The type every weight matrix must be converted to before MatMul and Embedding
  // read it; nullopt: the backend reads the GGUF types as they are (the CPU).
  virtual std::optional<model::GgmlType> WeightType() const { return std::nullopt; }
  // Total and free device memory; Unimplemented on the host (its KV budget is given
  // in bytes).
  virtual absl::StatusOr<DeviceMemory> Memory() const {
    return absl::UnimplementedError("backend: no device memory to report");
  }
  // Allocates the scratch of ScratchSize once (so no op allocates while serving);
  // a pass over it fails with ResourceExhausted. Nothing to do on the CPU. Grows only;
  // several executors may share one backend (a draft model's and its target's).
  virtual absl::Status ReserveScratch(const ScratchSize&) { return absl::OkStatus(); }
  // Changes each time ReserveScratch moves the scratch to new memory: a graph captured
  // before reads freed memory, and must be captured again (ModelExecutor checks).
  virtual int64_t ScratchEpoch() const { return 0; }
  // Bytes ReserveScratch(size) allocates (for sizing the KV pool beside it).
  virtual int64_t ScratchBytes(const ScratchSize&) const { return 0; }

  // --- memory -------------------------------------------------------------------
  // A zero-filled buffer of `bytes`. ResourceExhausted when it does not fit.
  virtual absl::StatusOr<std::unique_ptr<Buffer>> Allocate(MemoryKind kind, int64_t bytes) = 0;
  // Host memory used in place as a weights buffer (the CPU backend's zero-copy view of
  // the mapped GGUF file); `host` must outlive the buffer. FailedPrecondition on a
  // backend whose kernels cannot read host memory: allocate and copy instead.
  virtual absl::StatusOr<std::unique_ptr<Buffer>> BorrowHost(const void* host, int64_t bytes) = 0;
  // Enqueued copies; `src` must stay valid, and `dst` is only filled, by Synchronize.
  virtual void CopyToDevice(const void* src, const Buffer& dst, int64_t offset, int64_t bytes) = 0;
  virtual void CopyToHost(const Buffer& src, int64_t offset, int64_t bytes, void* dst) = 0;
  // A synchronous read from any thread, of bytes no op in flight writes (a transport
  // reading finished KV blocks; on a device, through a stream of its own).
  virtual absl::Status ReadNow(const Buffer& src, int64_t offset, int64_t bytes,
                               void* dst) const = 0;
  // A synchronous strided copy between two of this backend's buffers, from any
  // thread, of bytes no op in flight touches (a transport gathering finished KV blocks
  // into a staging buffer, or scattering received ones into reserved blocks; on a
  // device, through ReadNow's stream). OutOfRange when a row leaves either buffer.
  virtual absl::Status CopyNow(const Copy2D& copy) const = 0;
  virtual std::shared_ptr<Event> RecordEvent() = 0;
  // Waits for the stream; returns (and clears) the sticky error.
  virtual absl::Status Synchronize() = 0;

  // --- graphs (optional) ---------------------------------------------------------------
  // Ops (not copies) from here to EndCapture are recorded instead of run; false where
  // the backend cannot record (the CPU), and nothing changes. A graph is valid until the
  // scratch moves (ScratchEpoch); Replay of an older one fails the pass.
  virtual bool BeginCapture() { return false; }
  // The recording as a Graph, or the error that spoiled it (the ops then never ran:
  // enqueue them again).
  virtual absl::StatusOr<std::unique_ptr<Graph>> EndCapture() {
    return absl::UnimplementedError("backend: no graphs");
  }
  virtual void Replay(const Graph&) {}

  // --- ops (float32 activations) ----------------------------------------------------
  // out [ids.cols][table.cols] = rows `ids` of `table`; an id outside the table is an
  // error.
  virtual void Embedding(const Tensor& table, const Tensor& ids, const Tensor& out) = 0;
  // out [m][w.rows] = x [m][w.cols] · wᵀ
  virtual void MatMul(const Tensor& x, const Tensor& w, const Tensor& out) = 0;
  // Two or three products of the same x at once (gate/up, Q/K/V); same results as
  // separate calls.
  virtual void MatMul2(const Tensor& x, const Tensor& w0, const Tensor& out0, const Tensor& w1,
                       const Tensor& out1) = 0;
  virtual void MatMul3(const Tensor& x, const Tensor& w0, const Tensor& out0, const Tensor& w1,
                       const Tensor& out1, const Tensor& w2, const Tensor& out2) = 0;
  // out[r] = x[r] / sqrt(mean(x[r]²) + eps) × weight           x, out [rows][dim]
  virtual void RmsNorm(const Tensor& x, const Tensor& weight, float eps, const Tensor& out) = 0;
  // table [T][rope_dim]: cos of every (token, pair) angle in the first rope_dim/2
  // columns, sin in the rest; `freq_factors` [1][rope_dim/2] divides the frequencies
  // (Llama 3) or is empty. Built once per pass, shared by Q and K of every layer.
  virtual void RopeTable(const Tensor& positions, const Tensor& freq_factors, const RopeParams& p,
                         const Tensor& table) = 0;
  // x [T][n_heads × head_dim] rotated in place by row t of `table`.
  virtual void Rope(const Tensor& x, int32_t n_heads, const Tensor& table, const RopeParams& p) = 0;
  // out = silu(gate) × up, element-wise (out may be gate).
  virtual void SwiGlu(const Tensor& gate, const Tensor& up, const Tensor& out) = 0;
  // out = gelu(gate) × up with GELU's tanh approximation (Gemma), element-wise (out
  // may be gate).
  virtual void GeGlu(const Tensor& gate, const Tensor& up, const Tensor& out) = 0;
  // x *= factor, element-wise (Gemma's embedding scale).
  virtual void Scale(const Tensor& x, float factor) = 0;
  // x = cap · tanh(x / cap), element-wise (Gemma 2's final logit soft-capping).
  virtual void SoftCap(const Tensor& x, float cap) = 0;
  // x += y, element-wise.
  virtual void Add(const Tensor& x, const Tensor& y) = 0;
  // x += y, then out = RmsNorm(x, weight, eps): the residual add and the next norm in
  // one pass over each row (the same results as Add then RmsNorm).
  virtual void AddRmsNorm(const Tensor& x, const Tensor& y, const Tensor& weight, float eps,
                          const Tensor& out) = 0;
  // Per row t of `logits` [T][experts] (MoeRouting `r`): ids [T][r.used] int32 = the
  // picked experts, the largest gating value first and the lower id first on equal
  // ones (values plus `bias` [1][experts] where it is not empty, for the pick only);
  // weights [T][r.used] f32 = their gating values, divided by their sum when
  // r.normalize, times r.scale.
  virtual void MoeRoute(const Tensor& logits, const Tensor& bias, const MoeRouting& r,
                        const Tensor& ids, const Tensor& weights) = 0;
  // out [T][hidden] = Σ_s weights[t][s] · down_e(act(gate_e · x[t], up_e · x[t])),
  // e = ids[t][s] (each product plus its bias row where there are biases), summed in
  // slot order from zero, then plus the shared expert's scaled
  // output where there is one; x [T][hidden]. Row t's result depends on row t alone
  // (rows are grouped by expert for the products); an id outside the experts is an
  // error.
  virtual void MoeFfn(const Tensor& x, const Tensor& ids, const Tensor& weights,
                      const ExpertWeights& experts, GatedActivation act, const Tensor& out) = 0;
  // x [rows][dim] += bias [1][dim] for every row.
  virtual void AddBias(const Tensor& x, const Tensor& bias) = 0;
  // dst [R][cols] = rows `rows` [1][R] of src.
  virtual void GatherRows(const Tensor& src, const Tensor& rows, const Tensor& dst) = 0;
  // ids [1][logits.rows] int32 = each row's arg-max (lowest id on ties; select.h): the
  // greedy sampler's whole answer, so a device need not copy the logits out.
  virtual void ArgMax(const Tensor& logits, const Tensor& ids) = 0;
  // k, v [T][n_kv_heads × head_dim] of layer `layer` into the slots of step.slot_mapping.
  virtual void WriteKv(const Tensor& k, const Tensor& v, const StepView& step, int32_t layer,
                       KvStorage* kv) = 0;
  // Causal attention of q [T][n_heads × head_dim] over each sequence's cached K/V
  // (GQA-aware; shape.window and shape.softcap honoured); out has q's shape.
  virtual void Attention(const Tensor& q, const StepView& step, const AttentionShape& shape,
                         int32_t layer, const KvStorage& kv, const Tensor& out) = 0;
};

}  // namespace tandem::kernels

#endif  // TANDEM_KERNELS_BACKEND_H_
