// RpcServer: a gRPC server with what every tandem process exposes besides its own
// services — grpc.health.v1 (service "" = live as soon as it listens; named services
// are NOT_SERVING until SetReady) and server reflection — and the one place the API
// key is checked: with a key, every call but health and reflection (which probes use)
// must carry metadata `authorization: Bearer <key>` or is answered UNAUTHENTICATED
// before any handler runs (gRPC core's auth-metadata processor, on plaintext and TLS
// alike). MakeChannel adds the key to every call of a client.
//
// Thread-safe after Start.
#ifndef TANDEM_COMMON_RPC_RPC_SERVER_H_
#define TANDEM_COMMON_RPC_RPC_SERVER_H_

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/util/tls_files.h"

namespace tandem::rpc {

class RpcServer {
 public:
  // Listens on `address` (host:port; port 0 picks a free one). `ready_services` are
  // reported NOT_SERVING until SetReady(true).
  // With `tls` enabled it serves TLS only (and requires client certificates signed by
  // tls.client_ca when that is set).
  // `api_key` empty: no key is asked for.
  static absl::StatusOr<std::unique_ptr<RpcServer>> Start(
      const std::string& address, const std::vector<grpc::Service*>& services,
      const std::vector<std::string>& ready_services, const TlsFiles& tls = {},
      const std::string& api_key = {});

  int port() const { return port_; }
  void SetReady(bool ready);
  // Refuses new calls, waits for running ones up to `grace`, then cancels them.
  void Shutdown(std::chrono::milliseconds grace);

 private:
  std::unique_ptr<grpc::Server> server_;
  std::vector<std::string> ready_services_;
  int port_ = 0;
};

// How a client reaches a server: the API key every call carries, and TLS (when
// `tls_ca` is set: verify the server against it; with cert/key: present a client
// certificate). `tls_server_name` overrides the name checked in the certificate.
struct ChannelSecurity {
  std::string api_key;
  std::string tls_ca, tls_cert, tls_key;  // PEM file paths
  std::string tls_server_name;
};

// Client channel options shared by every tandem client: large messages (KV chunks)
// and keepalive so a dead peer is noticed within seconds. InvalidArgument when a TLS
// file cannot be read.
absl::StatusOr<std::shared_ptr<grpc::Channel>> MakeSecureChannel(const std::string& address,
                                                                 const ChannelSecurity& security);
// The same without TLS; the API key (if any) is still sent.
std::shared_ptr<grpc::Channel> MakeChannel(const std::string& address,
                                           const std::string& api_key = {});

}  // namespace tandem::rpc

#endif  // TANDEM_COMMON_RPC_RPC_SERVER_H_
