#include "common/util/utf8.h"

namespace tandem::utf8 {

size_t DeclaredLength(uint8_t lead) {
  if (lead < 0x80) return 1;
  if (lead >= 0xC2 && lead <= 0xDF) return 2;
  if (lead >= 0xE0 && lead <= 0xEF) return 3;
  if (lead >= 0xF0 && lead <= 0xF4) return 4;
  return 0;
}

// Table 3-7 of the Unicode standard: the only well-formed byte sequences.
size_t MaximalSubpart(std::string_view s) {
  if (s.empty()) return 0;
  const auto b = [&](size_t i) { return static_cast<uint8_t>(s[i]); };
  const size_t n = DeclaredLength(b(0));
  if (n <= 1) return 1;
  uint8_t lo = 0x80, hi = 0xBF;  // the second byte's range depends on the lead
  switch (b(0)) {
    case 0xE0:
      lo = 0xA0;
      break;
    case 0xED:
      hi = 0x9F;
      break;
    case 0xF0:
      lo = 0x90;
      break;
    case 0xF4:
      hi = 0x8F;
      break;
    default:
      break;
  }
  size_t i = 1;
  if (i < s.size() && b(i) >= lo && b(i) <= hi) {
    ++i;
    while (i < n && i < s.size() && (b(i) & 0xC0) == 0x80) ++i;
  }
  return i;
}

size_t SequenceLength(std::string_view s) {
  if (s.empty()) return 0;
  const size_t n = DeclaredLength(static_cast<uint8_t>(s[0]));
  return n != 0 && MaximalSubpart(s) == n ? n : 0;
}

size_t FirstInvalid(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    if (static_cast<uint8_t>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    size_t n = SequenceLength(s.substr(i));
    if (n == 0) return i;
    i += n;
  }
  return s.size();
}

bool IsValid(std::string_view s) { return FirstInvalid(s) == s.size(); }

void AppendCodepoint(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

uint32_t DecodeCodepoint(std::string_view s, size_t* len) {
  size_t n = SequenceLength(s);
  *len = n;
  if (n == 0) return 0;
  const auto b = [&](size_t i) { return static_cast<uint32_t>(static_cast<uint8_t>(s[i])); };
  switch (n) {
    case 1:
      return b(0);
    case 2:
      return ((b(0) & 0x1F) << 6) | (b(1) & 0x3F);
    case 3:
      return ((b(0) & 0x0F) << 12) | ((b(1) & 0x3F) << 6) | (b(2) & 0x3F);
    default:
      return ((b(0) & 0x07) << 18) | ((b(1) & 0x3F) << 12) | ((b(2) & 0x3F) << 6) | (b(3) & 0x3F);
  }
}

}  // namespace tandem::utf8
