#include "common/http/exchange.h"

#include <nlohmann/json.hpp>

#include "absl/strings/match.h"

namespace tandem::http {

std::string_view Request::Header(std::string_view name) const {
  for (const auto& [k, v] : headers) {
    if (absl::EqualsIgnoreCase(absl::string_view(k.data(), k.size()),
                               absl::string_view(name.data(), name.size()))) {
      return v;
    }
  }
  return {};
}

std::string JsonErrorBody(int http_status, std::string_view message, std::string_view type,
                          std::string_view param) {
  nlohmann::json err = {{"message", message},
                        {"type", type},
                        {"param", param.empty() ? nlohmann::json(nullptr) : nlohmann::json(param)},
                        {"code", http_status}};
  return nlohmann::json{{"error", err}}.dump(-1, ' ', false,
                                             nlohmann::json::error_handler_t::replace);
}

Response JsonError(int http_status, std::string_view message, std::string_view type,
                   std::string_view param) {
  Response r;
  r.status = http_status;
  r.body = JsonErrorBody(http_status, message, type, param);
  return r;
}

}  // namespace tandem::http
