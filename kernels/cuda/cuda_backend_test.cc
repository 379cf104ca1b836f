// Every CudaBackend op against the CpuBackend op of the same name (the CPU reference of
// each trio) on the same random inputs, at awkward sizes (rows 1/7/17/300, widths that
// are not powers of two), outputs poisoned with NaN first. The GPU reads bf16 weights;
// the CPU reads the same values as float32, so a GEMM differs only in the rounding of
// its activation operand and the summation order. Also: bad indices the device sees
// become InvalidArgument at Synchronize and leave the backend working. Skips where no
// CUDA device is present.
#include "kernels/cuda/cuda_backend.h"

#include <cmath>
#include <random>
#include <vector>

#include "common/util/half.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/ops.h"
#include "kernels/cuda/require_gpu.h"
#include "kernels/kv_storage.h"
#include "kernels/testing/numeric.h"

namespace tandem::kernels::cuda {
namespace {

using ::tandem::kernels::testing::MaxRelError;
using ::tandem::kernels::testing::Noise;

// Values exactly representable in bf16 (the GPU's weights), as float32 and as bits.
std::vector<float> RoundToBf16(std::vector<float> v) {
  for (float& x : v) x = Bf16ToFloat(FloatToBf16(x));
  return v;
}
std::vector<uint16_t> Bf16Bits(const std::vector<float>& v) {
  std::vector<uint16_t> b(v.size());
  for (size_t i = 0; i < v.size(); ++i) b[i] = FloatToBf16(v[i]);
  return b;
}

// A backend and its buffers: host vectors in, host vectors out.
struct On {
  explicit On(std::unique_ptr<Backend> backend) : b(std::move(backend)) {}
  template <class T>
  Tensor Put(const std::vector<T>& host, model::GgmlType type, int64_t rows, int64_t cols) {
    const int64_t bytes = static_cast<int64_t>(host.size() * sizeof(T));
    buffers.push_back(*b->Allocate(MemoryKind::kActivations, bytes));
    b->CopyToDevice(host.data(), *buffers.back(), 0, bytes);
    return {buffers.back().get(), 0, type, rows, cols};
  }
  Tensor F32(const std::vector<float>& host, int64_t rows, int64_t cols) {
    return Put(host, model::GgmlType::kF32, rows, cols);
  }
  Tensor I32(const std::vector<int32_t>& host) {
    return Put(host, model::GgmlType::kI32, 1, static_cast<int64_t>(host.size()));
  }
  Tensor Poisoned(int64_t rows, int64_t cols) {
    return F32(std::vector<float>(static_cast<size_t>(rows * cols), NAN), rows, cols);
  }
  std::vector<float> Get(const Tensor& t) {
    std::vector<float> host(static_cast<size_t>(t.elements()));
    b->CopyToHost(*t.buffer, t.offset, t.bytes(), host.data());
    absl::Status st = b->Synchronize();
    EXPECT_TRUE(st.ok()) << st;
    return host;
  }
  std::unique_ptr<Backend> b;
  std::vector<std::unique_ptr<Buffer>> buffers;
};

struct Pair {
  On cpu{std::make_unique<CpuBackend>(CpuBackendOptions{.num_threads = 2})};
  On gpu{*CudaBackend::Create({})};
  Pair() { EXPECT_TRUE(gpu.b->ReserveScratch({512, 8192, 64 * 130}).ok()); }
};

constexpr int64_t kRows[] = {1, 7, 17, 300};

TEST(CudaBackend, EmbeddingReadsBf16TablesExactly) {
  REQUIRE_GPU();
  std::mt19937 rng(1);
  for (int64_t cols : {64, 576, 4100}) {
    Pair p;
    const int64_t vocab = 1001;
    const auto table = RoundToBf16(Noise(vocab * cols, rng));
    std::vector<int32_t> ids = {0, 1000, 17, 17, 5, 999, 3};
    const Tensor tc = p.cpu.F32(table, vocab, cols);
    const Tensor tg = p.gpu.Put(Bf16Bits(table), model::GgmlType::kBF16, vocab, cols);
    const Tensor oc = p.cpu.Poisoned(7, cols), og = p.gpu.Poisoned(7, cols);
    p.cpu.b->Embedding(tc, p.cpu.I32(ids), oc);
    p.gpu.b->Embedding(tg, p.gpu.I32(ids), og);
    EXPECT_EQ(p.gpu.Get(og), p.cpu.Get(oc)) << "cols " << cols;
  }
}

TEST(CudaBackend, BadIndicesAreErrorsAndTheBackendKeepsWorking) {
  REQUIRE_GPU();
  std::mt19937 rng(2);
  Pair p;
  const auto table = Noise(10 * 64, rng);
  const Tensor t = p.gpu.Put(Bf16Bits(table), model::GgmlType::kBF16, 10, 64);
  const Tensor out = p.gpu.Poisoned(2, 64);
  p.gpu.b->Embedding(t, p.gpu.I32({3, 10}), out);
  absl::Status st = p.gpu.b->Synchronize();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  const Tensor src = p.gpu.F32(Noise(5 * 8, rng), 5, 8), dst = p.gpu.Poisoned(1, 8);
  p.gpu.b->GatherRows(src, p.gpu.I32({-1}), dst);
  st = p.gpu.b->Synchronize();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  // The next pass is clean.
  p.gpu.b->Embedding(t, p.gpu.I32({3, 9}), out);
  const auto got = p.gpu.Get(out);
  EXPECT_EQ(got[0], Bf16ToFloat(FloatToBf16(table[3 * 64])));
  // A weights type the kernels do not read is refused, not misread.
  const Tensor q4{t.buffer, 0, model::GgmlType::kQ4_0, 1, 64};
  p.gpu.b->MatMul(p.gpu.F32(Noise(64, rng), 1, 64), q4, p.gpu.Poisoned(1, 1));
  EXPECT_EQ(p.gpu.b->Synchronize().code(), absl::StatusCode::kInvalidArgument);
}

TEST(CudaBackend, MatMulMatchesTheCpuOnTheSameValues) {
  REQUIRE_GPU();
  std::mt19937 rng(3);
  Pair p;
  for (int64_t m : kRows) {
    for (auto [n, k] : {std::pair<int64_t, int64_t>{1000, 576}, {4097, 1536}, {64, 8192}}) {
      // x rounded to bf16 too: the GPU's conversion then changes nothing.
      const auto x = RoundToBf16(Noise(m * k, rng));
      const auto w = RoundToBf16(Noise(n * k, rng, 0.05f));
      const Tensor oc = p.cpu.Poisoned(m, n), og = p.gpu.Poisoned(m, n);
      p.cpu.b->MatMul(p.cpu.F32(x, m, k), p.cpu.F32(w, n, k), oc);
      p.gpu.b->MatMul(p.gpu.F32(x, m, k), p.gpu.Put(Bf16Bits(w), model::GgmlType::kBF16, n, k), og);
      // fp32 accumulation over k terms of size ~0.05: order effects ≪ 1e-3.
      EXPECT_LT(MaxRelError(p.gpu.Get(og), p.cpu.Get(oc)), 1e-3)
          << "m " << m << " n " << n << " k " << k;
    }
  }
}

// --batch-invariant: a row's GEMM result is bit-identical whatever the number of rows
// (the pinned algorithm must not split a dot product by problem size — stream-K
// included), for the Llama-3-8B projection shapes.
TEST(CudaBackend, BatchInvariantGemmRowsDoNotDependOnM) {
  REQUIRE_GPU();
  std::mt19937 rng(9);
  On gpu{*CudaBackend::Create({.batch_invariant = true})};
  ASSERT_TRUE(gpu.b->ReserveScratch({2048, 14336, 32 * 130}).ok());
  for (auto [n, k] :
       {std::pair<int64_t, int64_t>{4096, 4096}, {1024, 4096}, {14336, 4096}, {4096, 14336}}) {
    const Tensor w = gpu.Put(Bf16Bits(Noise(n * k, rng, 0.02f)), model::GgmlType::kBF16, n, k);
    const auto x = Noise(2048 * k, rng);
    std::vector<float> first_row;
    for (int64_t m : {1, 7, 64, 300, 2048}) {
      const Tensor out = gpu.Poisoned(m, n);
      gpu.b->MatMul(gpu.F32(std::vector<float>(x.begin(), x.begin() + m * k), m, k), w, out);
      const auto got = gpu.Get(out);
      const std::vector<float> row(got.begin(), got.begin() + n);
      if (first_row.empty()) first_row = row;
      EXPECT_EQ(row, first_row) << n << "x" << k << " at m " << m;
    }
    gpu.buffers.clear();  // keep memory flat across shapes (w included: made anew)
  }
}

TEST(CudaBackend, MatMul3EqualsThreeMatMuls) {
  REQUIRE_GPU();
  std::mt19937 rng(4);
  Pair p;
  const int64_t m = 17, k = 576;
  const Tensor x = p.gpu.F32(Noise(m * k, rng), m, k);
  std::vector<Tensor> w, a, b;
  for (int64_t n : {576, 192, 192}) {
    w.push_back(p.gpu.Put(Bf16Bits(Noise(n * k, rng, 0.05f)), model::GgmlType::kBF16, n, k));
    a.push_back(p.gpu.Poisoned(m, n));
    b.push_back(p.gpu.Poisoned(m, n));
  }
  p.gpu.b->MatMul3(x, w[0], a[0], w[1], a[1], w[2], a[2]);
  for (int i = 0; i < 3; ++i) p.gpu.b->MatMul(x, w[i], b[i]);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(p.gpu.Get(a[i]), p.gpu.Get(b[i]));
}

TEST(CudaBackend, RowOpsMatchTheCpu) {
  REQUIRE_GPU();
  std::mt19937 rng(5);
  Pair p;
  for (int64_t rows : kRows) {
    for (int64_t dim : {576, 4096, 1000}) {
      SCOPED_TRACE(::testing::Message() << rows << "x" << dim);
      const auto x = Noise(rows * dim, rng), y = Noise(rows * dim, rng), w = Noise(dim, rng);
      {  // RmsNorm
        const Tensor oc = p.cpu.Poisoned(rows, dim), og = p.gpu.Poisoned(rows, dim);
        p.cpu.b->RmsNorm(p.cpu.F32(x, rows, dim), p.cpu.F32(w, 1, dim), 1e-5f, oc);
        p.gpu.b->RmsNorm(p.gpu.F32(x, rows, dim), p.gpu.F32(w, 1, dim), 1e-5f, og);
        EXPECT_LT(MaxRelError(p.gpu.Get(og), p.cpu.Get(oc)), 1e-5);
      }
      {  // SwiGlu
        const Tensor oc = p.cpu.Poisoned(rows, dim), og = p.gpu.Poisoned(rows, dim);
        p.cpu.b->SwiGlu(p.cpu.F32(x, rows, dim), p.cpu.F32(y, rows, dim), oc);
        p.gpu.b->SwiGlu(p.gpu.F32(x, rows, dim), p.gpu.F32(y, rows, dim), og);
        EXPECT_LT(MaxRelError(p.gpu.Get(og), p.cpu.Get(oc)), 1e-5);
      }
      {  // GeGlu
        const Tensor oc = p.cpu.Poisoned(rows, dim), og = p.gpu.Poisoned(rows, dim);
        p.cpu.b->GeGlu(p.cpu.F32(x, rows, dim), p.cpu.F32(y, rows, dim), oc);
        p.gpu.b->GeGlu(p.gpu.F32(x, rows, dim), p.gpu.F32(y, rows, dim), og);
        EXPECT_LT(MaxRelError(p.gpu.Get(og), p.cpu.Get(oc)), 1e-5);
      }
      {  // Scale (exact) and SoftCap
        const Tensor xc = p.cpu.F32(x, rows, dim), xg = p.gpu.F32(x, rows, dim);
        p.cpu.b->Scale(xc, 3.0f);
        p.gpu.b->Scale(xg, 3.0f);
        EXPECT_EQ(p.gpu.Get(xg), p.cpu.Get(xc));
        p.cpu.b->SoftCap(xc, 2.0f);
        p.gpu.b->SoftCap(xg, 2.0f);
        EXPECT_LT(MaxRelError(p.gpu.Get(xg), p.cpu.Get(xc)), 1e-5);
      }
      {  // AddRmsNorm: the residual (exactly) and the norm
        const Tensor xc = p.cpu.F32(x, rows, dim), xg = p.gpu.F32(x, rows, dim);
        const Tensor oc = p.cpu.Poisoned(rows, dim), og = p.gpu.Poisoned(rows, dim);
        p.cpu.b->AddRmsNorm(xc, p.cpu.F32(y, rows, dim), p.cpu.F32(w, 1, dim), 1e-5f, oc);
        p.gpu.b->AddRmsNorm(xg, p.gpu.F32(y, rows, dim), p.gpu.F32(w, 1, dim), 1e-5f, og);
        EXPECT_EQ(p.gpu.Get(xg), p.cpu.Get(xc));
        EXPECT_LT(MaxRelError(p.gpu.Get(og), p.cpu.Get(oc)), 1e-5);
      }
      {  // Add, AddBias
        const Tensor xc = p.cpu.F32(x, rows, dim), xg = p.gpu.F32(x, rows, dim);
        p.cpu.b->Add(xc, p.cpu.F32(y, rows, dim));
        p.gpu.b->Add(xg, p.gpu.F32(y, rows, dim));
        p.cpu.b->AddBias(xc, p.cpu.F32(w, 1, dim));
        p.gpu.b->AddBias(xg, p.gpu.F32(w, 1, dim));
        EXPECT_EQ(p.gpu.Get(xg), p.cpu.Get(xc));
      }
      {  // GatherRows
        std::vector<int32_t> pick;
        for (int64_t i = 0; i < rows; i += 3) pick.push_back(static_cast<int32_t>(rows - 1 - i));
        const int64_t n = static_cast<int64_t>(pick.size());
        const Tensor oc = p.cpu.Poisoned(n, dim), og = p.gpu.Poisoned(n, dim);
        p.cpu.b->GatherRows(p.cpu.F32(x, rows, dim), p.cpu.I32(pick), oc);
        p.gpu.b->GatherRows(p.gpu.F32(x, rows, dim), p.gpu.I32(pick), og);
        EXPECT_EQ(p.gpu.Get(og), p.cpu.Get(oc));
      }
    }
  }
}

TEST(CudaBackend, RopeMatchesTheCpu) {
  REQUIRE_GPU();
  std::mt19937 rng(6);
  Pair p;
  for (int32_t head_dim : {64, 128}) {
    for (RopeStyle style : {RopeStyle::kAdjacent, RopeStyle::kHalves}) {
      for (bool factors : {false, true}) {
        for (int64_t rows : kRows) {
          SCOPED_TRACE(::testing::Message() << head_dim << " style " << static_cast<int>(style)
                                            << " factors " << factors << " rows " << rows);
          RopeParams rp{head_dim, head_dim, 500000.0f, factors ? 1.0f : 4.0f, style};
          std::vector<int32_t> pos;
          for (int64_t r = 0; r < rows; ++r) pos.push_back(static_cast<int32_t>((r * 1237) % 8193));
          std::vector<float> ff(head_dim / 2);
          for (int32_t i = 0; i < head_dim / 2; ++i) ff[i] = 1.0f + static_cast<float>(i % 7);
          const int32_t heads = 3;
          const auto x = Noise(rows * heads * head_dim, rng);
          const Tensor tc = p.cpu.Poisoned(rows, head_dim), tg = p.gpu.Poisoned(rows, head_dim);
          const Tensor fc = factors ? p.cpu.F32(ff, 1, head_dim / 2) : Tensor{};
          const Tensor fg = factors ? p.gpu.F32(ff, 1, head_dim / 2) : Tensor{};
          p.cpu.b->RopeTable(p.cpu.I32(pos), fc, rp, tc);
          p.gpu.b->RopeTable(p.gpu.I32(pos), fg, rp, tg);
          // Angles up to 8192 rad in float32: sin/cos agree to ~1e-3 of a radian's ulp.
          EXPECT_LT(MaxRelError(p.gpu.Get(tg), p.cpu.Get(tc)), 2e-3);
          const Tensor xc = p.cpu.F32(x, rows, heads * head_dim);
          const Tensor xg = p.gpu.F32(x, rows, heads * head_dim);
          p.cpu.b->Rope(xc, heads, tc, rp);
          p.gpu.b->Rope(xg, heads, tg, rp);
          EXPECT_LT(MaxRelError(p.gpu.Get(xg), p.cpu.Get(xc)), 1e-2);
        }
      }
    }
  }
}

TEST(CudaBackend, WriteKvStoresTheCpuBytes) {
  REQUIRE_GPU();
  std::mt19937 rng(7);
  for (kv::KvDtype dtype : {kv::KvDtype::kF32, kv::KvDtype::kBF16, kv::KvDtype::kF16}) {
    for (int32_t block_size : {1, 16}) {
      Pair p;
      const kv::KvLayout layout{3, 2, 64, block_size, dtype};
      const int64_t blocks = 40;
      auto kc = *KvStorage::Create(p.cpu.b.get(), layout, blocks * layout.BlockBytes());
      auto kg = *KvStorage::Create(p.gpu.b.get(), layout, blocks * layout.BlockBytes());
      const int64_t n = 17, kvd = 2 * 64;
      std::vector<int32_t> slots;
      for (int64_t t = 0; t < n; ++t)
        slots.push_back(static_cast<int32_t>((t * 7 + 3) % (blocks * block_size)));
      const auto k = Noise(n * kvd, rng), v = Noise(n * kvd, rng);
      StepView sc, sg;
      sc.slot_mapping = p.cpu.I32(slots);
      sg.slot_mapping = p.gpu.I32(slots);
      p.cpu.b->WriteKv(p.cpu.F32(k, n, kvd), p.cpu.F32(v, n, kvd), sc, 2, kc.get());
      p.gpu.b->WriteKv(p.gpu.F32(k, n, kvd), p.gpu.F32(v, n, kvd), sg, 2, kg.get());
      std::vector<uint8_t> bc(static_cast<size_t>(kc->bytes())), bg(bc.size());
      ASSERT_TRUE(p.cpu.b->ReadNow(kc->buffer(), 0, kc->bytes(), bc.data()).ok());
      ASSERT_TRUE(p.gpu.b->Synchronize().ok());
      ASSERT_TRUE(p.gpu.b->ReadNow(kg->buffer(), 0, kg->bytes(), bg.data()).ok());
      EXPECT_EQ(bg, bc) << kv::KvDtypeName(dtype) << " block " << block_size;
    }
  }
}

TEST(CudaBackend, ArgMaxMatchesTheCpuWithTies) {
  REQUIRE_GPU();
  std::mt19937 rng(8);
  Pair p;
  for (int64_t rows : {1, 7, 17}) {
    const int64_t vocab = 128256;
    std::vector<float> v(static_cast<size_t>(rows * vocab));
    for (float& x : v) x = static_cast<float>(rng() % 64);  // many ties at the top
    const std::vector<int32_t> poison(static_cast<size_t>(rows), -7);
    const Tensor ic = p.cpu.I32(poison), ig = p.gpu.I32(poison);
    p.cpu.b->ArgMax(p.cpu.F32(v, rows, vocab), ic);
    p.gpu.b->ArgMax(p.gpu.F32(v, rows, vocab), ig);
    std::vector<int32_t> a(static_cast<size_t>(rows)), b(a.size());
    p.cpu.b->CopyToHost(*ic.buffer, 0, rows * 4, a.data());
    p.gpu.b->CopyToHost(*ig.buffer, 0, rows * 4, b.data());
    ASSERT_TRUE(p.cpu.b->Synchronize().ok());
    ASSERT_TRUE(p.gpu.b->Synchronize().ok());
    EXPECT_EQ(b, a) << rows;
  }
}

TEST(CudaBackend, EventsAndReadNowSeeFinishedWork) {
  REQUIRE_GPU();
  Pair p;
  std::vector<float> x(1 << 20, 1.0f), y(1 << 20, 2.0f);
  const Tensor a = p.gpu.F32(x, 1024, 1024), b = p.gpu.F32(y, 1024, 1024);
  for (int i = 0; i < 10; ++i) p.gpu.b->Add(a, b);
  auto ev = p.gpu.b->RecordEvent();
  ASSERT_TRUE(ev->Wait().ok());
  std::vector<float> got(1 << 20);
  ASSERT_TRUE(p.gpu.b->ReadNow(*a.buffer, 0, a.bytes(), got.data()).ok());
  EXPECT_EQ(got[12345], 21.0f);
  EXPECT_EQ(p.gpu.b->ReadNow(*a.buffer, 8, a.bytes(), got.data()).code(),
            absl::StatusCode::kOutOfRange);
  ASSERT_TRUE(p.gpu.b->Synchronize().ok());
}

// A buffer is zero when Allocate returns, not only once the backend's stream reaches
// its fill: a transport writes a new buffer at once on a stream of its own (CUDA IPC,
// NCCL). With 30 ms of work queued on the compute stream, a copy on the other stream
// into a fresh buffer must survive (the fill may not land after it).
TEST(CudaBackend, AFreshBufferIsZeroBeforeAnotherStreamWritesIt) {
  REQUIRE_GPU();
  On gpu{*CudaBackend::Create({})};
  const int64_t n = int64_t{16} << 20;  // 64 MiB of floats
  const Tensor pattern = gpu.F32(std::vector<float>(static_cast<size_t>(n), 3.0f), 1, n);
  const Tensor busy = gpu.F32(std::vector<float>(int64_t{64} << 20, 1.0f), 1, int64_t{64} << 20);
  ASSERT_TRUE(gpu.b->Synchronize().ok());
  for (int i = 0; i < 200; ++i) gpu.b->Scale(busy, 1.0f);  // ~0.2 ms each on an H100
  auto fresh = *gpu.b->Allocate(MemoryKind::kStaging, n * 4);
  const Copy2D c{.src = pattern.buffer,
                 .src_pitch = n * 4,
                 .dst = fresh.get(),
                 .dst_pitch = n * 4,
                 .width = n * 4,
                 .rows = 1};
  ASSERT_TRUE(gpu.b->CopyNow(c).ok());
  ASSERT_TRUE(gpu.b->Synchronize().ok());
  std::vector<float> got(static_cast<size_t>(n));
  ASSERT_TRUE(gpu.b->ReadNow(*fresh, 0, n * 4, got.data()).ok());
  EXPECT_EQ(got.front(), 3.0f);
  EXPECT_EQ(got.back(), 3.0f) << "the zero fill landed after the other stream's copy";
}

// A graph captured before ReserveScratch moved the scratch is refused at Replay (it
// would read freed memory); one captured after replays.
TEST(CudaBackend, AGraphOverMovedScratchIsRefused) {
  REQUIRE_GPU();
  std::mt19937 rng(10);
  On gpu{*CudaBackend::Create({})};
  ASSERT_TRUE(gpu.b->ReserveScratch({16, 512, 8 * 130}).ok());
  const Tensor x = gpu.F32(Noise(16 * 512, rng), 16, 512);
  const Tensor w =
      gpu.Put(Bf16Bits(Noise(256 * 512, rng, 0.05f)), model::GgmlType::kBF16, 256, 512);
  const Tensor out = gpu.Poisoned(16, 256);
  gpu.b->MatMul(x, w, out);  // eager first (plans chosen outside any capture)
  ASSERT_TRUE(gpu.b->Synchronize().ok());
  const auto eager = gpu.Get(out);
  ASSERT_TRUE(gpu.b->BeginCapture());
  gpu.b->MatMul(x, w, out);  // reads the bf16 copy of x in the scratch
  auto graph = gpu.b->EndCapture();
  ASSERT_TRUE(graph.ok()) << graph.status();
  const int64_t epoch = gpu.b->ScratchEpoch();
  ASSERT_TRUE(gpu.b->ReserveScratch({4096, 8192, 8 * 130}).ok());  // another executor's
  EXPECT_NE(gpu.b->ScratchEpoch(), epoch);
  gpu.b->Replay(**graph);
  EXPECT_EQ(gpu.b->Synchronize().code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(gpu.b->BeginCapture());
  gpu.b->MatMul(x, w, out);
  auto again = gpu.b->EndCapture();
  ASSERT_TRUE(again.ok()) << again.status();
  gpu.b->Replay(**again);
  EXPECT_EQ(gpu.Get(out), eager);
}

// Memory() tells this backend's own bytes apart from what the device has free.
TEST(CudaBackend, MemoryCountsItsOwnBuffers) {
  REQUIRE_GPU();
  On gpu{*CudaBackend::Create({})};
  const DeviceMemory before = *gpu.b->Memory();
  auto buffer = *gpu.b->Allocate(MemoryKind::kKv, int64_t{256} << 20);
  const DeviceMemory during = *gpu.b->Memory();
  EXPECT_EQ(during.own_bytes - before.own_bytes, int64_t{256} << 20);
  EXPECT_LE(during.free_bytes, before.free_bytes - (int64_t{256} << 20) + (int64_t{4} << 20));
  buffer.reset();
  EXPECT_EQ(gpu.b->Memory()->own_bytes, before.own_bytes);
}

}  // namespace
}  // namespace tandem::kernels::cuda
