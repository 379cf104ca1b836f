#include "common/model/ggml_type.h"

#include <array>

#include "common/util/check.h"

namespace tandem::model {

namespace {
// Block sizes and byte sizes as defined by ggml (and the `gguf` Python package).
constexpr std::array kTypes = {
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
    GgmlTypeTraits{GgmlType::kMXFP4, "MXFP4", 32, 17, false},
};
}  // namespace

const GgmlTypeTraits* FindGgmlType(uint32_t id) {
  for (const auto& t : kTypes) {
    if (static_cast<uint32_t>(t.type) == id) return &t;
  }
  return nullptr;
}

const GgmlTypeTraits& Traits(GgmlType type) {
  const GgmlTypeTraits* t = FindGgmlType(static_cast<uint32_t>(type));
  TANDEM_CHECK(t != nullptr);
  return *t;
}

}  // namespace tandem::model
