#include "common/grammar/mask_cache.h"

#include <utility>

namespace tandem::grammar {

std::shared_ptr<const TokenMask> MaskCache::Find(const std::vector<int32_t>& key) const {
  absl::MutexLock lock(&mu_);
  auto it = masks_.find(key);
  return it == masks_.end() ? nullptr : it->second;
}

void MaskCache::Insert(std::vector<int32_t> key, std::shared_ptr<const TokenMask> mask) {
  absl::MutexLock lock(&mu_);
  if (masks_.size() >= kMaxMasks) masks_.clear();
  masks_.emplace(std::move(key), std::move(mask));
}

size_t MaskCache::size() const {
  absl::MutexLock lock(&mu_);
  return masks_.size();
}

}  // namespace tandem::grammar
