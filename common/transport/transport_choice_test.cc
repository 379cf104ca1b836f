// The transport choice at the KV handshake: every pairing of devices and policies the
// issue names, and a refusal that says why.
#include "common/transport/transport_choice.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tandem::transport {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using K = TransportKind;

const KvDevice kCpu{"cpu", "", ""};
const KvDevice kGpuA{"cuda", "aa", ""};
const KvDevice kGpuA2{"cuda", "aa", ""};  // another process on the same GPU
const KvDevice kGpuB{"cuda", "bb", ""};

TransportPolicy Policy(std::string_view flag) { return *ParseTransportPolicy(flag); }

TEST(TransportChoice, OffersFollowTheDeviceAndTheFlag) {
  EXPECT_THAT(Offered(kGpuA, Policy("auto"), true), ElementsAre(K::kCudaIpc, K::kNccl, K::kHost));
  EXPECT_THAT(Offered(kGpuA, Policy("auto"), false), ElementsAre(K::kHost));  // no NCCL built
  EXPECT_THAT(Offered(kCpu, Policy("auto"), true), ElementsAre(K::kHost));
  EXPECT_THAT(Offered(kGpuA, Policy("nccl"), true), ElementsAre(K::kNccl));
  EXPECT_THAT(Offered(kGpuA, Policy("host"), true), ElementsAre(K::kHost));
  EXPECT_TRUE(Offered(kCpu, Policy("cuda-ipc"), true).empty());
  EXPECT_EQ(ParseTransportPolicy("rdma").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(TransportChoice, OneGpuTakesCudaIpcTwoGpusNcclOtherwiseHost) {
  const auto all = Offered(kGpuA, Policy("auto"), true);
  EXPECT_EQ(*ChooseTransport(all, kGpuA, all, kGpuA2), K::kCudaIpc);
  EXPECT_EQ(*ChooseTransport(all, kGpuA, all, kGpuB), K::kNccl);
  EXPECT_EQ(*ChooseTransport(all, kGpuA, {K::kHost}, kCpu), K::kHost);
  EXPECT_EQ(*ChooseTransport({K::kHost}, kCpu, all, kGpuA), K::kHost);
  // A decode worker that only takes NCCL, from a prefill worker on the same GPU: NCCL
  // cannot pair two ranks on one device, and that is what the refusal says.
  auto same = ChooseTransport(all, kGpuA, {K::kNccl}, kGpuA2);
  EXPECT_EQ(same.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(same.status().message(), HasSubstr("nccl cannot pair two ranks on one GPU"));
  // Forced to NCCL on one side, host on the other: nothing in common, both lists named.
  auto none = ChooseTransport({K::kNccl}, kGpuA, {K::kHost}, kGpuB);
  EXPECT_EQ(none.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(none.status().message(), HasSubstr("offers nccl"));
  EXPECT_THAT(none.status().message(), HasSubstr("accepts host"));
  auto ipc_apart = ChooseTransport({K::kCudaIpc}, kGpuA, {K::kCudaIpc}, kGpuB);
  EXPECT_THAT(ipc_apart.status().message(), HasSubstr("cuda-ipc needs both on one GPU"));
  auto nccl_host = ChooseTransport({K::kNccl}, kGpuA, {K::kNccl, K::kHost}, kCpu);
  EXPECT_THAT(nccl_host.status().message(), HasSubstr("nccl needs both on GPUs"));
}

// Two processes on one GPU pair over NCCL only when each names another NCCL_HOSTID (the
// test-only arrangement NCCL accepts); one name, or the same on both, is still refused.
TEST(TransportChoice, NcclOnOneGpuNeedsTwoNcclHostIds) {
  const KvDevice p{"cuda", "aa", "tandem-prefill"}, d{"cuda", "aa", "tandem-decode"};
  EXPECT_EQ(*ChooseTransport({K::kNccl}, p, {K::kNccl}, d), K::kNccl);
  // Left to choose, the pair still takes CUDA IPC.
  const auto all = Offered(p, Policy("auto"), true);
  EXPECT_EQ(*ChooseTransport(all, p, all, d), K::kCudaIpc);
  for (const KvDevice& other : {KvDevice{"cuda", "aa", "tandem-prefill"}, kGpuA2}) {
    auto refused = ChooseTransport({K::kNccl}, p, {K::kNccl}, other);
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(refused.status().message(), HasSubstr("NCCL_HOSTID"));
  }
}

}  // namespace
}  // namespace tandem::transport
