#include "common/kv/block_manager.h"

#include <xxhash.h>

#include "common/util/check.h"
#include "common/util/strings.h"

namespace tandem::kv {

BlockManager::BlockManager(int32_t num_blocks, int32_t block_size)
    : block_size_(block_size), ref_count_(num_blocks, 0) {
  TANDEM_CHECK(num_blocks >= 0 && block_size > 0);
  free_.reserve(num_blocks);
  // Stack order: block 0 is handed out first.
  for (int32_t b = num_blocks - 1; b >= 0; --b) free_.push_back(b);
}

int32_t BlockManager::TakeFree() {
  int32_t b = free_.back();
  free_.pop_back();
  TANDEM_CHECK(ref_count_[b] == 0);
  ref_count_[b] = 1;
  return b;
}

bool BlockManager::CanAllocate(int64_t num_tokens) const {
  return num_tokens >= 0 && BlocksFor(num_tokens) <= num_free_blocks();
}

absl::Status BlockManager::Allocate(SeqId seq, int64_t num_tokens) {
  if (tables_.contains(seq)) {
    return absl::AlreadyExistsError(StrCat("sequence ", seq, " already has blocks"));
  }
  if (!CanAllocate(num_tokens)) {
    return absl::ResourceExhaustedError(
        StrCat("need ", BlocksFor(num_tokens), " KV blocks, ", num_free_blocks(), " free"));
  }
  Table& t = tables_[seq];
  for (int32_t i = 0; i < BlocksFor(num_tokens); ++i) t.blocks.push_back(TakeFree());
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
    const uint64_t parent = i == 0 ? 0 : t.hashes[i - 1];
    t.hashes.push_back(XXH3_64bits_withSeed(tokens.data() + i * block_size_,
                                            block_size_ * sizeof(int32_t), parent));
  }
}

void BlockManager::Free(SeqId seq) {
  auto it = tables_.find(seq);
  if (it == tables_.end()) return;
  for (int32_t b : it->second.blocks) {
    TANDEM_CHECK(ref_count_[b] > 0);
    if (--ref_count_[b] == 0) free_.push_back(b);
  }
  tables_.erase(it);
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
  s.free_blocks = num_free_blocks();
  s.used_blocks = s.num_blocks - s.free_blocks;
  s.num_sequences = static_cast<int32_t>(tables_.size());
  return s;
}

}  // namespace tandem::kv
