#include "kernels/cpu/cpu_backend.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <thread>

#include "common/model/dequantize.h"
#include "common/util/status_macros.h"
#include "common/util/strings.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/matmul_q8.h"
#include "kernels/cpu/moe.h"
#include "kernels/cpu/ops.h"
#include "kernels/kv_storage.h"
#include "kernels/select.h"

namespace tandem::kernels {

namespace {

// A buffer whose bytes the kernels reach through host(); address() is either the
// same pointer or, for the fence, a PROT_NONE alias of the same pages.
class CpuBuffer : public Buffer {
 public:
  CpuBuffer(void* address, uint8_t* host, int64_t bytes, MemoryKind kind, int64_t mapped, bool owns)
      : Buffer(address, bytes, kind), host_(host), mapped_(mapped), owns_(owns) {}
  ~CpuBuffer() override {
    if (!owns_) return;
    if (address() != host_) munmap(address(), static_cast<size_t>(mapped_));
    munmap(host_, static_cast<size_t>(mapped_));
  }
  uint8_t* host() const { return host_; }

 private:
  uint8_t* const host_;
  const int64_t mapped_;
  const bool owns_;
};

// Whether [offset, offset + bytes) lies inside `b`.
bool Inside(const Buffer& b, int64_t offset, int64_t bytes) {
  return offset >= 0 && bytes >= 0 && offset + bytes <= b.bytes();
}

uint8_t* HostOf(const Buffer& b) { return static_cast<const CpuBuffer&>(b).host(); }

template <class T = float>
T* Host(const Tensor& t) {
  return reinterpret_cast<T*>(HostOf(*t.buffer) + t.offset);
}

std::span<const int32_t> Ints(const Tensor& t) {
  return {Host<int32_t>(t), static_cast<size_t>(t.cols)};
}

WeightMatrix Weight(const Tensor& w) { return {w.type, w.rows, w.cols, Host<uint8_t>(w)}; }

KvView View(const KvStorage& kv) { return {kv.layout(), kv.num_blocks(), HostOf(kv.buffer())}; }

PagedBatch Batch(const StepView& s) {
  return {Ints(s.q_indptr), Ints(s.kv_len), Ints(s.block_indptr), Ints(s.block_ids)};
}

// Ops run when called, so an event is complete when recorded; it reports whether the
// pass had failed by then.
class DoneEvent : public Event {
 public:
  explicit DoneEvent(absl::Status status) : status_(std::move(status)) {}
  absl::Status Wait() override { return status_; }

