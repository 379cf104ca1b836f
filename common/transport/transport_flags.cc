#include "common/transport/transport_flags.h"

#include <cstdlib>

#include "common/transport/gpu_transports.h"
#include "common/util/strings.h"

namespace tandem::transport {

void AddTransportFlags(CLI::App& app, TransportFlags* f) {
  app.add_option("--kv-transport", f->kv_transport,
                 "How KV blocks move between prefill and decode workers: auto (cuda-ipc on one "
                 "GPU, nccl between GPUs, else host), nccl, cuda-ipc or host")
      ->check(CLI::IsMember({"auto", "nccl", "cuda-ipc", "host"}))
      ->capture_default_str();
  app.add_option("--kv-transfer-timeout-ms", f->timeout_ms,
                 "Deadline of each peer-transport send or receive of a KV transfer (a stalled "
                 "transfer fails its request after this)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--kv-staging-bytes", f->staging_bytes,
                 "Device staging buffer for one peer-transport payload (nccl, cuda-ipc)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
}

absl::StatusOr<WorkerTransports> MakeWorkerTransports(const TransportFlags& flags,
                                                      const std::string& device, int gpu) {
  absl::StatusOr<TransportPolicy> policy = ParseTransportPolicy(flags.kv_transport);
  if (!policy.ok()) return policy.status();
  WorkerTransports t;
  t.timeout = std::chrono::milliseconds(flags.timeout_ms);
  t.staging_bytes = flags.staging_bytes;
  t.device.backend = device == "cuda" ? "cuda" : "cpu";
  const bool gpu_worker = t.device.backend == "cuda";
  if (gpu_worker && PeerTransportsBuilt()) {
    absl::StatusOr<std::string> uuid = GpuUuid(gpu);
    if (!uuid.ok()) {
      return absl::UnavailableError(
          StrCat("--device cuda --gpu ", gpu, ": ", uuid.status().message()));
    }
    t.device.uuid = *uuid;
    if (const char* host = std::getenv("NCCL_HOSTID"); host != nullptr) {
      t.device.nccl_host_id = host;
    }
  }
  t.kinds = Offered(t.device, *policy, PeerTransportsBuilt());
  if (t.kinds.empty()) {
    return absl::FailedPreconditionError(StrCat("--kv-transport ", flags.kv_transport,
                                                ": needs --device cuda in a build with NCCL",
                                                gpu_worker ? " (this build has none)" : ""));
  }
  for (TransportKind k : t.kinds) {
    if (k == TransportKind::kNccl) {
      absl::StatusOr<std::unique_ptr<PeerCommFactory>> f = MakeNcclFactory(gpu);
      if (!f.ok()) return f.status();
      t.nccl = *std::move(f);
    } else if (k == TransportKind::kCudaIpc) {
      absl::StatusOr<std::unique_ptr<PeerCommFactory>> f = MakeCudaIpcFactory(gpu);
      if (!f.ok()) return f.status();
      t.cuda_ipc = *std::move(f);
    }
  }
  return t;
}

}  // namespace tandem::transport
