// GgmlType: the tensor element types a GGUF file may declare, and their block layout.
//
// Quantized types pack `block_size` consecutive elements of a row into `type_size`
// bytes. The table is static and immutable; all functions are thread-safe.
#ifndef TANDEM_COMMON_MODEL_GGML_TYPE_H_
#define TANDEM_COMMON_MODEL_GGML_TYPE_H_

#include <array>
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

// Block sizes and byte sizes as defined by ggml (and the `gguf` Python package).
inline constexpr std::array kGgmlTypes = {
    GgmlTypeTraits{GgmlType::kF32, "F32", 1, 4, true},
    GgmlTypeTraits{GgmlType::kF16, "F16", 1, 2, true},
    GgmlTypeTraits{GgmlType::kQ4_0, "Q4_0", 32, 18, true},
    GgmlTypeTraits{GgmlType::kQ4_1, "Q4_1", 32, 20, true},
    GgmlTypeTraits{GgmlType::kQ5_0, "Q5_0", 32, 22, true},
    GgmlTypeTraits{GgmlType::kQ5_1, "Q5_1", 32, 24, true},
    GgmlTypeTraits{GgmlType::kQ8_0, "Q8_0", 32, 34, true},
    GgmlTypeTraits{GgmlType::kQ8_1, "Q8_1", 32, 40, false},
    GgmlTypeTraits{GgmlType::kQ2_K, "Q2_K", 256, 84, true},
    GgmlTypeTraits{GgmlType::kQ3_K, "Q3_K", 256, 110, true},
    GgmlTypeTraits{GgmlType::kQ4_K, "Q4_K", 256, 144, true},
    GgmlTypeTraits{GgmlType::kQ5_K, "Q5_K", 256, 176, true},
    GgmlTypeTraits{GgmlType::kQ6_K, "Q6_K", 256, 210, true},
    GgmlTypeTraits{GgmlType::kQ8_K, "Q8_K", 256, 292, false},
    GgmlTypeTraits{GgmlType::kIQ2_XXS, "IQ2_XXS", 256, 66, false},
    GgmlTypeTraits{GgmlType::kIQ2_XS, "IQ2_XS", 256, 74, false},
    GgmlTypeTraits{GgmlType::kIQ3_XXS, "IQ3_XXS", 256, 98, false},
    GgmlTypeTraits{GgmlType::kIQ1_S, "IQ1_S", 256, 50, false},
    GgmlTypeTraits{GgmlType::kIQ4_NL, "IQ4_NL", 32, 18, true},
    GgmlTypeTraits{GgmlType::kIQ3_S, "IQ3_S", 256, 110, false},
    GgmlTypeTraits{GgmlType::kIQ2_S, "IQ2_S", 256, 82, false},
    GgmlTypeTraits{GgmlType::kIQ4_XS, "IQ4_XS", 256, 136, true},
    GgmlTypeTraits{GgmlType::kI8, "I8", 1, 1, false},
    GgmlTypeTraits{GgmlType::kI16, "I16", 1, 2, false},
    GgmlTypeTraits{GgmlType::kI32, "I32", 1, 4, false},
    GgmlTypeTraits{GgmlType::kI64, "I64", 1, 8, false},
    GgmlTypeTraits{GgmlType::kF64, "F64", 1, 8, false},
    GgmlTypeTraits{GgmlType::kIQ1_M, "IQ1_M", 256, 56, false},
    GgmlTypeTraits{GgmlType::kBF16, "BF16", 1, 2, true},
    GgmlTypeTraits{GgmlType::kTQ1_0, "TQ1_0", 256, 54, false},
    GgmlTypeTraits{GgmlType::kTQ2_0, "TQ2_0", 256, 66, false},
    GgmlTypeTraits{GgmlType::kMXFP4, "MXFP4", 32, 17, true},
};

// Bytes per block of a known type, at compile time where the type is (0 for an id the
// table does not hold).
constexpr int64_t TypeBytes(GgmlType type) {
  for (const auto& t : kGgmlTypes) {
    if (t.type == type) return t.type_size;
  }
  return 0;
}

// Traits of a type id read from a file, or nullptr for an unknown id.
const GgmlTypeTraits* FindGgmlType(uint32_t id);

// Traits of a known type. Never null.
const GgmlTypeTraits& Traits(GgmlType type);

inline std::string_view GgmlTypeName(GgmlType type) { return Traits(type).name; }

}  // namespace tandem::model

#endif  // TANDEM_COMMON_MODEL_GGML_TYPE_H_
