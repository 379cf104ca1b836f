// The backend seam: memory ownership (the fence really fences), KV storage copies,
// the sticky error, and ops through the interface equal to the CPU kernels called
// directly.
#include "kernels/backend.h"

#include <cstring>
#include <numeric>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/backend_factory.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/ops.h"
#include "kernels/kv_storage.h"

namespace tandem::kernels {
namespace {

std::unique_ptr<Backend> Make(const std::string& device) {
  auto b = MakeBackend({.device = device, .num_threads = 2});
  EXPECT_TRUE(b.ok()) << b.status();
  return std::move(*b);
}

Tensor F32(const Buffer& b, int64_t rows, int64_t cols, int64_t offset = 0) {
  return {&b, offset, model::GgmlType::kF32, rows, cols};
}

TEST(BackendFactory, NamesTheBadDevice) {
  auto b = MakeBackend({.device = "tpu"});
  EXPECT_EQ(b.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(b.status().message().find("tpu"), std::string_view::npos);
}

// "cuda" is Unimplemented in a build without CUDA; in a CUDA build it is a backend on
// a machine with a GPU and a clear Unavailable without one (never a crash).
TEST(BackendFactory, CudaIsBuiltOrSaysSo) {
  auto b = MakeBackend({.device = "cuda"});
  if (!CudaBuilt()) {
    EXPECT_EQ(b.status().code(), absl::StatusCode::kUnimplemented) << b.status();
  } else if (b.ok()) {
    EXPECT_EQ((*b)->name(), "cuda");
  } else {
    EXPECT_EQ(b.status().code(), absl::StatusCode::kUnavailable) << b.status();
  }
  auto far = MakeBackend({.device = "cuda", .gpu = 4096});
  EXPECT_FALSE(far.ok());
}

TEST(FenceBackend, HostDereferenceOfBackendMemoryCrashes) {
  auto b = Make("cpu-fence");
  auto buf = b->Allocate(MemoryKind::kActivations, 4096);
  ASSERT_TRUE(buf.ok());
  const void* address = (*buf)->address();
  volatile const uint8_t* p = static_cast<const uint8_t*>(address);
  EXPECT_DEATH({ [[maybe_unused]] uint8_t x = p[0]; }, "");
  EXPECT_EQ(b->BorrowHost(address, 16).status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(FenceBackend, CopiesAndOpsWorkThroughTheBackend) {
  for (const char* device : {"cpu", "cpu-fence"}) {
    SCOPED_TRACE(device);
    auto b = Make(device);
    auto buf = *b->Allocate(MemoryKind::kActivations, 3 * 64 * 4);
    std::vector<float> x(64), y(64), got(64);
    std::iota(x.begin(), x.end(), 1.0f);
    std::iota(y.begin(), y.end(), 100.0f);
    b->CopyToDevice(x.data(), *buf, 0, 256);
    b->CopyToDevice(y.data(), *buf, 256, 256);
    b->Add(F32(*buf, 1, 64), F32(*buf, 1, 64, 256));
    b->CopyToHost(*buf, 0, 256, got.data());
    ASSERT_TRUE(b->Synchronize().ok());
    for (int i = 0; i < 64; ++i) EXPECT_EQ(got[i], x[i] + y[i]);
  }
}

TEST(Backend, RmsNormAndRopeEqualTheKernelsCalledDirectly) {
  for (const char* device : {"cpu", "cpu-fence"}) {
    SCOPED_TRACE(device);
    auto b = Make(device);
    const int64_t T = 7, H = 2, D = 16;
    auto buf = *b->Allocate(MemoryKind::kActivations, 1 << 16);
    std::vector<float> x(T * H * D), w(H * D);
    for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.37f * static_cast<float>(i));
    for (size_t i = 0; i < w.size(); ++i) w[i] = 1.0f + 0.01f * static_cast<float>(i);
    std::vector<int32_t> pos = {0, 1, 15, 17, 1000, 4097, 3};
    const Tensor tx = F32(*buf, T, H * D), tw = F32(*buf, 1, H * D, 4096),
                 tp{buf.get(), 8192, model::GgmlType::kI32, 1, T}, table = F32(*buf, T, D, 12288),
                 out = F32(*buf, T, H * D, 24576);
    b->CopyToDevice(x.data(), *buf, 0, x.size() * 4);
    b->CopyToDevice(w.data(), *buf, 4096, w.size() * 4);
    b->CopyToDevice(pos.data(), *buf, 8192, pos.size() * 4);
    const RopeParams p{D, D, 10000.0f, 1.0f, RopeStyle::kHalves};
    b->RmsNorm(tx, tw, 1e-5f, out);
    b->RopeTable(tp, {}, p, table);
    b->Rope(out, static_cast<int32_t>(H), table, p);
    std::vector<float> got(x.size()), want(x.size());
    b->CopyToHost(*buf, 24576, got.size() * 4, got.data());
    ASSERT_TRUE(b->Synchronize().ok());
    RmsNorm(x.data(), w.data(), T, H * D, 1e-5f, want.data());
    Rope(want.data(), T, static_cast<int32_t>(H), pos, p);
    EXPECT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * 4));
  }
}

TEST(Backend, ErrorsAreStickyUntilSynchronize) {
  CpuBackend b({.num_threads = 1});
  auto buf = *b.Allocate(MemoryKind::kActivations, 1024);
  std::vector<float> one(4, 1.0f), got(4, 0.0f);
  b.InjectFault(absl::InternalError("injected"));
  b.Add(F32(*buf, 1, 4), F32(*buf, 1, 4, 64));  // takes the fault: skipped
  b.CopyToDevice(one.data(), *buf, 0, 16);      // after a failure: skipped
  EXPECT_EQ(b.Synchronize().code(), absl::StatusCode::kInternal);
  b.CopyToHost(*buf, 0, 16, got.data());
  EXPECT_TRUE(b.Synchronize().ok());
  EXPECT_EQ(got[0], 0.0f);  // the skipped copies wrote nothing
  const Tensor table{buf.get(), 0, model::GgmlType::kF32, 2, 4};
  std::vector<int32_t> bad = {5};
  b.CopyToDevice(bad.data(), *buf, 512, 4);
  b.Embedding(table, {buf.get(), 512, model::GgmlType::kI32, 1, 1}, F32(*buf, 1, 4, 768));
  absl::Status st = b.Synchronize();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("token id 5"), std::string_view::npos);
}

TEST(KvStorage, LayersRoundTripAndBadIdsAreRefused) {
  for (kv::KvDtype dtype : {kv::KvDtype::kF32, kv::KvDtype::kBF16}) {
    for (const char* device : {"cpu", "cpu-fence"}) {
      auto b = Make(device);
      const kv::KvLayout layout{3, 2, 16, 4, dtype};
      auto kv = KvStorage::Create(b.get(), layout, 10 * layout.BlockBytes() + 7);
      ASSERT_TRUE(kv.ok());
      EXPECT_EQ((*kv)->num_blocks(), 10);
      EXPECT_EQ(layout.BytesPerToken(), 2 * 3 * 2 * 16 * (dtype == kv::KvDtype::kF32 ? 4 : 2));
      std::vector<uint8_t> in(2 * layout.LayerBytes()), out(in.size());
      std::iota(in.begin(), in.end(), 0);
      const std::vector<int32_t> blocks = {7, 2};
      ASSERT_TRUE((*kv)->WriteLayer(blocks, 1, in.data()).ok());
      ASSERT_TRUE((*kv)->ReadLayer(blocks, 1, out.data()).ok());
      EXPECT_EQ(in, out);
      ASSERT_TRUE((*kv)->ReadLayer({{2}}, 0, out.data()).ok());
      EXPECT_EQ(out[0], 0);  // another layer: untouched (zero-filled)
      const KvStorage::Extent e = (*kv)->BlockExtent(7);
      EXPECT_EQ(e.buffer, &(*kv)->buffer());
      EXPECT_EQ(e.offset, (*kv)->LayerOffset(7, 0));
      EXPECT_EQ(e.bytes, layout.BlockBytes());
      EXPECT_FALSE((*kv)->WriteLayer({{10}}, 0, in.data()).ok());
      EXPECT_FALSE((*kv)->ReadLayer({{0}}, 3, out.data()).ok());
    }
  }
  auto b = Make("cpu");
  EXPECT_EQ(KvStorage::Create(b.get(), {1, 1, 16, 16}, 10).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// Gather packs a layer of any block list into staging exactly as ReadLayer packs it
// into host memory (runs of consecutive ids and single blocks alike); Scatter is its
// inverse; a short staging buffer or a bad id is refused before anything moves.
TEST(KvStorage, GatherAndScatterMatchReadAndWrite) {
  for (const char* device : {"cpu", "cpu-fence"}) {
    auto b = Make(device);
    const kv::KvLayout layout{3, 2, 16, 4, kv::KvDtype::kBF16};
    auto kv = KvStorage::Create(b.get(), layout, 12 * layout.BlockBytes());
    ASSERT_TRUE(kv.ok());
    const int64_t n = layout.LayerBytes();
    std::vector<uint8_t> in(12 * n + 16);  // layer l is written from byte 5l
    for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<uint8_t>(i * 7 + 3);
    std::vector<int32_t> all(12);
    std::iota(all.begin(), all.end(), 0);
    for (int32_t layer = 0; layer < 3; ++layer) {
      ASSERT_TRUE((*kv)->WriteLayer(all, layer, in.data() + layer * 5).ok());
    }
    const std::vector<int32_t> blocks = {7, 8, 9, 2, 4, 5};  // two runs and a single block
    auto staging = b->Allocate(MemoryKind::kStaging, 6 * n + 64);
    ASSERT_TRUE(staging.ok());
    ASSERT_TRUE((*kv)->GatherLayer(blocks, 1, **staging, 64).ok());
    std::vector<uint8_t> gathered(6 * n), expected(6 * n);
    ASSERT_TRUE(b->ReadNow(**staging, 64, 6 * n, gathered.data()).ok());
    ASSERT_TRUE((*kv)->ReadLayer(blocks, 1, expected.data()).ok());
    EXPECT_EQ(gathered, expected);

    const std::vector<int32_t> targets = {0, 1, 11, 3, 10, 6};
    ASSERT_TRUE((*kv)->ScatterLayer(targets, 2, **staging, 64).ok());
    std::vector<uint8_t> scattered(6 * n);
    ASSERT_TRUE((*kv)->ReadLayer(targets, 2, scattered.data()).ok());
    EXPECT_EQ(scattered, expected);
    std::vector<uint8_t> untouched(n), before(n);
    ASSERT_TRUE((*kv)->ReadLayer({{2}}, 2, untouched.data()).ok());  // not a target
    std::memcpy(before.data(), in.data() + 10 + 2 * n, n);
    EXPECT_EQ(untouched, before);

    EXPECT_EQ((*kv)->GatherLayer(blocks, 1, **staging, 65).code(), absl::StatusCode::kOutOfRange);
    EXPECT_EQ((*kv)->ScatterLayer({{12}}, 0, **staging, 0).code(),
              absl::StatusCode::kInvalidArgument);
    EXPECT_EQ((*kv)->GatherLayer(blocks, 3, **staging, 0).code(),
              absl::StatusCode::kInvalidArgument);
  }
}

}  // namespace
}  // namespace tandem::kernels
