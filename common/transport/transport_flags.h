// The KV-transport flags both workers share, and what they set up: the device the
// worker's KV lives on, the transports it offers (prefill) or accepts (decode), and the
// peer communicators those need.
//
//   --kv-transport auto|nccl|cuda-ipc|host   (auto: cuda-ipc on one GPU, else nccl
//                                             between GPUs, else host)
//   --kv-transfer-timeout-ms                  each peer Send/Recv, and a missing payload
//   --kv-staging-bytes                        one staging buffer (peer transports)
#ifndef TANDEM_COMMON_TRANSPORT_TRANSPORT_FLAGS_H_
#define TANDEM_COMMON_TRANSPORT_TRANSPORT_FLAGS_H_

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/statusor.h"
#include "common/transport/peer_comm.h"
#include "common/transport/transport_choice.h"

namespace tandem::transport {

struct TransportFlags {
  std::string kv_transport = "auto";
  int64_t timeout_ms = 10000;
  int64_t staging_bytes = int64_t{16} << 20;
};
void AddTransportFlags(CLI::App& app, TransportFlags* flags);

struct WorkerTransports {
  KvDevice device;
  std::vector<TransportKind> kinds;  // preferred first
  std::unique_ptr<PeerCommFactory> nccl;
  std::unique_ptr<PeerCommFactory> cuda_ipc;
  std::chrono::milliseconds timeout{10000};
  int64_t staging_bytes = 0;
};
// For a worker on `device` ("cpu", "cuda", …) GPU `gpu`. InvalidArgument for a bad
// flag; FailedPrecondition for a transport this worker cannot use (--kv-transport nccl
// on the host, or in a build without NCCL).
absl::StatusOr<WorkerTransports> MakeWorkerTransports(const TransportFlags& flags,
                                                      const std::string& device, int gpu);

}  // namespace tandem::transport

#endif  // TANDEM_COMMON_TRANSPORT_TRANSPORT_FLAGS_H_
