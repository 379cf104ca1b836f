// Conversions between the transport choice's values and kv_transfer.proto, for the
// two ends of the KV handshake (the sender and the decode worker's service).
#ifndef TANDEM_COMMON_TRANSPORT_TRANSPORT_PROTO_H_
#define TANDEM_COMMON_TRANSPORT_TRANSPORT_PROTO_H_

#include <optional>
#include <vector>

#include "common/transport/transport_choice.h"
#include "tandem/v1/kv_transfer.pb.h"

namespace tandem::transport {

inline v1::TransportKind ToProto(TransportKind k) {
  switch (k) {
    case TransportKind::kHost:
      return v1::TRANSPORT_KIND_HOST;
    case TransportKind::kNccl:
      return v1::TRANSPORT_KIND_NCCL;
    case TransportKind::kCudaIpc:
      return v1::TRANSPORT_KIND_CUDA_IPC;
  }
  return v1::TRANSPORT_KIND_UNSPECIFIED;
}

// nullopt for UNSPECIFIED or a value this build does not know.
inline std::optional<TransportKind> FromProto(int k) {
  switch (k) {
    case v1::TRANSPORT_KIND_HOST:
      return TransportKind::kHost;
    case v1::TRANSPORT_KIND_NCCL:
      return TransportKind::kNccl;
    case v1::TRANSPORT_KIND_CUDA_IPC:
      return TransportKind::kCudaIpc;
    default:
      return std::nullopt;
  }
}

inline v1::KvDevice ToProto(const KvDevice& d) {
  v1::KvDevice out;
  out.set_backend(d.backend);
  out.set_uuid(d.uuid);
  out.set_nccl_host_id(d.nccl_host_id);
  return out;
}

inline KvDevice FromProto(const v1::KvDevice& d) {
  return {d.backend().empty() ? "cpu" : d.backend(), d.uuid(), d.nccl_host_id()};
}

}  // namespace tandem::transport

#endif  // TANDEM_COMMON_TRANSPORT_TRANSPORT_PROTO_H_