 private:
  const absl::Status status_;
};

int Threads(int requested) {
  return requested > 0 ? requested
                       : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

}  // namespace

CpuBackend::CpuBackend(const CpuBackendOptions& options)
    : fence_(options.fence),
      math_(options.math),
      pool_(std::make_unique<ThreadPool>(Threads(options.num_threads))) {}

absl::StatusOr<std::unique_ptr<Buffer>> CpuBackend::Allocate(MemoryKind kind, int64_t bytes) {
  if (bytes < 0) return absl::InvalidArgumentError("buffer size must not be negative");
  const int64_t page = sysconf(_SC_PAGESIZE);
  const int64_t mapped = std::max<int64_t>(page, (bytes + page - 1) / page * page);
  auto no_memory = [&](const char* what) {
    return absl::ResourceExhaustedError(
        StrCat("cpu backend: ", what, " of ", bytes, " bytes failed: ", std::strerror(errno)));
  };
  if (!fence_) {
    void* p = mmap(nullptr, static_cast<size_t>(mapped), PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return no_memory("mmap");
    return std::unique_ptr<Buffer>(
        new CpuBuffer(p, static_cast<uint8_t*>(p), bytes, kind, mapped, true));
  }
  const int fd = memfd_create("tandem-fence", MFD_CLOEXEC);
  if (fd < 0) return no_memory("memfd_create");
  if (ftruncate(fd, mapped) != 0) {
    close(fd);
    return no_memory("ftruncate");
  }
  void* work =
      mmap(nullptr, static_cast<size_t>(mapped), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  void* fenced = work == MAP_FAILED
                     ? MAP_FAILED
                     : mmap(nullptr, static_cast<size_t>(mapped), PROT_NONE, MAP_SHARED, fd, 0);
  close(fd);
  if (fenced == MAP_FAILED) {
    if (work != MAP_FAILED) munmap(work, static_cast<size_t>(mapped));
    return no_memory("mmap");
  }
  return std::unique_ptr<Buffer>(
      new CpuBuffer(fenced, static_cast<uint8_t*>(work), bytes, kind, mapped, true));
}

absl::StatusOr<std::unique_ptr<Buffer>> CpuBackend::BorrowHost(const void* host, int64_t bytes) {
  if (fence_) {
    return absl::FailedPreconditionError("cpu-fence backend: host memory cannot be borrowed");
  }
  auto* p = static_cast<uint8_t*>(const_cast<void*>(host));
  return std::unique_ptr<Buffer>(new CpuBuffer(p, p, bytes, MemoryKind::kWeights, bytes, false));
}

void CpuBackend::CopyToDevice(const void* src, const Buffer& dst, int64_t offset, int64_t bytes) {
  if (!Proceed(/*op=*/false)) return;
  if (!Inside(dst, offset, bytes)) {
    return Fail(absl::OutOfRangeError("CopyToDevice: range outside the buffer"));
  }
  std::memcpy(HostOf(dst) + offset, src, static_cast<size_t>(bytes));
}

void CpuBackend::CopyToHost(const Buffer& src, int64_t offset, int64_t bytes, void* dst) {
  if (!Proceed(/*op=*/false)) return;
  if (!Inside(src, offset, bytes)) {
    return Fail(absl::OutOfRangeError("CopyToHost: range outside the buffer"));
  }
  std::memcpy(dst, HostOf(src) + offset, static_cast<size_t>(bytes));
}

absl::Status CpuBackend::ReadNow(const Buffer& src, int64_t offset, int64_t bytes,
                                 void* dst) const {
  if (!Inside(src, offset, bytes)) {
    return absl::OutOfRangeError("ReadNow: range outside the buffer");
  }
  std::memcpy(dst, HostOf(src) + offset, static_cast<size_t>(bytes));
  return absl::OkStatus();
}

absl::Status CpuBackend::CopyNow(const Copy2D& c) const {
  RETURN_IF_ERROR(CheckCopy2D(c));
  for (int64_t r = 0; r < c.rows; ++r) {
    std::memmove(HostOf(*c.dst) + c.dst_offset + r * c.dst_pitch,
                 HostOf(*c.src) + c.src_offset + r * c.src_pitch, static_cast<size_t>(c.width));
  }
  return absl::OkStatus();
}

std::shared_ptr<Event> CpuBackend::RecordEvent() { return std::make_shared<DoneEvent>(error_); }

absl::Status CpuBackend::Synchronize() {
  absl::Status st = std::move(error_);
  error_ = absl::OkStatus();
  return st;
}

bool CpuBackend::Proceed(bool op) {
  if (!error_.ok()) return false;
  if (!op) return true;
  std::lock_guard<std::mutex> lock(fault_mu_);
  if (!injected_.ok() && fault_countdown_-- == 0) {
    error_ = std::move(injected_);
    injected_ = absl::OkStatus();
    return false;
  }
  return true;
}

void CpuBackend::Fail(absl::Status error) {
  if (error_.ok()) error_ = std::move(error);
}

void CpuBackend::Embedding(const Tensor& table, const Tensor& ids, const Tensor& out) {
  if (!Proceed()) return;
  const int64_t rb = table.RowBytes();
  const uint8_t* base = Host<uint8_t>(table);
  const std::span<const int32_t> id = Ints(ids);
  for (size_t i = 0; i < id.size(); ++i) {
    if (id[i] < 0 || id[i] >= table.rows) {
      return Fail(absl::InvalidArgumentError(
          StrCat("embedding: token id ", id[i], " outside [0, ", table.rows, ")")));
    }
    absl::Status st =
        model::Dequantize(table.type, {base + id[i] * rb, static_cast<size_t>(rb)},
                          {Host(out) + i * table.cols, static_cast<size_t>(table.cols)});
    if (!st.ok()) return Fail(st);
  }
}

void CpuBackend::Gemms(const Tensor& x, std::initializer_list<const WeightMatrix*> ws,
                       std::initializer_list<float* const*> outs) {
  if (!Proceed()) return;
  Gemms(Host(x), x.rows, x.cols, ws, outs);
}

void CpuBackend::Gemms(const float* x, int64_t rows, int64_t cols,
                       std::initializer_list<const WeightMatrix*> ws,
                       std::initializer_list<float* const*> outs) {
  // Fast math where every matrix of the group has an integer path (they share the
  // quantized x); the float path otherwise.
  const bool q8 =
      math_ == CpuMath::kFast && cols % kQ8Block == 0 &&
      std::all_of(ws.begin(), ws.end(), [](const WeightMatrix* w) { return Q8Supports(w->type); });
  if (q8) return MatMulQ8Group(x, rows, ws, outs, pool_.get());
  MatMulGroup(x, rows, ws, outs, pool_.get());
}

void CpuBackend::MatMul(const Tensor& x, const Tensor& w, const Tensor& out) {
  const WeightMatrix a = Weight(w);
  float* o = Host(out);
  Gemms(x, {&a}, {&o});
}

void CpuBackend::MatMul2(const Tensor& x, const Tensor& w0, const Tensor& out0, const Tensor& w1,
                         const Tensor& out1) {
  const WeightMatrix a = Weight(w0), b = Weight(w1);
  float* o0 = Host(out0);
  float* o1 = Host(out1);
  Gemms(x, {&a, &b}, {&o0, &o1});
}

void CpuBackend::MatMul3(const Tensor& x, const Tensor& w0, const Tensor& out0, const Tensor& w1,
                         const Tensor& out1, const Tensor& w2, const Tensor& out2) {
  const WeightMatrix a = Weight(w0), b = Weight(w1), c = Weight(w2);
  float* o0 = Host(out0);
  float* o1 = Host(out1);
  float* o2 = Host(out2);
  Gemms(x, {&a, &b, &c}, {&o0, &o1, &o2});
}

void CpuBackend::RmsNorm(const Tensor& x, const Tensor& weight, float eps, const Tensor& out) {
  if (!Proceed()) return;
  const int64_t dim = x.cols;
  const float* xs = Host(x);
  const float* w = Host(weight);
  float* o = Host(out);
  pool_->ParallelFor(x.rows, [&](int64_t b, int64_t e, int) {
    kernels::RmsNorm(xs + b * dim, w, e - b, dim, eps, o + b * dim);
  });
}

void CpuBackend::RopeTable(const Tensor& positions, const Tensor& freq_factors, const RopeParams& p,
                           const Tensor& table) {
  if (!Proceed()) return;
  BuildRopeTable(Ints(positions), p, freq_factors.empty() ? nullptr : Host(freq_factors),
                 Host(table));
}

void CpuBackend::Rope(const Tensor& x, int32_t n_heads, const Tensor& table, const RopeParams& p) {
  if (!Proceed()) return;
  float* xs = Host(x);
  const float* t = Host(table);
  pool_->ParallelFor(x.rows, [&](int64_t b, int64_t e, int) {
    ApplyRope(xs + b * n_heads * p.head_dim, e - b, n_heads, t, b, p);
  });
}

void CpuBackend::Gated(const Tensor& gate, const Tensor& up, const Tensor& out,
                       void (*act)(const float*, const float*, int64_t, float*)) {
  if (!Proceed()) return;
  const float* g = Host(gate);
  const float* u = Host(up);
  float* o = Host(out);
  pool_->ParallelFor(
      gate.elements(), [&](int64_t b, int64_t e, int) { act(g + b, u + b, e - b, o + b); }, 1024);
}

void CpuBackend::SwiGlu(const Tensor& gate, const Tensor& up, const Tensor& out) {
  Gated(gate, up, out, kernels::SwiGlu);
}

void CpuBackend::GeGlu(const Tensor& gate, const Tensor& up, const Tensor& out) {
  Gated(gate, up, out, kernels::GeGlu);
}

void CpuBackend::Scale(const Tensor& x, float factor) {
  if (!Proceed()) return;
  float* xs = Host(x);
  for (int64_t i = 0; i < x.elements(); ++i) xs[i] *= factor;
}

void CpuBackend::SoftCap(const Tensor& x, float cap) {
  if (!Proceed()) return;
  float* xs = Host(x);
  pool_->ParallelFor(
      x.elements(), [&](int64_t b, int64_t e, int) { kernels::SoftCap(xs + b, e - b, cap); }, 1024);
}

void CpuBackend::Add(const Tensor& x, const Tensor& y) {
  if (!Proceed()) return;
  AddInPlace(Host(x), Host(y), x.elements());
}

void CpuBackend::AddRmsNorm(const Tensor& x, const Tensor& y, const Tensor& weight, float eps,
                            const Tensor& out) {
  if (!Proceed()) return;
  const int64_t dim = x.cols;
  float* xs = Host(x);
  const float* ys = Host(y);
  const float* w = Host(weight);
  float* o = Host(out);
  pool_->ParallelFor(x.rows, [&](int64_t b, int64_t e, int) {
    AddInPlace(xs + b * dim, ys + b * dim, (e - b) * dim);
    kernels::RmsNorm(xs + b * dim, w, e - b, dim, eps, o + b * dim);
  });
}

void CpuBackend::MoeRoute(const Tensor& logits, const Tensor& bias, const MoeRouting& r,
                          const Tensor& ids, const Tensor& weights) {
  if (!Proceed()) return;
  if (logits.cols != r.experts || ids.cols != r.used || weights.cols != r.used || r.used < 1 ||
      r.used > r.experts) {
    return Fail(absl::InvalidArgumentError("moe route: shapes do not agree with the routing"));
  }
  float* l = Host(logits);
  int32_t* id = Host<int32_t>(ids);
  float* w = Host(weights);
  const float* b = bias.empty() ? nullptr : Host(bias);
  pool_->ParallelFor(logits.rows, [&](int64_t begin, int64_t end, int) {
    RouteExperts(l + begin * r.experts, b, end - begin, r, id + begin * r.used, w + begin * r.used);
  });
}

namespace {

// The element-wise gate of a gated FFN: out = act(gate, up).
using GateFn = void (*)(const float*, const float*, int64_t, float*);
GateFn GateOf(GatedActivation act) {
  return act == GatedActivation::kGeluTanh    ? kernels::GeGlu
         : act == GatedActivation::kSwigluOai ? kernels::SwigluOai
                                              : kernels::SwiGlu;
}

}  // namespace

void CpuBackend::GatedFfn(const float* x, int64_t rows, const WeightMatrix& gate,
                          const WeightMatrix& up, const WeightMatrix& down, GatedActivation act,
                          float* out) {
  const int64_t width = gate.rows;
  float* g = out + rows * down.rows;  // after out: gate, then up
  float* u = g + rows * width;
  Gemms(x, rows, gate.cols, {&gate, &up}, {&g, &u});
  const GateFn fn = GateOf(act);
  pool_->ParallelFor(
      rows * width, [&](int64_t b, int64_t e, int) { fn(g + b, u + b, e - b, g + b); }, 1024);
  Gemms(g, rows, width, {&down}, {&out});
}

void CpuBackend::MoeFfn(const Tensor& x, const Tensor& ids, const Tensor& weights,
                        const ExpertWeights& experts, GatedActivation act, const Tensor& out) {
  if (!Proceed()) return;
  const int64_t T = x.rows, H = x.cols, k = ids.cols;
  const int32_t n_experts = static_cast<int32_t>(experts.gate.size());
  if (n_experts == 0 || experts.up.size() != experts.gate.size() ||
      experts.down.size() != experts.gate.size() || weights.cols != k || ids.rows != T ||
      out.cols != H) {
    return Fail(absl::InvalidArgumentError("moe ffn: shapes do not agree"));
  }
  const int64_t W = experts.gate[0].rows;  // every expert's width
  for (int32_t e = 0; e < n_experts; ++e) {
    if (experts.gate[e].rows != W || experts.up[e].rows != W || experts.down[e].cols != W ||
        experts.down[e].rows != H) {
      return Fail(absl::InvalidArgumentError("moe ffn: experts of different shapes"));
    }
  }
  const int32_t* id = Host<int32_t>(ids);
  const float* w = Host(weights);
  const float* xs = Host(x);
  float* o = Host(out);
  const bool q8 = math_ == CpuMath::kFast;
  const GateFn act_fn = GateOf(act);
  // The shared expert (qwen2moe) over every row first: [T][H], then its gate and up.
  const int64_t shared_w = experts.shared_w_gate.empty() ? 0 : experts.shared_w_gate.rows;
  const int64_t shared_floats = shared_w > 0 ? T * (H + 2 * shared_w) : 0;
  // Tokens in chunks whose (token, slot) pairs — gathered rows [H], gate and up [W]
  // each, expert output [H] — fit 64 MiB of scratch (a row's result depends on that
  // row alone, so where a chunk ends changes nothing).
  const int64_t per_token = k * (2 * H + 2 * W);
  const int64_t chunk =
      std::clamp<int64_t>((int64_t{16} << 20) / per_token, 1, std::max<int64_t>(T, 1));
  const size_t need = static_cast<size_t>(shared_floats + std::min(chunk, T) * per_token);
  if (moe_scratch_.size() < need) moe_scratch_.resize(need);
  float* shared = moe_scratch_.data();
  if (shared_w > 0) {
    GatedFfn(xs, T, Weight(experts.shared_w_gate), Weight(experts.shared_w_up),
             Weight(experts.shared_w_down), act, shared);
  }
  const float* shared_gate = experts.shared_gate.empty() ? nullptr : Host(experts.shared_gate);
  const float* gate_bias = experts.gate_bias.empty() ? nullptr : Host(experts.gate_bias);
  const float* up_bias = experts.up_bias.empty() ? nullptr : Host(experts.up_bias);
  const float* down_bias = experts.down_bias.empty() ? nullptr : Host(experts.down_bias);
  std::vector<WeightMatrix> gates, ups, downs;
  for (int32_t e = 0; e < n_experts; ++e) {
    gates.push_back(Weight(experts.gate[e]));
    ups.push_back(Weight(experts.up[e]));
    downs.push_back(Weight(experts.down[e]));
  }
  ExpertGroups groups;
  std::vector<int32_t> row_of;     // grouped row of each pair
  std::vector<int32_t> expert_of;  // expert of each grouped row
  std::vector<MatMulJob> jobs;
  for (int64_t t0 = 0; t0 < T; t0 += chunk) {
    const int64_t nt = std::min(chunk, T - t0), P = nt * k;
    if (absl::Status st =
            GroupByExpert(id + t0 * k, nt, static_cast<int32_t>(k), n_experts, &groups);
        !st.ok()) {
      return Fail(st);
    }
    float* rows = moe_scratch_.data() + shared_floats;  // [P][H], grouped by expert
    float* g = rows + P * H;                            // [P][W]
    float* u = g + P * W;                               // [P][W]
    float* y = u + P * W;                               // [P][H]
    row_of.resize(static_cast<size_t>(P));
    expert_of.resize(static_cast<size_t>(P));
    for (int32_t e = 0; e < n_experts; ++e) {
      for (int32_t r = groups.begin[e]; r < groups.begin[e + 1]; ++r) {
        const int32_t pair = groups.pairs[r];
        row_of[pair] = r;
        expert_of[r] = e;
        std::memcpy(rows + r * H, xs + (t0 + pair / k) * H, static_cast<size_t>(H) * 4);
      }
    }
    // Every active expert's gate and up in one loop, then every down in another.
    jobs.clear();
    for (int32_t e = 0; e < n_experts; ++e) {
      const int32_t b = groups.begin[e], n = groups.begin[e + 1] - b;
      if (n == 0) continue;
      jobs.push_back({rows + b * H, n, &gates[e], g + b * W});
      jobs.push_back({rows + b * H, n, &ups[e], u + b * W});
    }
    MatMulJobs(jobs, q8, pool_.get());
    pool_->ParallelFor(P, [&](int64_t r0, int64_t r1, int) {
      for (int64_t r = r0; r < r1; ++r) {
        const int64_t e = expert_of[r];
        if (gate_bias != nullptr) AddInPlace(g + r * W, gate_bias + e * W, W);
        if (up_bias != nullptr) AddInPlace(u + r * W, up_bias + e * W, W);
        act_fn(g + r * W, u + r * W, W, g + r * W);
      }
    });
    jobs.clear();
    for (int32_t e = 0; e < n_experts; ++e) {
      const int32_t b = groups.begin[e], n = groups.begin[e + 1] - b;
      if (n > 0) jobs.push_back({g + b * W, n, &downs[e], y + b * H});
    }
    MatMulJobs(jobs, q8, pool_.get());
    // Each token's slots in slot order from zero, then the shared expert.
    pool_->ParallelFor(nt, [&](int64_t b, int64_t e, int) {
      for (int64_t t = b; t < e; ++t) {
        float* row = o + (t0 + t) * H;
        std::fill(row, row + H, 0.0f);
        for (int64_t s = 0; s < k; ++s) {
          const int32_t r = row_of[t * k + s];
          float* yr = y + static_cast<int64_t>(r) * H;
          if (down_bias != nullptr) AddInPlace(yr, down_bias + expert_of[r] * H, H);
          const float ws = w[(t0 + t) * k + s];
          for (int64_t c = 0; c < H; ++c) row[c] += ws * yr[c];
        }
        if (shared_w == 0) continue;
        const float* xt = xs + (t0 + t) * H;
        float dot = 0;
        for (int64_t c = 0; c < H; ++c) dot += xt[c] * shared_gate[c];
        const float gs = 1.0f / (1.0f + std::exp(-dot));
        for (int64_t c = 0; c < H; ++c) row[c] += gs * shared[(t0 + t) * H + c];
      }
    });
  }
}

void CpuBackend::AddBias(const Tensor& x, const Tensor& bias) {
  if (!Proceed()) return;
  float* xs = Host(x);
  const float* b = Host(bias);
  for (int64_t r = 0; r < x.rows; ++r) AddInPlace(xs + r * x.cols, b, x.cols);
}

void CpuBackend::GatherRows(const Tensor& src, const Tensor& rows, const Tensor& dst) {
  if (!Proceed()) return;
  const std::span<const int32_t> r = Ints(rows);
  for (size_t i = 0; i < r.size(); ++i) {
    if (r[i] < 0 || r[i] >= src.rows) {
      return Fail(
          absl::InvalidArgumentError(StrCat("gather: row ", r[i], " outside [0, ", src.rows, ")")));
    }
    std::memcpy(Host<uint8_t>(dst) + i * dst.RowBytes(), Host<uint8_t>(src) + r[i] * src.RowBytes(),
                static_cast<size_t>(src.RowBytes()));
  }
}

void CpuBackend::ArgMax(const Tensor& logits, const Tensor& ids) {
  if (!Proceed()) return;
  const float* l = Host(logits);
  int32_t* out = Host<int32_t>(ids);
  pool_->ParallelFor(logits.rows, [&](int64_t b, int64_t e, int) {
    for (int64_t r = b; r < e; ++r) {
      Best best = NoBest();
      for (int64_t c = 0; c < logits.cols; ++c) {
        best = Better(best, {l[r * logits.cols + c], static_cast<int32_t>(c)});
      }
      out[r] = best.id < 0 ? 0 : best.id;
    }
  });
}

void CpuBackend::WriteKv(const Tensor& k, const Tensor& v, const StepView& step, int32_t layer,
                         KvStorage* kv) {
  if (!Proceed()) return;
  kernels::WriteKv(Host(k), Host(v), Ints(step.slot_mapping), layer, View(*kv));
}

void CpuBackend::Attention(const Tensor& q, const StepView& step, const AttentionShape& shape,
                           int32_t layer, const KvStorage& kv, const Tensor& out) {
  if (!Proceed()) return;
  PagedAttention(Host(q), Batch(step), shape, layer, View(kv), Host(out), pool_.get(),
                 shape.sinks.empty() ? nullptr : Host(shape.sinks));
}

}  // namespace tandem::kernels
