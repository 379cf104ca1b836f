// Test helpers shared by the engine tests.
#ifndef TANDEM_COMMON_ENGINE_ENGINE_TEST_UTIL_H_
#define TANDEM_COMMON_ENGINE_ENGINE_TEST_UTIL_H_

#include <algorithm>
#include <cstdint>
#include <functional>
#include <vector>

#include "common/engine/engine.h"
#include "gtest/gtest.h"

namespace tandem::engine {

// Built with ASan or TSan (scripts/sanitize.sh), where the engine runs 10-30x slower:
// the longest walks take fewer rounds there — the same code paths, for fewer steps.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
inline constexpr bool kSanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
inline constexpr bool kSanitized = true;
#else
inline constexpr bool kSanitized = false;
#endif
#else
inline constexpr bool kSanitized = false;
#endif

// One step's events; an event carrying an error (a failed pass) fails the test.
inline std::vector<TokenEvent> StepOk(Engine& e) {
  std::vector<TokenEvent> events = e.Step();
  for (const TokenEvent& ev : events) EXPECT_TRUE(ev.error.ok()) << ev.error;
  return events;
}

// What a KV transport does between a prefill and a decode engine: every layer of every
// block of `prefilled` (a finished kPrefillOnly sequence on `from`) is read and written
// into the reservation `reserved` on `to` (wrap the call in ASSERT_NO_FATAL_FAILURE).
inline void MoveKv(Engine& from, kv::SeqId prefilled, Engine& to, kv::SeqId reserved) {
  const kv::KvLayout& layout = from.kv_layout();
  std::vector<uint8_t> slice(layout.LayerBytes());
  const auto& src = from.BlockTable(prefilled);
  ASSERT_GE(to.BlockTable(reserved).size(), src.size());
  for (size_t b = 0; b < src.size(); ++b) {
    for (int32_t l = 0; l < layout.n_layers; ++l) {
      ASSERT_TRUE(from.kv_storage().ReadLayer({{src[b]}}, l, slice.data()).ok());
      ASSERT_TRUE(to.WriteReservedKv(reserved, l, static_cast<int32_t>(b), 1, slice).ok());
    }
  }
}

// Teacher-forced greedy agreement of two engines' logits for the same tokens: at each
// position where the greedy choices differ, the top-two gap of `a` (the reference) —
// a divergence is only acceptable at a near-tie of the reference.
struct GreedyAgreement {
  int64_t agree = 0, positions = 0;
  double worst_gap = 0;  // the largest reference top-two gap where they differ

  // Rows [from, to) of a and b, each [rows][vocab].
  void Add(const std::vector<float>& a, const std::vector<float>& b, int64_t vocab, int64_t from,
           int64_t to) {
    for (int64_t pos = from; pos < to; ++pos) {
      const float* ra = a.data() + pos * vocab;
      const float* rb = b.data() + pos * vocab;
      ++positions;
      if (std::max_element(ra, ra + vocab) - ra == std::max_element(rb, rb + vocab) - rb) {
        ++agree;
        continue;
      }
      std::vector<float> row(ra, ra + vocab);
      std::nth_element(row.begin(), row.begin() + 1, row.end(), std::greater<float>());
      worst_gap = std::max<double>(worst_gap, row[0] - row[1]);
    }
  }
};

}  // namespace tandem::engine

#endif  // TANDEM_COMMON_ENGINE_ENGINE_TEST_UTIL_H_
