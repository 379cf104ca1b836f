// `tandem client`: sends one request to a running cluster's router (gRPC Generate)
// and streams the answer to stdout; --json prints the object `tandem generate --json`
// prints.
#ifndef TANDEM_CLI_CLIENT_COMMAND_H_
#define TANDEM_CLI_CLIENT_COMMAND_H_

#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "cli/request_flags.h"
#include "common/rpc/rpc_server.h"

namespace tandem::cli {

struct ClientOptions {
  std::string endpoint = "127.0.0.1:50051";
  RequestFlags request;
  std::vector<std::string> stop;
  double timeout_s = 600;
  rpc::ChannelSecurity security;  // --api-key, --tls-ca, --tls-cert, --tls-key
};

void AddClientCommand(CLI::App& app, ClientOptions* options);

// Process exit code: 0 on success, 1 on error (the gRPC status on stderr).
int RunClient(const ClientOptions& options);

}  // namespace tandem::cli

#endif  // TANDEM_CLI_CLIENT_COMMAND_H_
