#include "common/model/ggml_type.h"

#include "common/util/check.h"

namespace tandem::model {

const GgmlTypeTraits* FindGgmlType(uint32_t id) {
  for (const auto& t : kGgmlTypes) {
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
