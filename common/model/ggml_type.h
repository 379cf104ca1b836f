// GgmlType: the tensor element types a GGUF file may declare, and their block layout.
//
// Quantized types pack `block_size` consecutive elements of a row into `type_size`
// bytes. The table is static and immutable; all functions are thread-safe.
#ifndef TANDEM_COMMON_MODEL_GGML_TYPE_H_
#define TANDEM_COMMON_MODEL_GGML_TYPE_H_

#include <cstdint>
#include <string_view>

namespace tandem::model {

// Values are the ids stored in GGUF files; never renumber.
enum class GgmlType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ8_1 = 9,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kQ8_K = 15,
  kIQ2_XXS = 16,
  kIQ2_XS = 17,
  kIQ3_XXS = 18,
  kIQ1_S = 19,
  kIQ4_NL = 20,
  kIQ3_S = 21,
  kIQ2_S = 22,
  kIQ4_XS = 23,
  kI8 = 24,
  kI16 = 25,
  kI32 = 26,
  kI64 = 27,
  kF64 = 28,
  kIQ1_M = 29,
  kBF16 = 30,
  kTQ1_0 = 34,
  kTQ2_0 = 35,
  kMXFP4 = 39,
};

struct GgmlTypeTraits {
  GgmlType type;
  std::string_view name;
  int64_t block_size;   // elements per block
  int64_t type_size;    // bytes per block
  bool can_dequantize;  // tandem implements DequantizeRow for it
};

// Traits of a type id read from a file, or nullptr for an unknown id.
const GgmlTypeTraits* FindGgmlType(uint32_t id);

// Traits of a known type. Never null.
const GgmlTypeTraits& Traits(GgmlType type);

inline std::string_view GgmlTypeName(GgmlType type) { return Traits(type).name; }

}  // namespace tandem::model

#endif  // TANDEM_COMMON_MODEL_GGML_TYPE_H_
