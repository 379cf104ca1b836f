// Conversions between worker.proto / kv_transfer.proto messages and engine structs,
// on the workers' side (the router's side of worker.proto is in
// router/grpc_worker_client.cc). Workers' service files call these; the engine never
// sees a proto.
#ifndef TANDEM_COMMON_RPC_ENGINE_CONVERT_H_
#define TANDEM_COMMON_RPC_ENGINE_CONVERT_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/engine/engine.h"
#include "common/engine/sampling_params.h"
#include "common/kv/kv_layout.h"
#include "common/rpc/kv_fingerprint.h"
#include "tandem/v1/kv_transfer.pb.h"
#include "tandem/v1/worker.pb.h"

namespace tandem::rpc {

// InvalidArgument naming the field for logit_bias ids and values of different lengths.
absl::StatusOr<engine::SamplingParams> FromProto(const v1::EngineSamplingParams& p);

// kCancelled and kNone are both UNSPECIFIED on the wire: a cancelled stream ends with
// its status, not a reason.
v1::WorkerFinishReason ToProto(engine::FinishReason r);

// The sampled token's logprob and its top alternatives.
void ToProto(const engine::TokenEvent& ev, v1::WorkerLogprob* out);

// The engine's share of a worker's stats: blocks, sequences, prefix cache, chunks,
// tokens. The worker adds its own (queues, transfers, leases).
void ToProto(const engine::EngineStats& s, v1::WorkerStats* out);

// The fingerprint of a cache with `layout` (dtype and element order included) for the
// model with `model_hash`, computed on `device` ("cpu", "cpu-fence", "cuda"): `cpu_math`
// counts only on the CPU (on a GPU it is exact, whatever the host's default), so GPU
// workers on hosts of different CPUs still pair; fast carries its arithmetic's version
// ("fast.2", kernels::kQ8ArithmeticVersion), so builds that would give different bits
// do not.
v1::KvLayoutFingerprint MakeFingerprint(const kv::KvLayout& layout, const std::string& model_hash,
                                        std::string_view device, kernels::CpuMath cpu_math);

}  // namespace tandem::rpc

#endif  // TANDEM_COMMON_RPC_ENGINE_CONVERT_H_
