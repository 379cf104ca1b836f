#include "common/rpc/address.h"

#include <arpa/inet.h>

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "common/util/strings.h"

namespace tandem::rpc {

bool SplitHostPort(std::string_view address, std::string* host, std::string* port) {
  const size_t colon = address.rfind(':');
  if (colon == std::string_view::npos || colon + 1 == address.size()) return false;
  std::string_view h = address.substr(0, colon);
  if (h.size() >= 2 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
  *host = std::string(h);
  *port = std::string(address.substr(colon + 1));
  return !host->empty();
}

bool IsIpLiteral(const std::string& host) {
  in6_addr buf;
  return inet_pton(AF_INET, host.c_str(), &buf) == 1 ||
         inet_pton(AF_INET6, host.c_str(), &buf) == 1;
}

absl::Status CheckAddress(std::string_view address, std::string_view what) {
  auto bad = [&](std::string_view why) {
    // The address is shown escaped: it may hold any bytes.
    return absl::InvalidArgumentError(
        StrCat(what, ": \"", absl::CHexEscape(std::string(address.substr(0, 256))), "\" ", why));
  };
  std::string host, port;
  if (!SplitHostPort(address, &host, &port)) return bad("is not host:port");
  if (port.size() > 5 || !std::all_of(port.begin(), port.end(), absl::ascii_isdigit) ||
      std::stoi(port) < 1 || std::stoi(port) > 65535) {
    return bad("has no port in 1..65535");
  }
  const bool bracketed = address.front() == '[';
  if (bracketed) {
    in6_addr buf;
    if (inet_pton(AF_INET6, host.c_str(), &buf) != 1) return bad("has no IPv6 address in [ ]");
    return absl::OkStatus();
  }
  // An IPv4 literal only: a name would be resolved here (a network action on a request's
  // word), and a gRPC target scheme ("unix:80", "dns:1234") is no IP address either.
  in_addr v4;
  const bool dotted = std::all_of(host.begin(), host.end(),
                                  [](char c) { return absl::ascii_isdigit(c) || c == '.'; });
  if (!dotted || inet_pton(AF_INET, host.c_str(), &v4) != 1) {
    return bad("is not an IP address and port (destinations are addresses the router resolved)");
  }
  return absl::OkStatus();
}

}  // namespace tandem::rpc
