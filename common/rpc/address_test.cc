#include "common/rpc/address.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tandem::rpc {
namespace {

using ::testing::HasSubstr;

TEST(SplitHostPort, TakesHostAndPortApartAndUnbracketsIpv6) {
  std::string host, port;
  ASSERT_TRUE(SplitHostPort("decode-0.tandem:50052", &host, &port));
  EXPECT_EQ(host, "decode-0.tandem");
  EXPECT_EQ(port, "50052");
  ASSERT_TRUE(SplitHostPort("[fe80::1]:7", &host, &port));
  EXPECT_EQ(host, "fe80::1");
  EXPECT_EQ(port, "7");
  EXPECT_FALSE(SplitHostPort("decode-0", &host, &port));
  EXPECT_FALSE(SplitHostPort("decode-0:", &host, &port));
  EXPECT_FALSE(SplitHostPort(":50052", &host, &port));
}

TEST(IsIpLiteral, KnowsAddressesFromNames) {
  EXPECT_TRUE(IsIpLiteral("10.0.0.7"));
  EXPECT_TRUE(IsIpLiteral("::1"));
  EXPECT_FALSE(IsIpLiteral("localhost"));
  EXPECT_FALSE(IsIpLiteral("10.0.0.256"));
}

TEST(CheckAddress, AcceptsWhatARouterSends) {
  for (const char* a : {"127.0.0.1:50052", "10.244.3.17:9000", "[::1]:65535", "[fd00::a:1]:80"}) {
    EXPECT_TRUE(CheckAddress(a, "destination.address").ok()) << a;
  }
}

TEST(CheckAddress, RefusesWhatGrpcWouldMisreadOrRefuseLate) {
  // Each of these reached gRPC before: "" was answered UNKNOWN at channel creation, and
  // port 99999 silently became 34463 (found by prefill_service_fuzzer).
  const std::string with_nul("127.0.0.1\0:5", 12);
  for (const std::string& a :
       {std::string(), std::string(":"), std::string("127.0.0.1"), std::string("127.0.0.1:"),
        std::string("127.0.0.1:99999"), std::string("127.0.0.1:0"), std::string("127.0.0.1:-5"),
        std::string("127.0.0.1:0x50"), std::string("[::1"), std::string("[::1]"),
        std::string("[nope]:80"), std::string("ipv4:127.0.0.1:80"), std::string("unix:/tmp/s"),
        std::string("a,b:80"), std::string("host name:80"), std::string("\x01\xff:80"), with_nul,
        // gRPC URI schemes that look like host:port (found in review).
        std::string("unix:80"), std::string("unix-abstract:80"), std::string("dns:1234"),
        std::string("vsock:2"), std::string("IPv4:80"), std::string(300, 'a') + ":80",
        // Names: resolving them would be a DNS lookup on a request's word (issue #41).
        std::string("decode-1.decode.tandem.svc:9000"), std::string("localhost:1"),
        std::string("my_host-2:80"), std::string("1.2.3:80"), std::string("10.0.0.256:80")}) {
    const absl::Status st = CheckAddress(a, "destination.address");
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << a;
    EXPECT_THAT(st.message(), HasSubstr("destination.address")) << a;
  }
}

TEST(CheckAddress, ShowsTheAddressEscaped) {
  const absl::Status st = CheckAddress("\x01\xff:80", "destination.address");
  EXPECT_THAT(st.message(), HasSubstr("\\x01\\xff:80"));
}

}  // namespace
}  // namespace tandem::rpc
