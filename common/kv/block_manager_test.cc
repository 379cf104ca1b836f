#include "common/kv/block_manager.h"

#include <xxhash.h>

#include <map>
#include <random>
#include <set>

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

TEST(PrefixCache, ReusesTheLongestCachedPrefixAndLeavesTheLastTokenUncached) {
  BlockManager bm(16, 4, /*prefix_caching=*/true);
  const std::vector<int32_t> a = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};  // 2 full blocks + 2
  ASSERT_TRUE(bm.Allocate(1, a.size()).ok());
  bm.HashFullBlocks(1, a);
  bm.Free(1);
  EXPECT_EQ(bm.Stats().cached_blocks, 2);
  EXPECT_EQ(bm.Stats().free_blocks, 14);
  // Same first block, different second block: one block reused.
  std::vector<int32_t> b = {1, 2, 3, 4, 5, 6, 7, 0, 11};
  PrefixMatch m = bm.MatchPrefix(b, 0);
  EXPECT_EQ(m.tokens(4), 4);
  EXPECT_EQ(m.in_lru, 1);
  // Exactly the cached 8 tokens: only the first block, so the last token is computed.
  EXPECT_EQ(bm.MatchPrefix(std::span(a).first(8), 0).tokens(4), 4);
  EXPECT_EQ(bm.MatchPrefix(std::span(a).first(9), 0).tokens(4), 8);
  // Another salt sees nothing.
  EXPECT_EQ(bm.MatchPrefix(a, 42).tokens(4), 0);
  ASSERT_TRUE(bm.Allocate(2, b.size(), m).ok());
  EXPECT_EQ(bm.BlockTable(2)[0], m.blocks[0]);
  EXPECT_EQ(bm.Stats().cached_blocks, 1);
  EXPECT_EQ(bm.Stats().prefix_hit_tokens, 4);
  EXPECT_TRUE(bm.CheckInvariants());
  bm.Free(2);
  bm.ClearCache();
  EXPECT_EQ(bm.Stats().free_blocks, 16);
  EXPECT_EQ(bm.MatchPrefix(a, 0).tokens(4), 0);
  EXPECT_TRUE(bm.CheckInvariants());
}

TEST(PrefixCache, EvictsLeastRecentlyUsedOnlyUnderPressureNeverReferencedBlocks) {
  BlockManager bm(4, 2, /*prefix_caching=*/true);
  const std::vector<int32_t> a = {1, 2, 3, 4, 5};
  ASSERT_TRUE(bm.Allocate(1, a.size()).ok());  // 3 blocks
  bm.HashFullBlocks(1, a);
  bm.Free(1);                           // 2 cached, 2 free
  ASSERT_TRUE(bm.Allocate(2, 4).ok());  // takes the 2 free ones first
  EXPECT_EQ(bm.Stats().evicted_blocks, 0);
  EXPECT_EQ(bm.MatchPrefix(a, 0).tokens(2), 4);
  // Sequence 3 shares the first cached block; the next allocation must evict the
  // other (unreferenced) cached block, never the shared one.
  PrefixMatch m = bm.MatchPrefix(std::vector<int32_t>{1, 2, 9}, 0);
  ASSERT_EQ(m.blocks.size(), 1u);
  ASSERT_TRUE(bm.Allocate(3, 3, m).ok());
  EXPECT_EQ(bm.Stats().evicted_blocks, 1);
  EXPECT_EQ(bm.MatchPrefix(a, 0).tokens(2), 2);
  EXPECT_FALSE(bm.CanAllocate(2));
  EXPECT_TRUE(bm.CheckInvariants());
}

