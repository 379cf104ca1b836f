// Addresses the services dial, host:port ("[v6]:port" for an IPv6 literal).
//
// SplitHostPort takes one apart without judging it (the router's --prefill/--decode
// flags, where a DNS name stands for every address it resolves to). CheckAddress is
// for an address that arrives in a request — a KV destination the prefill worker is
// told to push to — and must be an IP address and port before anything dials it: an
// IPv4 literal or a bracketed IPv6 one (never a name, which would be resolved through
// DNS on the request's word, nor a gRPC target scheme: "unix:80" is a socket path to
// gRPC), a decimal port in 1..65535. The router only ever names workers by the
// addresses it resolved. gRPC itself would take "127.0.0.1:99999" as port 34463, and
// answer an empty target UNKNOWN.
#ifndef TANDEM_COMMON_RPC_ADDRESS_H_
#define TANDEM_COMMON_RPC_ADDRESS_H_

#include <string>
#include <string_view>

#include "absl/status/status.h"

namespace tandem::rpc {

// host and port of host:port, an IPv6 host without its brackets; false when there is
// no port or no host.
bool SplitHostPort(std::string_view address, std::string* host, std::string* port);

// True when `host` is an IPv4 or IPv6 literal.
bool IsIpLiteral(const std::string& host);

// OK when `address` is IP:port as above; else InvalidArgument naming `what` (the
// field the address came in) and the reason.
absl::Status CheckAddress(std::string_view address, std::string_view what);

}  // namespace tandem::rpc

#endif  // TANDEM_COMMON_RPC_ADDRESS_H_
