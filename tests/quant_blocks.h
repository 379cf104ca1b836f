// Random weights in a block-quantized GGUF type, for tests: every byte uniformly random
// except each block's f16 scale and min fields, which get finite random values of a
// chosen magnitude (random f16 bytes would often be inf or NaN). Any bit pattern of the
// rest of a block (quant bits, packed sub-block scales) is a valid block.
//
// Test-only, header-only.
#ifndef TANDEM_TESTS_QUANT_BLOCKS_H_
#define TANDEM_TESTS_QUANT_BLOCKS_H_

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "common/model/ggml_type.h"
#include "common/util/half.h"

namespace tandem::testing {

// Byte offsets within a block of its f16 fields, scale first (ggml's layouts).
inline std::vector<int> HalfFields(model::GgmlType type) {
  using model::GgmlType;
  switch (type) {
    case GgmlType::kQ4_1:
    case GgmlType::kQ5_1:
    case GgmlType::kQ4_K:
    case GgmlType::kQ5_K:
      return {0, 2};  // d, then m / dmin
    case GgmlType::kQ2_K:
      return {80, 82};
    case GgmlType::kQ3_K:
      return {108};
    case GgmlType::kQ6_K:
      return {208};
    case GgmlType::kMXFP4:
      return {};  // an E8M0 byte (RandomQuantRows draws it)
    default:
      return {0};  // Q8_0, Q4_0, Q5_0, IQ4_NL, IQ4_XS: d first
  }
}

// rows × cols weights of `type` (cols a multiple of its block size): scales uniform in
// ±`scale`, mins in ±4·`scale`.
inline std::vector<uint8_t> RandomQuantRows(model::GgmlType type, int64_t rows, int64_t cols,
                                            float scale, std::mt19937& rng) {
  const model::GgmlTypeTraits& t = model::Traits(type);
  const int64_t blocks = rows * cols / t.block_size;
  std::vector<uint8_t> data(static_cast<size_t>(blocks * t.type_size));
  for (auto& b : data) b = static_cast<uint8_t>(rng());
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  const std::vector<int> fields = HalfFields(type);
  for (int64_t blk = 0; blk < blocks; ++blk) {
    for (size_t f = 0; f < fields.size(); ++f) {
      const uint16_t h = FloatToHalf(u(rng) * (f == 0 ? scale : 4 * scale));
      std::memcpy(data.data() + blk * t.type_size + fields[f], &h, 2);
    }
    if (type == model::GgmlType::kMXFP4) {  // 2^(e − 128) within a factor 8 below `scale`
      const int top = 128 + static_cast<int>(std::floor(std::log2(scale)));
      data[blk * t.type_size] = static_cast<uint8_t>(top - static_cast<int>(rng() % 4));
    }
  }
  return data;
}

}  // namespace tandem::testing

#endif  // TANDEM_TESTS_QUANT_BLOCKS_H_
