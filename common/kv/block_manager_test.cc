#include "common/kv/block_manager.h"

#include <xxhash.h>

#include "gtest/gtest.h"

namespace tandem::kv {
namespace {

TEST(BlockManager, AllocatesAppendsAndFreesBackToBaseline) {
  BlockManager bm(10, 4);
  EXPECT_EQ(bm.BlocksFor(0), 0);
  EXPECT_EQ(bm.BlocksFor(9), 3);
  ASSERT_TRUE(bm.Allocate(1, 9).ok());
  EXPECT_EQ(bm.BlockTable(1).size(), 3u);
  EXPECT_EQ(bm.num_free_blocks(), 7);
  ASSERT_TRUE(bm.Append(1, 12).ok());  // still 3 blocks
  EXPECT_EQ(bm.num_free_blocks(), 7);
  ASSERT_TRUE(bm.Append(1, 13).ok());
  EXPECT_EQ(bm.BlockTable(1).size(), 4u);
  ASSERT_TRUE(bm.Allocate(2, 1).ok());
  EXPECT_EQ(bm.Stats().used_blocks, 5);
  EXPECT_EQ(bm.Stats().num_sequences, 2);
  bm.Free(1);
  bm.Free(2);
  bm.Free(3);  // unknown: ignored
  EXPECT_EQ(bm.num_free_blocks(), 10);
  EXPECT_EQ(bm.Stats().num_sequences, 0);
}

TEST(BlockManager, FailedCallsChangeNothing) {
  BlockManager bm(3, 16);
  EXPECT_FALSE(bm.CanAllocate(49));
  EXPECT_EQ(bm.Allocate(1, 49).code(), absl::StatusCode::kResourceExhausted);
  EXPECT_FALSE(bm.Has(1));
  EXPECT_EQ(bm.num_free_blocks(), 3);
  ASSERT_TRUE(bm.Allocate(1, 40).ok());
  EXPECT_EQ(bm.Allocate(1, 1).code(), absl::StatusCode::kAlreadyExists);
  EXPECT_FALSE(bm.CanAppend(1, 49));
  EXPECT_EQ(bm.Append(1, 49).code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(bm.BlockTable(1).size(), 3u);
  EXPECT_EQ(bm.Append(7, 1).code(), absl::StatusCode::kNotFound);
}

TEST(BlockManager, HashesFullBlocksChainedOnTheParent) {
  BlockManager bm(8, 2);
  std::vector<int32_t> a = {1, 2, 3, 4, 5};
  std::vector<int32_t> b = {9, 9, 3, 4};
  ASSERT_TRUE(bm.Allocate(1, a.size()).ok());
  ASSERT_TRUE(bm.Allocate(2, b.size()).ok());
  bm.HashFullBlocks(1, a);
  bm.HashFullBlocks(2, b);
  const uint64_t h0 = XXH3_64bits_withSeed(a.data(), 8, 0);
  EXPECT_EQ(bm.BlockHash(1, 0), h0);
  EXPECT_EQ(bm.BlockHash(1, 1), XXH3_64bits_withSeed(a.data() + 2, 8, h0));
  EXPECT_EQ(bm.BlockHash(1, 2), 0u);  // partial block: no hash
  // Same tokens in block 1 but a different prefix: a different hash.
  EXPECT_NE(bm.BlockHash(2, 1), bm.BlockHash(1, 1));
}

}  // namespace
}  // namespace tandem::kv
