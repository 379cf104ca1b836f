// Whether a tandem router is ready to serve: its health says SERVING for
// tandem.v1.Generation and it sees every one of its workers healthy. Used by
// `tandem serve` and the cluster tests to know when a fresh cluster is usable.
#ifndef TANDEM_COMMON_RPC_ROUTER_PROBE_H_
#define TANDEM_COMMON_RPC_ROUTER_PROBE_H_

#include <chrono>
#include <string>

namespace tandem::rpc {

// Polls `address` until ready or `timeout` passes; true if ready. Ready: the router's
// Generation service is SERVING and GetServerInfo lists every worker healthy; with
// `serving` false only the latter (a cluster whose workers cannot pair never serves).
bool WaitForRouterReady(const std::string& address, std::chrono::milliseconds timeout,
                        bool serving = true);

}  // namespace tandem::rpc

#endif  // TANDEM_COMMON_RPC_ROUTER_PROBE_H_
