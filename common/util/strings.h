// String helpers over std::string_view.
//
// Debian 12's Abseil is built with its own absl::string_view (not an alias of
// std::string_view), so absl::StrCat and friends do not accept std::string_view.
// These small replacements do; they are not for hot paths.
#ifndef TANDEM_COMMON_UTIL_STRINGS_H_
#define TANDEM_COMMON_UTIL_STRINGS_H_

#include <charconv>
#include <concepts>
#include <cstdio>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"

namespace tandem {

namespace strings_internal {
inline void Append(std::string* out, std::string_view s) { out->append(s); }
inline void Append(std::string* out, const char* s) { out->append(s); }
inline void Append(std::string* out, const std::string& s) { out->append(s); }
inline void Append(std::string* out, char c) { out->push_back(c); }
// absl::string_view (a distinct type in Debian's Abseil), e.g. absl::Status::message().
template <typename T>
requires(std::same_as<T, absl::string_view> &&
         !std::same_as<T, std::string_view>) void Append(std::string* out, const T& s) {
  out->append(s.data(), s.size());
}
inline void Append(std::string* out, bool b) { out->append(b ? "true" : "false"); }
template <std::integral T>
requires(!std::same_as<T, char> && !std::same_as<T, bool>) void Append(std::string* out, T v) {
  char buf[24];
  auto r = std::to_chars(
      buf, buf + sizeof(buf),
      static_cast<std::conditional_t<std::is_signed_v<T>, long long, unsigned long long>>(v));
  out->append(buf, r.ptr);
}
template <std::floating_point T>
void Append(std::string* out, T v) {
  char buf[32];
  int n = std::snprintf(buf, sizeof(buf), "%.9g", static_cast<double>(v));
  out->append(buf, static_cast<size_t>(n));
}
}  // namespace strings_internal

template <typename... Args>
std::string StrCat(const Args&... args) {
  std::string out;
  (strings_internal::Append(&out, args), ...);
  return out;
}

// Replaces every non-overlapping occurrence of `from` (non-empty) with `to`.
inline std::string ReplaceAll(std::string_view s, std::string_view from, std::string_view to) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (true) {
    size_t j = s.find(from, i);
    if (j == std::string_view::npos) break;
    out.append(s.substr(i, j - i)).append(to);
    i = j + from.size();
  }
  out.append(s.substr(i));
  return out;
}

template <typename Range>
std::string Join(const Range& items, std::string_view sep) {
  std::string out;
  bool first = true;
  for (const auto& item : items) {
    if (!first) out.append(sep);
    first = false;
    strings_internal::Append(&out, item);
  }
  return out;
}

// Transparent hash/equality so maps keyed by std::string can be searched with
// std::string_view without a copy.
struct StringViewHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
struct StringViewEq {
  using is_transparent = void;
  bool operator()(std::string_view a, std::string_view b) const { return a == b; }
};

}  // namespace tandem

#endif  // TANDEM_COMMON_UTIL_STRINGS_H_
