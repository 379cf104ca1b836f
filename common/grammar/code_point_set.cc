#include "common/grammar/code_point_set.h"

#include <algorithm>
#include <cstdio>

namespace tandem::grammar {

void CodePointSet::Add(std::vector<Range> more) {
  std::vector<Range> all = ranges_;
  for (auto [lo, hi] : more) {
    hi = std::min(hi, kMax);
    if (lo > hi) continue;
    // Surrogates are not scalar values.
    if (lo < 0xD800 && hi > 0xDFFF) {
      all.push_back({lo, 0xD7FF});
      all.push_back({0xE000, hi});
    } else if (hi < 0xD800 || lo > 0xDFFF) {
      all.push_back({lo, hi});
    } else if (lo < 0xD800) {
      all.push_back({lo, 0xD7FF});
    } else if (hi > 0xDFFF) {
      all.push_back({0xE000, hi});
    }
  }
  std::sort(all.begin(), all.end());
  ranges_.clear();
  for (const Range& r : all) {
    if (!ranges_.empty() && r.first <= ranges_.back().second + 1) {
      ranges_.back().second = std::max(ranges_.back().second, r.second);
    } else {
      ranges_.push_back(r);
    }
  }
}

bool CodePointSet::Contains(uint32_t cp) const {
  auto it = std::upper_bound(ranges_.begin(), ranges_.end(), Range{cp, kMax + 1});
  return it != ranges_.begin() && std::prev(it)->second >= cp;
}

CodePointSet CodePointSet::Complement() const {
  std::vector<Range> out;
  uint32_t next = 0;
  for (auto [lo, hi] : ranges_) {
    if (lo > next) out.push_back({next, lo - 1});
    next = hi + 1;
  }
  if (next <= kMax) out.push_back({next, kMax});
  return CodePointSet(std::move(out));
}

CodePointSet CodePointSet::Minus(const CodePointSet& other) const {
  // A \ B = ¬(¬A ∪ B)
  CodePointSet c = Complement();
  c.Add(other);
  return c.Complement();
}

std::string CodePointSet::GbnfClass() const {
  std::string out = "[";
  char buf[32];
  for (auto [lo, hi] : ranges_) {
    std::snprintf(buf, sizeof(buf), "\\U%08X", lo);
    out += buf;
    if (hi != lo) {
      std::snprintf(buf, sizeof(buf), "-\\U%08X", hi);
      out += buf;
    }
  }
  return out + "]";
}

}  // namespace tandem::grammar
