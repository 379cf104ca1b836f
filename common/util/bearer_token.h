// BearerTokenMatches: whether an "Authorization" value is "Bearer <key>", compared in
// time independent of where it differs. The one API-key check behind both the HTTP
// servers (common/http) and the gRPC servers (common/rpc/rpc_server.h).
#ifndef TANDEM_COMMON_UTIL_BEARER_TOKEN_H_
#define TANDEM_COMMON_UTIL_BEARER_TOKEN_H_

#include <string_view>

namespace tandem {

inline bool BearerTokenMatches(std::string_view authorization, std::string_view key) {
  constexpr std::string_view kBearer = "Bearer ";
  if (authorization.size() <= kBearer.size() ||
      authorization.substr(0, kBearer.size()) != kBearer) {
    return false;
  }
  const std::string_view got = authorization.substr(kBearer.size());
  if (got.size() != key.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < got.size(); ++i) diff |= static_cast<unsigned char>(got[i] ^ key[i]);
  return diff == 0;
}

}  // namespace tandem

#endif  // TANDEM_COMMON_UTIL_BEARER_TOKEN_H_
