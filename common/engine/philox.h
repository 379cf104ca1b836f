// Philox4x32-10: a counter-based random generator (Salmon et al., SC'11).
//
// The output is a pure function of (key, counter), so a draw needs no state: the
// sampler keys it by the request's seed and counts by token position, which makes a
// seeded request reproducible whatever batch, process or machine it runs in.
#ifndef TANDEM_COMMON_ENGINE_PHILOX_H_
#define TANDEM_COMMON_ENGINE_PHILOX_H_

#include <array>
#include <cstdint>

namespace tandem::engine {

inline std::array<uint32_t, 4> Philox4x32(std::array<uint32_t, 4> ctr,
                                          std::array<uint32_t, 2> key) {
  constexpr uint32_t kM0 = 0xD2511F53, kM1 = 0xCD9E8D57;
  constexpr uint32_t kW0 = 0x9E3779B9, kW1 = 0xBB67AE85;
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = static_cast<uint64_t>(kM0) * ctr[0];
    const uint64_t p1 = static_cast<uint64_t>(kM1) * ctr[2];
    ctr = {static_cast<uint32_t>(p1 >> 32) ^ ctr[1] ^ key[0], static_cast<uint32_t>(p1),
           static_cast<uint32_t>(p0 >> 32) ^ ctr[3] ^ key[1], static_cast<uint32_t>(p0)};
    key[0] += kW0;
    key[1] += kW1;
  }
  return ctr;
}

// A uniform double in [0, 1) from (seed, position, stream): 53 random bits.
inline double PhiloxUniform(uint64_t seed, uint64_t position, uint32_t stream = 0) {
  const auto r = Philox4x32(
      {static_cast<uint32_t>(position), static_cast<uint32_t>(position >> 32), stream, 0},
      {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)});
  const uint64_t bits = (static_cast<uint64_t>(r[0]) << 21) ^ (static_cast<uint64_t>(r[1]) >> 11);
  return static_cast<double>(bits & ((uint64_t{1} << 53) - 1)) * 0x1.0p-53;
}

}  // namespace tandem::engine

#endif  // TANDEM_COMMON_ENGINE_PHILOX_H_
