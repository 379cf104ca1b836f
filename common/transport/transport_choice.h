// Which KV transport a prefill/decode pair uses, decided by the decode worker at the
// KV handshake from both sides' devices and what each allows (--kv-transport):
//   cuda-ipc  both sides on the same GPU (same device UUID), both allow it;
//   nccl      both sides on different GPUs, both allow it (and the build has NCCL);
//             on one GPU only when the two processes run under different NCCL_HOSTIDs
//             (NCCL refuses two ranks on one device of one host; a test-only
//             arrangement, tests/integration/cluster_gpu_test.cc);
//   host      otherwise (the gRPC stream of host bytes), if both allow it.
// A pair with nothing in common is refused with FailedPrecondition saying why, before
// any block moves.
//
// A plain function of values.
#ifndef TANDEM_COMMON_TRANSPORT_TRANSPORT_CHOICE_H_
#define TANDEM_COMMON_TRANSPORT_TRANSPORT_CHOICE_H_

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace tandem::transport {

enum class TransportKind { kHost, kNccl, kCudaIpc };

// "host", "nccl", "cuda-ipc".
std::string_view TransportName(TransportKind kind);

// What one side's KV memory is.
struct KvDevice {
  std::string backend = "cpu";    // "cpu" or "cuda"
  std::string uuid;               // the GPU's UUID (hex); empty on the host
  std::string nccl_host_id = {};  // NCCL_HOSTID of the process; empty when unset
};

// The --kv-transport flag: "auto" or one transport's name.
struct TransportPolicy {
  bool automatic = true;
  TransportKind only = TransportKind::kHost;  // when !automatic
};
absl::StatusOr<TransportPolicy> ParseTransportPolicy(std::string_view flag);

// The transports a side can use with `device` under `policy`, preferred first; peer
// transports only on a CUDA device of a build that has them (`peer_built`).
std::vector<TransportKind> Offered(const KvDevice& device, const TransportPolicy& policy,
                                   bool peer_built);

// The receiver's choice among the sender's `offered` list (preferred first).
absl::StatusOr<TransportKind> ChooseTransport(const std::vector<TransportKind>& offered,
                                              const KvDevice& sender,
                                              const std::vector<TransportKind>& accepted,
                                              const KvDevice& receiver);

}  // namespace tandem::transport

#endif  // TANDEM_COMMON_TRANSPORT_TRANSPORT_CHOICE_H_
