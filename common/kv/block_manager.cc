#include "common/kv/block_manager.h"

#include "common/kv/block_hash.h"
#include "common/util/check.h"
#include "common/util/strings.h"

namespace tandem::kv {

BlockManager::BlockManager(int32_t num_blocks, int32_t block_size, bool prefix_caching)
    : block_size_(block_size),
      prefix_caching_(prefix_caching),
      ref_count_(num_blocks, 0),
      block_hash_(num_blocks, 0),
      lru_pos_(num_blocks),
      in_lru_(num_blocks, false) {
  TANDEM_CHECK(num_blocks >= 0 && block_size > 0);
  free_.reserve(num_blocks);
  // Stack order: block 0 is handed out first.
  for (int32_t b = num_blocks - 1; b >= 0; --b) free_.push_back(b);
}

uint64_t BlockManager::ChainHash(uint64_t parent, const int32_t* block_tokens) const {
  return ChainBlockHash(parent, block_tokens, block_size_);
}

void BlockManager::Unlru(int32_t b) {
  lru_.erase(lru_pos_[b]);
  in_lru_[b] = false;
}

int32_t BlockManager::TakeFree() {
  int32_t b;
  if (!free_.empty()) {
    b = free_.back();
    free_.pop_back();
  } else {
    // Evict the least recently used cached block.
    TANDEM_CHECK(!lru_.empty());
    b = lru_.front();
    Unlru(b);
    cached_.erase(block_hash_[b]);
    block_hash_[b] = 0;
    ++evicted_;
  }
  TANDEM_CHECK(ref_count_[b] == 0);
  ref_count_[b] = 1;
  return b;
}

PrefixMatch BlockManager::MatchPrefix(std::span<const int32_t> tokens, uint64_t salt) const {
  PrefixMatch m;
  if (!prefix_caching_ || tokens.empty()) return m;
  const size_t full = (tokens.size() - 1) / block_size_;  // the last token is never cached
  uint64_t parent = salt;
  for (size_t i = 0; i < full; ++i) {
    const uint64_t h = ChainHash(parent, tokens.data() + i * block_size_);
    auto it = cached_.find(h);
    if (it == cached_.end()) break;
    m.blocks.push_back(it->second);
    m.hashes.push_back(h);
    m.in_lru += in_lru_[it->second] ? 1 : 0;
    parent = h;
  }
  return m;
}

bool BlockManager::CanAllocate(int64_t num_tokens, const PrefixMatch& prefix) const {
  if (num_tokens < 0) return false;
  const int32_t fresh = BlocksFor(num_tokens) - static_cast<int32_t>(prefix.blocks.size());
  // Reused blocks that sit in the LRU stop being available once referenced.
  return fresh <= num_free_blocks() - prefix.in_lru;
}

absl::Status BlockManager::Allocate(SeqId seq, int64_t num_tokens, const PrefixMatch& prefix,
                                    uint64_t salt) {
  if (tables_.contains(seq)) {
    return absl::AlreadyExistsError(StrCat("sequence ", seq, " already has blocks"));
  }
  if (static_cast<int32_t>(prefix.blocks.size()) > BlocksFor(num_tokens)) {
    return absl::InvalidArgumentError("prefix longer than the sequence");
  }
  if (!CanAllocate(num_tokens, prefix)) {
    return absl::ResourceExhaustedError(
        StrCat("need ", BlocksFor(num_tokens), " KV blocks, ", num_free_blocks(), " free"));
  }
  Table& t = tables_[seq];
  t.salt = salt;
  for (size_t i = 0; i < prefix.blocks.size(); ++i) {
    const int32_t b = prefix.blocks[i];
    TANDEM_CHECK(block_hash_[b] == prefix.hashes[i]);
    if (in_lru_[b]) Unlru(b);
    ++ref_count_[b];
    t.blocks.push_back(b);
    t.hashes.push_back(prefix.hashes[i]);
  }
  if (prefix_caching_) {
    prefix_query_tokens_ += num_tokens;
    prefix_hit_tokens_ += prefix.tokens(block_size_);
  }
  while (static_cast<int32_t>(t.blocks.size()) < BlocksFor(num_tokens))
    t.blocks.push_back(TakeFree());
  return absl::OkStatus();
}

bool BlockManager::CanAppend(SeqId seq, int64_t num_tokens) const {
  auto it = tables_.find(seq);
  if (it == tables_.end()) return false;
  int32_t extra = BlocksFor(num_tokens) - static_cast<int32_t>(it->second.blocks.size());
  return extra <= num_free_blocks();
}

absl::Status BlockManager::Append(SeqId seq, int64_t num_tokens) {
  auto it = tables_.find(seq);
  if (it == tables_.end()) return absl::NotFoundError(StrCat("unknown sequence ", seq));
  if (!CanAppend(seq, num_tokens)) {
    return absl::ResourceExhaustedError(StrCat("no free KV block to grow sequence ", seq));
  }
  while (static_cast<int32_t>(it->second.blocks.size()) < BlocksFor(num_tokens)) {
    it->second.blocks.push_back(TakeFree());
  }
  return absl::OkStatus();
}

void BlockManager::HashFullBlocks(SeqId seq, std::span<const int32_t> tokens) {
  auto it = tables_.find(seq);
  if (it == tables_.end()) return;
  Table& t = it->second;
  const size_t full = std::min(tokens.size() / block_size_, t.blocks.size());
  while (t.hashes.size() < full) {
    const size_t i = t.hashes.size();
    const uint64_t parent = i == 0 ? t.salt : t.hashes[i - 1];
    const uint64_t h = ChainHash(parent, tokens.data() + i * block_size_);
    t.hashes.push_back(h);
    const int32_t b = t.blocks[i];
    if (prefix_caching_ && block_hash_[b] == 0 && !cached_.contains(h)) {
      cached_[h] = b;
      block_hash_[b] = h;
    }
  }
}

void BlockManager::Free(SeqId seq) {
  auto it = tables_.find(seq);
  if (it == tables_.end()) return;
  const std::vector<int32_t>& blocks = it->second.blocks;
  // Last blocks first: they are the least likely to be shared, so the LRU evicts them
  // before the prefix they extend.
  for (auto b_it = blocks.rbegin(); b_it != blocks.rend(); ++b_it) {
    const int32_t b = *b_it;
    TANDEM_CHECK(ref_count_[b] > 0);
    if (--ref_count_[b] > 0) continue;
    if (block_hash_[b] != 0) {
      lru_pos_[b] = lru_.insert(lru_.end(), b);
      in_lru_[b] = true;
    } else {
      free_.push_back(b);
    }
  }
  tables_.erase(it);
}

bool BlockManager::CanFork(SeqId parent, int64_t num_tokens) const {
  auto it = tables_.find(parent);
  if (it == tables_.end() || num_tokens < 1) return false;
  if (BlocksFor(num_tokens) > static_cast<int32_t>(it->second.blocks.size())) return false;
  return num_tokens % block_size_ == 0 || num_free_blocks() >= 1;
}

absl::Status BlockManager::Fork(SeqId parent, SeqId child, int64_t num_tokens, int32_t* copy_from,
                                int32_t* copy_to) {
  if (tables_.contains(child)) {
    return absl::AlreadyExistsError(StrCat("sequence ", child, " already has blocks"));
  }
  if (!CanFork(parent, num_tokens)) {
    return absl::ResourceExhaustedError(StrCat("cannot fork sequence ", parent));
  }
  const Table p = tables_.at(parent);  // copy: the insertion below may rehash
  Table& c = tables_[child];
  c.salt = p.salt;
  const int32_t full = static_cast<int32_t>(num_tokens / block_size_);
  for (int32_t i = 0; i < full; ++i) {
    ++ref_count_[p.blocks[i]];
    c.blocks.push_back(p.blocks[i]);
    if (i < static_cast<int32_t>(p.hashes.size())) c.hashes.push_back(p.hashes[i]);
  }
  *copy_from = -1;
  *copy_to = -1;
  if (num_tokens % block_size_ != 0) {
    *copy_from = p.blocks[full];
    *copy_to = TakeFree();
    c.blocks.push_back(*copy_to);
  }
  return absl::OkStatus();
}

void BlockManager::ClearCache() {
  while (!lru_.empty()) {
    const int32_t b = lru_.front();
    Unlru(b);
    free_.push_back(b);
  }
  // Referenced blocks keep their content but are no longer findable.
  for (int32_t b = 0; b < num_blocks(); ++b) block_hash_[b] = 0;
  cached_.clear();
}

bool BlockManager::CheckInvariants() const {
  std::vector<int32_t> refs(num_blocks(), 0);
  for (const auto& [seq, t] : tables_) {
    for (int32_t b : t.blocks) ++refs[b];
  }
  std::vector<int32_t> seen(num_blocks(), 0);
  for (int32_t b : free_) {
    if (refs[b] != 0 || block_hash_[b] != 0 || in_lru_[b] || seen[b]++) return false;
  }
  for (int32_t b : lru_) {
    if (refs[b] != 0 || block_hash_[b] == 0 || !in_lru_[b] || seen[b]++) return false;
  }
  for (int32_t b = 0; b < num_blocks(); ++b) {
    if (refs[b] != ref_count_[b]) return false;
    if (refs[b] == 0 && !seen[b]) return false;  // leaked: neither used, free nor cached
    if (refs[b] > 0 && (seen[b] || in_lru_[b])) return false;
    if (block_hash_[b] != 0) {
      auto it = cached_.find(block_hash_[b]);
      if (it == cached_.end() || it->second != b) return false;
    }
  }
  for (const auto& [h, b] : cached_) {
    if (block_hash_[b] != h) return false;
  }
  return true;
}

const std::vector<int32_t>& BlockManager::BlockTable(SeqId seq) const {
  auto it = tables_.find(seq);
  TANDEM_CHECK(it != tables_.end());
  return it->second.blocks;
}

uint64_t BlockManager::BlockHash(SeqId seq, size_t i) const {
  auto it = tables_.find(seq);
  if (it == tables_.end() || i >= it->second.hashes.size()) return 0;
  return it->second.hashes[i];
}

BlockManagerStats BlockManager::Stats() const {
  BlockManagerStats s;
  s.num_blocks = num_blocks();
  s.block_size = block_size_;
  s.free_blocks = static_cast<int32_t>(free_.size());
  s.cached_blocks = static_cast<int32_t>(lru_.size());
  s.used_blocks = s.num_blocks - s.free_blocks - s.cached_blocks;
  s.num_sequences = static_cast<int32_t>(tables_.size());
  s.prefix_query_tokens = prefix_query_tokens_;
  s.prefix_hit_tokens = prefix_hit_tokens_;
  s.evicted_blocks = evicted_;
  return s;
}

}  // namespace tandem::kv