// Long random sequences of allocate (with and without a cached prefix) / append /
// fork / hash / free / clear against a simple model of who holds which block; the internal
// invariants hold after every step, and reused blocks always hold the tokens a
// sequence expects (tracked per block by the model).
TEST(PrefixCache, RandomOperationsAgreeWithASimpleModel) {
  for (bool caching : {false, true}) {
    for (int32_t block_size : {1, 3, 4}) {
      SCOPED_TRACE(::testing::Message() << "caching " << caching << " block " << block_size);
      std::mt19937 rng(block_size * 7 + caching);
      BlockManager bm(24, block_size, caching);
      std::map<SeqId, std::vector<int32_t>> tokens;     // model: each live sequence's tokens
      std::map<int32_t, std::vector<int32_t>> content;  // model: tokens written in each block
      SeqId next = 1;
      for (int step = 0; step < 4000; ++step) {
        const int op = std::uniform_int_distribution<int>(0, 9)(rng);
        if (op < 4) {  // a new sequence: tokens from a tiny alphabet so prefixes repeat
          std::vector<int32_t> t(std::uniform_int_distribution<int>(1, 12)(rng));
          for (auto& x : t) x = std::uniform_int_distribution<int>(0, 1)(rng);
          const uint64_t salt = std::uniform_int_distribution<int>(0, 3)(rng) == 0 ? 7 : 0;
          PrefixMatch m = bm.MatchPrefix(t, salt);
          const bool can = bm.CanAllocate(t.size(), m);
          const absl::Status st = bm.Allocate(next, t.size(), m, salt);
          ASSERT_EQ(st.ok(), can);
          if (st.ok()) {
            const auto& table = bm.BlockTable(next);
            // Reused blocks hold exactly this sequence's tokens.
            for (size_t i = 0; i < m.blocks.size(); ++i) {
              ASSERT_EQ(content[table[i]], std::vector<int32_t>(t.begin() + i * block_size,
                                                                t.begin() + (i + 1) * block_size));
            }
            // Newly written tokens (the uncached part).
            for (size_t i = m.blocks.size(); i < table.size(); ++i) {
              const size_t b = i * block_size, e = std::min(t.size(), b + block_size);
              content[table[i]] = std::vector<int32_t>(t.begin() + b, t.begin() + e);
            }
            bm.HashFullBlocks(next, t);
            tokens[next] = t;
          }
          ++next;
        } else if (op < 6 && !tokens.empty()) {  // append a few tokens to one
          auto it = std::next(tokens.begin(),
                              std::uniform_int_distribution<size_t>(0, tokens.size() - 1)(rng));
          std::vector<int32_t> t = it->second;
          const size_t old = t.size();
          for (int k = std::uniform_int_distribution<int>(1, 5)(rng); k > 0; --k)
            t.push_back(rng() % 2);
          if (!bm.CanAppend(it->first, t.size())) {
            ASSERT_FALSE(bm.Append(it->first, t.size()).ok());
            continue;
          }
          ASSERT_TRUE(bm.Append(it->first, t.size()).ok());
          const auto& table = bm.BlockTable(it->first);
          for (size_t p = old; p < t.size(); ++p) {
            auto& c = content[table[p / block_size]];
            if (p % block_size == 0) c.clear();
            c.push_back(t[p]);
          }
          bm.HashFullBlocks(it->first, t);
          it->second = t;
        } else if (op == 6 && !tokens.empty()) {  // fork one (all or part of its tokens)
          auto it = std::next(tokens.begin(),
                              std::uniform_int_distribution<size_t>(0, tokens.size() - 1)(rng));
          const int64_t n = std::uniform_int_distribution<int64_t>(1, it->second.size())(rng);
          int32_t from = -1, to = -1;
          const bool can = bm.CanFork(it->first, n);
          ASSERT_EQ(bm.Fork(it->first, next, n, &from, &to).ok(), can);
          if (can) {
            if (from >= 0) content[to] = content[from];  // the caller copies the partial block
            // The child's content is the parent's first n tokens.
            if (n % block_size != 0) content[to].resize(n % block_size);
            tokens[next] = std::vector<int32_t>(it->second.begin(), it->second.begin() + n);
            const auto& table = bm.BlockTable(next);
            ASSERT_EQ(static_cast<int64_t>(table.size()), bm.BlocksFor(n));
            for (size_t i = 0; i + 1 < table.size(); ++i)
              ASSERT_EQ(table[i], bm.BlockTable(it->first)[i]);
          }
          ++next;
        } else if (op < 9 && !tokens.empty()) {  // free one
          auto it = std::next(tokens.begin(),
                              std::uniform_int_distribution<size_t>(0, tokens.size() - 1)(rng));
          bm.Free(it->first);
          tokens.erase(it);
        } else if (op == 9 && rng() % 20 == 0) {
          bm.ClearCache();
        }
        ASSERT_TRUE(bm.CheckInvariants()) << "step " << step;
        int32_t referenced = 0;
        std::set<int32_t> distinct;
        for (const auto& [id, t] : tokens) {
          for (int32_t b : bm.BlockTable(id)) distinct.insert(b);
        }
        referenced = static_cast<int32_t>(distinct.size());
        const BlockManagerStats s = bm.Stats();
        ASSERT_EQ(s.used_blocks, referenced);
        ASSERT_EQ(s.free_blocks + s.cached_blocks + s.used_blocks, 24);
        if (!caching) {
          ASSERT_EQ(s.cached_blocks, 0);
        }
      }
      if (caching) {
        EXPECT_GT(bm.Stats().prefix_hit_tokens, 100) << "the test meant to reuse prefixes";
        EXPECT_GT(bm.Stats().evicted_blocks, 10) << "the test meant to evict";
      }
      for (const auto& [id, t] : tokens) bm.Free(id);
      bm.ClearCache();
      EXPECT_EQ(bm.Stats().free_blocks, 24);
    }
  }
}

}  // namespace
}  // namespace tandem::kv
