#include "common/tokenizer/normalizer.h"

#include <utf8proc.h>

#include <cstdlib>

namespace tandem::tokenizer {

std::string Normalize(Normalization form, std::string_view text) {
  if (form == Normalization::kNone) return std::string(text);
  // ASCII is in every normal form: the common case costs one scan.
  bool ascii = true;
  for (char c : text) ascii &= static_cast<unsigned char>(c) < 0x80;
  if (ascii) return std::string(text);
  utf8proc_uint8_t* out = nullptr;
  const utf8proc_ssize_t n =
      utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                   static_cast<utf8proc_ssize_t>(text.size()), &out,
                   static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  if (n < 0) return std::string(text);  // not reached for valid UTF-8
  std::string result(reinterpret_cast<const char*>(out), static_cast<size_t>(n));
  std::free(out);
  return result;
}

}  // namespace tandem::tokenizer
