// ApiKey: the shared secret of --api-key, checked on every gRPC call of a tandem
// service (health and reflection are separate services and stay open for probes).
// A client sends it as metadata `authorization: Bearer <key>` — MakeChannel adds it to
// every call when given one. An empty key turns the check off.
//
// Thread-safe (immutable).
#ifndef TANDEM_COMMON_RPC_API_KEY_H_
#define TANDEM_COMMON_RPC_API_KEY_H_

#include <grpcpp/grpcpp.h>

#include <string>
#include <string_view>

#include "common/util/bearer_token.h"

namespace tandem::rpc {

class ApiKey {
 public:
  ApiKey() = default;
  explicit ApiKey(std::string key) : key_(std::move(key)) {}

  bool empty() const { return key_.empty(); }
  const std::string& value() const { return key_; }

  // OK, or UNAUTHENTICATED when the call does not carry the key.
  grpc::Status Check(const grpc::ServerContextBase& ctx) const {
    if (key_.empty()) return grpc::Status::OK;
    const auto& md = ctx.client_metadata();
    auto it = md.find("authorization");
    if (it != md.end() &&
        BearerTokenMatches(std::string_view(it->second.data(), it->second.size()), key_)) {
      return grpc::Status::OK;
    }
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                        "missing or invalid API key (metadata authorization: Bearer <key>)");
  }

 private:
  std::string key_;
};

}  // namespace tandem::rpc

#endif  // TANDEM_COMMON_RPC_API_KEY_H_
