// IEEE binary16 and bfloat16 conversions to and from float32, bit-exact
// (subnormals, infinities and NaNs included). Pure functions; thread-safe.
#ifndef TANDEM_COMMON_UTIL_HALF_H_
#define TANDEM_COMMON_UTIL_HALF_H_

#include <bit>
#include <cstdint>

namespace tandem {

inline float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  const uint32_t exp = (h >> 10) & 0x1F;
  const uint32_t mant = h & 0x3FF;
  uint32_t bits;
  if (exp == 0x1F) {
    bits = sign | 0x7F800000u | (mant << 13);  // inf / NaN (payload kept)
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (mant << 13);
  } else if (mant == 0) {
    bits = sign;  // ±0
  } else {
    // Subnormal: value = mant × 2^-24, exactly representable in float32.
    float f = static_cast<float>(mant) * 5.9604644775390625e-08f;
    bits = sign | std::bit_cast<uint32_t>(f);
  }
  return std::bit_cast<float>(bits);
}

// Round-to-nearest-even float32 → binary16.
inline uint16_t FloatToHalf(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000);
  const uint32_t abs = x & 0x7FFFFFFF;
  if (abs > 0x7F800000) return sign | 0x7E00;   // NaN
  if (abs >= 0x477FF000) return sign | 0x7C00;  // rounds to inf
  if (abs < 0x38800000) {                       // subnormal or zero in half
    float a = std::bit_cast<float>(abs);
    // Scale so the half subnormal step (2^-24) is 1.0, then round half-even.
    float scaled = a * 16777216.0f;
    uint32_t m = static_cast<uint32_t>(scaled);
    float frac = scaled - static_cast<float>(m);
    if (frac > 0.5f || (frac == 0.5f && (m & 1))) ++m;
    return sign | static_cast<uint16_t>(m);
  }
  uint32_t mant = abs & 0x7FFFFF;
  uint32_t exp = (abs >> 23) - 112;
  uint32_t h = (exp << 10) | (mant >> 13);
  uint32_t rest = mant & 0x1FFF;
  if (rest > 0x1000 || (rest == 0x1000 && (h & 1))) ++h;
  return sign | static_cast<uint16_t>(h);
}

inline float Bf16ToFloat(uint16_t b) {
  return std::bit_cast<float>(static_cast<uint32_t>(b) << 16);
}

// Round-to-nearest-even float32 → bfloat16 (NaN stays NaN).
inline uint16_t FloatToBf16(float f) {
  uint32_t x = std::bit_cast<uint32_t>(f);
  if ((x & 0x7FFFFFFF) > 0x7F800000) return static_cast<uint16_t>((x >> 16) | 0x40);
  x += 0x7FFF + ((x >> 16) & 1);
  return static_cast<uint16_t>(x >> 16);
}

}  // namespace tandem

#endif  // TANDEM_COMMON_UTIL_HALF_H_
