#include "router/prefix_index.h"

namespace tandem::router {

int32_t PrefixIndex::CachedPrefix(std::span<const uint64_t> hashes) const {
  int32_t n = 0;
  while (n < static_cast<int32_t>(hashes.size()) && pos_.contains(hashes[n])) ++n;
  return n;
}

int32_t PrefixIndex::FuturePrefix(std::span<const uint64_t> hashes) const {
  int32_t n = 0;
  while (n < static_cast<int32_t>(hashes.size()) &&
         (pos_.contains(hashes[n]) || in_flight_.contains(hashes[n]))) {
    ++n;
  }
  return n;
}

void PrefixIndex::AddInFlight(std::span<const uint64_t> hashes) {
  for (uint64_t h : hashes) ++in_flight_[h];
}

void PrefixIndex::EndInFlight(std::span<const uint64_t> hashes, bool cached) {
  for (uint64_t h : hashes) {
    auto it = in_flight_.find(h);
    if (it != in_flight_.end() && --it->second == 0) in_flight_.erase(it);
    if (cached) Insert(h);
  }
}

void PrefixIndex::Insert(uint64_t h) {
  auto it = pos_.find(h);
  if (it != pos_.end()) lru_.erase(it->second);
  pos_[h] = lru_.insert(lru_.end(), h);
  while (lru_.size() > capacity_) {
    pos_.erase(lru_.front());
    lru_.pop_front();
  }
}

}  // namespace tandem::router
