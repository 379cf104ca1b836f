#include "common/transport/transport_choice.h"

#include <algorithm>

#include "common/util/strings.h"

namespace tandem::transport {

std::string_view TransportName(TransportKind kind) {
  switch (kind) {
    case TransportKind::kHost:
      return "host";
    case TransportKind::kNccl:
      return "nccl";
    case TransportKind::kCudaIpc:
      return "cuda-ipc";
  }
  return "?";
}

absl::StatusOr<TransportPolicy> ParseTransportPolicy(std::string_view flag) {
  if (flag == "auto") return TransportPolicy{};
  for (TransportKind k : {TransportKind::kHost, TransportKind::kNccl, TransportKind::kCudaIpc}) {
    if (flag == TransportName(k)) return TransportPolicy{.automatic = false, .only = k};
  }
  return absl::InvalidArgumentError(
      StrCat("--kv-transport: '", flag, "' is not one of auto, nccl, cuda-ipc, host"));
}

std::vector<TransportKind> Offered(const KvDevice& device, const TransportPolicy& policy,
                                   bool peer_built) {
  std::vector<TransportKind> out;
  const bool gpu = device.backend == "cuda" && peer_built;
  auto allow = [&](TransportKind k) { return policy.automatic || policy.only == k; };
  if (gpu && allow(TransportKind::kCudaIpc)) out.push_back(TransportKind::kCudaIpc);
  if (gpu && allow(TransportKind::kNccl)) out.push_back(TransportKind::kNccl);
  if (allow(TransportKind::kHost)) out.push_back(TransportKind::kHost);
  return out;
}

absl::StatusOr<TransportKind> ChooseTransport(const std::vector<TransportKind>& offered,
                                              const KvDevice& sender,
                                              const std::vector<TransportKind>& accepted,
                                              const KvDevice& receiver) {
  auto names = [](const std::vector<TransportKind>& kinds) {
    std::vector<std::string> n;
    for (TransportKind k : kinds) n.emplace_back(TransportName(k));
    return n.empty() ? std::string("none") : Join(n, ", ");
  };
  const bool both_gpu = sender.backend == "cuda" && receiver.backend == "cuda";
  const bool same_gpu = both_gpu && !sender.uuid.empty() && sender.uuid == receiver.uuid;
  // NCCL tells ranks apart by host and device: two named hosts may share a GPU.
  const bool distinct_nccl_hosts = !sender.nccl_host_id.empty() && !receiver.nccl_host_id.empty() &&
                                   sender.nccl_host_id != receiver.nccl_host_id;
  std::vector<std::string> why;
  for (TransportKind k : offered) {
    if (std::find(accepted.begin(), accepted.end(), k) == accepted.end()) continue;
    switch (k) {
      case TransportKind::kCudaIpc:
        if (same_gpu) return k;
        why.push_back(StrCat("cuda-ipc needs both on one GPU (", sender.backend, " ", sender.uuid,
                             " there, ", receiver.backend, " ", receiver.uuid, " here)"));
        break;
      case TransportKind::kNccl:
        if (both_gpu && (!same_gpu || distinct_nccl_hosts)) return k;
        why.push_back(same_gpu ? std::string("nccl cannot pair two ranks on one GPU (unless "
                                             "each process names another NCCL_HOSTID)")
                               : StrCat("nccl needs both on GPUs (", sender.backend, " there, ",
                                        receiver.backend, " here)"));
        break;
      case TransportKind::kHost:
        return k;
    }
  }
  return absl::FailedPreconditionError(
      StrCat("transports: none in common (the prefill worker offers ", names(offered),
             "; this decode worker accepts ", names(accepted),
             why.empty() ? std::string() : StrCat("; ", Join(why, "; ")), ")"));
}

}  // namespace tandem::transport
