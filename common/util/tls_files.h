// TlsFiles: the PEM files behind a server's --tls-cert / --tls-key / --tls-client-ca
// flags (and a client's --tls-ca / --tls-cert / --tls-key), shared by the gRPC and
// HTTP sides so both check and read them the same way.
#ifndef TANDEM_COMMON_UTIL_TLS_FILES_H_
#define TANDEM_COMMON_UTIL_TLS_FILES_H_

#include <fstream>
#include <sstream>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "common/util/strings.h"

namespace tandem {

struct TlsFiles {
  std::string cert;       // PEM certificate chain; empty: no TLS
  std::string key;        // PEM private key
  std::string client_ca;  // server: require client certificates signed by these CAs
  bool enabled() const { return !cert.empty(); }

  // Server-side consistency: a key with the certificate, a client CA only with both.
  absl::Status CheckServer() const {
    if (enabled() && key.empty())
      return absl::InvalidArgumentError("--tls-key: required with --tls-cert");
    if (!enabled() && !key.empty())
      return absl::InvalidArgumentError("--tls-cert: required with --tls-key");
    if (!enabled() && !client_ca.empty()) {
      return absl::InvalidArgumentError("--tls-client-ca: needs --tls-cert and --tls-key");
    }
    return absl::OkStatus();
  }
};

// The whole file, or InvalidArgument naming the flag.
inline absl::StatusOr<std::string> ReadPemFile(std::string_view flag, const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::InvalidArgumentError(StrCat(flag, ": cannot read ", path));
  std::ostringstream s;
  s << in.rdbuf();
  if (s.str().find("-----BEGIN") == std::string::npos) {
    return absl::InvalidArgumentError(StrCat(flag, ": ", path, " is not a PEM file"));
  }
  return s.str();
}

}  // namespace tandem

#endif  // TANDEM_COMMON_UTIL_TLS_FILES_H_
