// KV layout fingerprints compared: what a prefill worker and a decode worker must share
// for a block written by one to mean the same bytes to the other. Proto only, no
// engine: the workers check each transfer with it, the router each pair it would make
// (router/worker_pool.h). Fingerprints are made on the workers' side
// (engine_convert.h MakeFingerprint).
#ifndef TANDEM_COMMON_RPC_KV_FINGERPRINT_H_
#define TANDEM_COMMON_RPC_KV_FINGERPRINT_H_

#include <string_view>

#include "absl/status/status.h"
#include "tandem/v1/kv_transfer.pb.h"

namespace tandem::rpc {

// FailedPrecondition naming the first field where `theirs` differs from `ours`
// ("KV layout mismatch: block_size is 16 here and 32 there", with `here` and `there`
// as given); an empty cpu_math reads "exact".
absl::Status CheckFingerprint(const v1::KvLayoutFingerprint& ours,
                              const v1::KvLayoutFingerprint& theirs, std::string_view here = "here",
                              std::string_view there = "there");

}  // namespace tandem::rpc

#endif  // TANDEM_COMMON_RPC_KV_FINGERPRINT_H_
