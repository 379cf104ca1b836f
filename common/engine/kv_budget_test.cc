// --gpu-memory-utilization is this process's share of the device (KvBudgetBytes): a
// worker sharing its GPU with another gets its own fraction, not what the other left;
// asking for more than is free is refused with the figures. Then the same through
// Engine::Create on a pretend device (a CPU backend reporting device memory with
// another process on it).
#include "common/engine/kv_budget.h"

#include <atomic>

#include "common/engine/engine.h"
#include "common/engine/synthetic_model.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"

namespace tandem::engine {
namespace {

constexpr int64_t kGiB = int64_t{1} << 30;

TEST(KvBudget, ASecondWorkerOnTheGpuGetsItsOwnFraction) {
  // 80 GiB; the prefill worker holds 36 GiB; the decode worker has loaded 2 GiB of
  // weights and will need 1 GiB of workspace, at 0.45.
  const kernels::DeviceMemory m{80 * kGiB, 80 * kGiB - 36 * kGiB - 2 * kGiB, 2 * kGiB};
  absl::StatusOr<int64_t> b = KvBudgetBytes(m, 0.45, kGiB);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(*b, static_cast<int64_t>(0.45 * 80 * kGiB) - 3 * kGiB);
  // Alone on the device, the same.
  EXPECT_EQ(*KvBudgetBytes({80 * kGiB, 78 * kGiB, 2 * kGiB}, 0.45, kGiB), *b);
}

TEST(KvBudget, MoreThanIsFreeIsRefusedWithTheFigures) {
  // Another process holds 50 GiB: 0.45 of 80 does not fit in what is left.
  const kernels::DeviceMemory m{80 * kGiB, 28 * kGiB, 2 * kGiB};
  absl::StatusOr<int64_t> b = KvBudgetBytes(m, 0.45, kGiB);
  EXPECT_EQ(b.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(b.status().message().find("only 28672 MiB is free"), std::string_view::npos)
      << b.status();
  EXPECT_NE(b.status().message().find("51200 MiB is held by other processes"),
            std::string_view::npos)
      << b.status();
  EXPECT_TRUE(KvBudgetBytes(m, 0.3, kGiB).ok());
}

TEST(KvBudget, AFractionTheWeightsAlreadyFillIsRefused) {
  const kernels::DeviceMemory m{80 * kGiB, 60 * kGiB, 20 * kGiB};
  EXPECT_EQ(KvBudgetBytes(m, 0.25, kGiB).status().code(), absl::StatusCode::kResourceExhausted);
  for (double bad : {0.0, -0.5, 1.5, std::nan("")}) {
    EXPECT_EQ(KvBudgetBytes(m, bad, 0).status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
}

// A CPU backend posing as a 1 GiB device on which another process holds 600 MiB; its
// own bytes are what it has allocated.
class PretendGpu : public kernels::CpuBackend {
 public:
  PretendGpu() : CpuBackend(kernels::CpuBackendOptions{.num_threads = 1}) {}
  absl::StatusOr<kernels::DeviceMemory> Memory() const override {
    const int64_t total = kGiB, others = 600 << 20;
    return kernels::DeviceMemory{total, total - others - own_, own_};
  }
  absl::StatusOr<std::unique_ptr<kernels::Buffer>> Allocate(kernels::MemoryKind kind,
                                                            int64_t bytes) override {
    own_ += bytes;
    return CpuBackend::Allocate(kind, bytes);
  }

 private:
  std::atomic<int64_t> own_ = 0;
};

TEST(KvBudget, TheEngineSizesItsPoolFromItsOwnShareOfASharedDevice) {
  auto w = *ModelWeights::Random(*SyntheticConfig("tiny"), model::GgmlType::kF32, 3);
  EngineOptions o;
  o.num_threads = 1;
  o.gpu_memory_utilization = 0.3;  // 307 MiB of the 1 GiB; 424 MiB are free
  o.make_backend = []() -> absl::StatusOr<std::unique_ptr<kernels::Backend>> {
    return std::unique_ptr<kernels::Backend>(new PretendGpu());
  };
  auto e = Engine::Create(*w, o);
  ASSERT_TRUE(e.ok()) << e.status();
  const int64_t pool = (*e)->kv_storage().bytes();
  EXPECT_GT(pool, int64_t{200} << 20);
  EXPECT_LE(pool, static_cast<int64_t>(0.3 * kGiB));
  o.gpu_memory_utilization = 0.5;  // 512 MiB: more than the 424 MiB free
  EXPECT_EQ(Engine::Create(*w, o).status().code(), absl::StatusCode::kResourceExhausted);
}

}  // namespace
}  // namespace tandem::engine
