// Dequantization of GGUF tensor data to float32.
//
// Supported (GgmlTypeTraits::can_dequantize): F32, F16, BF16; Q8_0, Q4_0, Q4_1, Q5_0,
// Q5_1, IQ4_NL (blocks of 32); Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS (blocks of 256) —
// every type llama.cpp's Q2_K … Q8_0 and IQ4_NL / IQ4_XS presets write, fallbacks included.
// Block layouts follow ggml exactly; each is spelled out beside its decoder in
// dequantize.cc. Pure functions over caller-owned buffers; thread-safe.
#ifndef TANDEM_COMMON_MODEL_DEQUANTIZE_H_
#define TANDEM_COMMON_MODEL_DEQUANTIZE_H_

#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/model/ggml_type.h"
#include "common/model/gguf_file.h"

namespace tandem::model {

// Decodes dst.size() elements from `src`. dst.size() must be a multiple of the type's
// block size and `src` must hold exactly dst.size() / block_size blocks.
absl::Status Dequantize(GgmlType type, std::span<const uint8_t> src, std::span<float> dst);

// Pieces of the layouts that vectorized decoders (kernels/cpu/matmul.cc) share with
// Dequantize, so that both read a block the same way:
// the 6-bit scale and min of sub-block j (0…7) from the 12 packed scale bytes of Q4_K
// and Q5_K;
// (Inline: the matmul kernels call it once per 32 weights.)
inline void KQuantScaleMin(const uint8_t* scales, int j, uint8_t* sc, uint8_t* m) {
  if (j < 4) {
    *sc = scales[j] & 63;
    *m = scales[j + 4] & 63;
  } else {
    *sc = (scales[j + 4] & 0x0F) | ((scales[j - 4] >> 6) << 4);
    *m = (scales[j + 4] >> 4) | ((scales[j] >> 6) << 4);
  }
}
// IQ4_NL's (and IQ4_XS's) 16 non-linear levels, which a 4-bit index selects.
inline constexpr int8_t kIq4Levels[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                          1,    13,   25,  38,  53,  69,  89,  113};

// MXFP4's 16 levels (OCP microscaling E2M1 values, doubled: ±{0, 0.5, 1, 1.5, 2, 3, 4,
// 6} × 2), which a 4-bit index selects; the block's E8M0 scale is then halved.
inline constexpr int8_t kMxfp4Levels[16] = {0, 1,  2,  3,  4,  6,  8,  12,
                                            0, -1, -2, -3, -4, -6, -8, -12};
// Half of an E8M0 scale, 2^(e − 128), as an exact float (ggml's e8m0_to_fp32_half:
// subnormal for e < 2).
inline float E8m0Half(uint8_t e) {
  const uint32_t bits = e < 2 ? uint32_t{0x00200000} << e : static_cast<uint32_t>(e - 1) << 23;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// The whole tensor as float32, in file order ([ne3][ne2][ne1][ne0]).
absl::StatusOr<std::vector<float>> DequantizeTensor(const GgufTensorInfo& tensor);

}  // namespace tandem::model

#endif  // TANDEM_COMMON_MODEL_DEQUANTIZE_H_
