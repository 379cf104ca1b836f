#include "common/util/huge_pages.h"

#include <unistd.h>

#include <utility>

#include "gtest/gtest.h"

namespace tandem {
namespace {

// A region starts at a huge-page boundary, holds zeroed bytes that survive a move (the
// moved-from region is empty), and faults on a write once read-only.
TEST(HugePageRegion, IsAlignedZeroedMovableAndMadeReadOnly) {
  const size_t bytes = (size_t{3} << 20) + 777;
  auto r = HugePageRegion::Allocate(bytes);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_NE(r->data(), nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(r->data()) % HugePageRegion::kHugePage, 0u);
  EXPECT_EQ(r->size(), bytes);
  EXPECT_EQ(r->data()[0], 0);
  EXPECT_EQ(r->data()[bytes - 1], 0);
  r->data()[bytes - 1] = 42;
  HugePageRegion moved = std::move(*r);
  EXPECT_EQ(r->data(), nullptr);
  EXPECT_EQ(r->size(), 0u);
  EXPECT_EQ(moved.data()[bytes - 1], 42);
  ASSERT_TRUE(moved.MakeReadOnly().ok());
  EXPECT_EQ(moved.data()[bytes - 1], 42);
  EXPECT_DEATH(moved.data()[5] = 1, "");
  auto empty = HugePageRegion::Allocate(0);
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(empty->data(), nullptr);
  EXPECT_TRUE(empty->MakeReadOnly().ok());
}

// MemAvailable is read as bytes: positive and within the machine's physical memory.
TEST(HugePageRegion, AvailableMemoryIsWithinPhysicalMemory) {
  const int64_t physical = int64_t{sysconf(_SC_PHYS_PAGES)} * sysconf(_SC_PAGESIZE);
  const int64_t available = AvailableMemoryBytes();
  EXPECT_GT(available, 0);
  EXPECT_LE(available, physical);
}

}  // namespace
}  // namespace tandem
