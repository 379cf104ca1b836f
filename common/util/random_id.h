// A random, non-zero 64-bit value from the OS's entropy source, for identities that
// must differ across processes (a decode worker's epoch, a KV sender's id) and seeds.
#ifndef TANDEM_COMMON_UTIL_RANDOM_ID_H_
#define TANDEM_COMMON_UTIL_RANDOM_ID_H_

#include <cstdint>
#include <random>

namespace tandem {

inline uint64_t RandomNonZero64() {
  std::random_device rd;
  uint64_t id = 0;
  while (id == 0) id = (uint64_t{rd()} << 32) ^ rd();
  return id;
}

}  // namespace tandem

#endif  // TANDEM_COMMON_UTIL_RANDOM_ID_H_
