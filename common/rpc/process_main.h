// What the main() of every tandem server process shares: engine flags, the startup
// sequence (listen → load → ready), the port file a supervisor reads, and a clean
// shutdown on SIGINT/SIGTERM.
#ifndef TANDEM_COMMON_RPC_PROCESS_MAIN_H_
#define TANDEM_COMMON_RPC_PROCESS_MAIN_H_

#include <chrono>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "common/engine/engine.h"
#include "common/rpc/rpc_server.h"

namespace tandem::rpc {

struct ServerFlags {
  std::string model;
  std::string host = "127.0.0.1";
  int port = 0;           // 0: any free port
  std::string port_file;  // written with the bound port once listening
  int drain_timeout_ms = 10000;
};

void AddServerFlags(CLI::App& app, ServerFlags* flags);
void AddEngineFlags(CLI::App& app, engine::EngineOptions* options);

// Writes the port to flags.port_file (if set) atomically and logs "<name> listening
// on host:port" to stderr.
absl::Status AnnounceListening(const std::string& name, const ServerFlags& flags, int port);

// Blocks until SIGINT/SIGTERM, then marks the server not ready and shuts it down,
// giving running calls `drain_timeout_ms` to finish.
void ServeUntilSignal(const std::string& name, RpcServer* server, const ServerFlags& flags);

}  // namespace tandem::rpc

#endif  // TANDEM_COMMON_RPC_PROCESS_MAIN_H_
