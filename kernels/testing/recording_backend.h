// A CPU backend that "captures graphs" the simplest way: between BeginCapture and
// EndCapture each op is recorded as a closure over its arguments instead of running,
// and Replay runs the closures in order. It lets the CPU tests exercise the executor's
// graph path (what is captured, what stays outside, what a replay reads) without a
// GPU; a CUDA graph records the same calls. Its scratch moves as the CUDA backend's
// does (ScratchEpoch + 1 whenever ReserveScratch asks for more), and a replay of a graph
// recorded before counts as stale: on a GPU it would read freed memory.
#ifndef TANDEM_KERNELS_TESTING_RECORDING_BACKEND_H_
#define TANDEM_KERNELS_TESTING_RECORDING_BACKEND_H_

#include <algorithm>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "kernels/cpu/cpu_backend.h"

namespace tandem::kernels::testing {

class RecordingBackend : public CpuBackend {
 public:
  explicit RecordingBackend(const CpuBackendOptions& o) : CpuBackend(o) {}

  int captures() const { return captures_; }
  int replays() const { return replays_; }
  int stale_replays() const { return stale_replays_; }

  absl::Status ReserveScratch(const ScratchSize& size) override {
    const int64_t x = size.rows * size.max_cols, a = size.rows * size.attention_cols;
    if (x > x_cap_ || a > a_cap_) {
      x_cap_ = std::max(x, x_cap_);
      a_cap_ = std::max(a, a_cap_);
      ++epoch_;
    }
    return absl::OkStatus();
  }
  int64_t ScratchEpoch() const override { return epoch_; }

  bool BeginCapture() override {
    recording_ = std::make_unique<Recording>();
    return true;
  }
  absl::StatusOr<std::unique_ptr<Graph>> EndCapture() override {
    ++captures_;
    recording_->epoch = epoch_;
    return std::unique_ptr<Graph>(std::move(recording_));
  }
  void Replay(const Graph& g) override {
    const auto& r = static_cast<const Recording&>(g);
    ++replays_;
    if (r.epoch != epoch_) ++stale_replays_;
    for (const auto& op : r.ops) op();
  }

#define TANDEM_RECORD(call)                         \
  if (recording_) {                                 \
    recording_->ops.push_back([=, this] { call; }); \
    return;                                         \
  }                                                 \
  call
  void Embedding(const Tensor& t, const Tensor& ids, const Tensor& out) override {
    TANDEM_RECORD(CpuBackend::Embedding(t, ids, out));
  }
  void MatMul(const Tensor& x, const Tensor& w, const Tensor& out) override {
    TANDEM_RECORD(CpuBackend::MatMul(x, w, out));
  }
  void MatMul2(const Tensor& x, const Tensor& w0, const Tensor& o0, const Tensor& w1,
               const Tensor& o1) override {
    TANDEM_RECORD(CpuBackend::MatMul2(x, w0, o0, w1, o1));
  }
  void MatMul3(const Tensor& x, const Tensor& w0, const Tensor& o0, const Tensor& w1,
               const Tensor& o1, const Tensor& w2, const Tensor& o2) override {
    TANDEM_RECORD(CpuBackend::MatMul3(x, w0, o0, w1, o1, w2, o2));
  }
  void RmsNorm(const Tensor& x, const Tensor& w, float eps, const Tensor& out) override {
    TANDEM_RECORD(CpuBackend::RmsNorm(x, w, eps, out));
  }
  void RopeTable(const Tensor& pos, const Tensor& ff, const RopeParams& p,
                 const Tensor& table) override {
    TANDEM_RECORD(CpuBackend::RopeTable(pos, ff, p, table));
  }
  void Rope(const Tensor& x, int32_t n_heads, const Tensor& table, const RopeParams& p) override {
    TANDEM_RECORD(CpuBackend::Rope(x, n_heads, table, p));
  }
  void SwiGlu(const Tensor& g, const Tensor& u, const Tensor& out) override {
    TANDEM_RECORD(CpuBackend::SwiGlu(g, u, out));
  }
  void GeGlu(const Tensor& g, const Tensor& u, const Tensor& out) override {
    TANDEM_RECORD(CpuBackend::GeGlu(g, u, out));
  }
  void Scale(const Tensor& x, float factor) override {
    TANDEM_RECORD(CpuBackend::Scale(x, factor));
  }
  void SoftCap(const Tensor& x, float cap) override { TANDEM_RECORD(CpuBackend::SoftCap(x, cap)); }
  void Add(const Tensor& x, const Tensor& y) override { TANDEM_RECORD(CpuBackend::Add(x, y)); }
  void AddRmsNorm(const Tensor& x, const Tensor& y, const Tensor& w, float eps,
                  const Tensor& out) override {
    TANDEM_RECORD(CpuBackend::AddRmsNorm(x, y, w, eps, out));
  }
  void AddBias(const Tensor& x, const Tensor& b) override {
    TANDEM_RECORD(CpuBackend::AddBias(x, b));
  }
  void GatherRows(const Tensor& src, const Tensor& rows, const Tensor& dst) override {
    TANDEM_RECORD(CpuBackend::GatherRows(src, rows, dst));
  }
  void ArgMax(const Tensor& logits, const Tensor& ids) override {
    TANDEM_RECORD(CpuBackend::ArgMax(logits, ids));
  }
  void WriteKv(const Tensor& k, const Tensor& v, const StepView& step, int32_t layer,
               KvStorage* kv) override {
    TANDEM_RECORD(CpuBackend::WriteKv(k, v, step, layer, kv));
  }
  void Attention(const Tensor& q, const StepView& step, const AttentionShape& shape, int32_t layer,
                 const KvStorage& kv, const Tensor& out) override {
    const KvStorage* storage = &kv;
    TANDEM_RECORD(CpuBackend::Attention(q, step, shape, layer, *storage, out));
  }
#undef TANDEM_RECORD

 private:
  struct Recording : Graph {
    std::vector<std::function<void()>> ops;
    int64_t epoch = 0;  // the scratch it was recorded over
  };
  std::unique_ptr<Recording> recording_;
  int captures_ = 0, replays_ = 0, stale_replays_ = 0;
  int64_t x_cap_ = 0, a_cap_ = 0, epoch_ = 0;
};

}  // namespace tandem::kernels::testing

#endif  // TANDEM_KERNELS_TESTING_RECORDING_BACKEND_H_
