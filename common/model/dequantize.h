// Dequantization of GGUF tensor data to float32.
//
// Supported: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q4_K, Q6_K (GgmlTypeTraits::can_dequantize).
// Block layouts follow ggml exactly; each is spelled out beside its decoder in
// dequantize.cc. Pure functions over caller-owned buffers; thread-safe.
#ifndef TANDEM_COMMON_MODEL_DEQUANTIZE_H_
#define TANDEM_COMMON_MODEL_DEQUANTIZE_H_

#include <cstdint>
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

// The whole tensor as float32, in file order ([ne3][ne2][ne1][ne0]).
absl::StatusOr<std::vector<float>> DequantizeTensor(const GgufTensorInfo& tensor);

}  // namespace tandem::model

#endif  // TANDEM_COMMON_MODEL_DEQUANTIZE_H_
