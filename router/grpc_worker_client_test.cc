#include "router/grpc_worker_client.h"

#include "common/util/field_error.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tandem::router {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// A worker's refusal of the request names the client's field and no address.
TEST(FromWorker, ARefusalKeepsTheClientsFieldAndNoAddress) {
  const absl::Status ignore_eos =
      FromWorker(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                              "ignore_eos: cannot be combined with a grammar"),
                 "prefill", "10.0.3.7:50052");
  EXPECT_EQ(ignore_eos.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ErrorField(ignore_eos), "ignore_eos");
  EXPECT_EQ(ignore_eos.message(), "ignore_eos: cannot be combined with a grammar");

  const absl::Status bias = FromWorker(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                                    "params.logit_bias_values: 1 values for 2 ids"),
                                       "decode", "127.0.0.1:41000");
  EXPECT_EQ(ErrorField(bias), "logit_bias");
  const absl::Status prompt = FromWorker(
      grpc::Status(grpc::StatusCode::OUT_OF_RANGE, "prompt: token 70000 is outside the vocabulary"),
      "prefill", "127.0.0.1:41000");
  EXPECT_EQ(prompt.code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(ErrorField(prompt), "prompt");
  // A field of the worker protocol that only the router fills: the router's fault.
  const absl::Status internal =
      FromWorker(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                              "destination.block_ids: 0 blocks for a 5-token prompt that needs 1"),
                 "prefill", "127.0.0.1:41000");
  EXPECT_EQ(internal.code(), absl::StatusCode::kInternal);
  EXPECT_FALSE(ErrorField(internal).has_value());
}

// Any other failure names the call, never a host:port (v4, v6 or a name).
TEST(FromWorker, AddressesNeverReachTheMessage) {
  for (const char* where : {"10.0.3.7:50052", "[fd00::1]:50052", "decode-0.tandem-decode:50052",
                            "localhost:1234", "proj_decode_1:50052"}) {
    SCOPED_TRACE(where);
    const absl::Status st =
        FromWorker(grpc::Status(grpc::StatusCode::UNAVAILABLE,
                                std::string("KV transfer to ") + where + " broke"),
                   "prefill", where);
    EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable);
    EXPECT_EQ(st.message(), "prefill: KV transfer to (a worker) broke");
    EXPECT_FALSE(ErrorField(st).has_value());
  }
  const absl::Status plain =
      FromWorker(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "bad request from 1.2.3.4:5"),
                 "decode", "1.2.3.4:5");
  EXPECT_THAT(std::string(plain.message()), Not(HasSubstr("1.2.3.4")));
  EXPECT_FALSE(ErrorField(plain).has_value());
  // Times and ratios are not addresses.
  EXPECT_EQ(FromWorker(grpc::Status(grpc::StatusCode::INTERNAL, "stalled at 12:30, ratio 3:1"),
                       "decode", "x")
                .message(),
            "decode: stalled at 12:30, ratio 3:1");
}

// A worker's message of any size costs the router a linear pass over its first 4 KiB.
TEST(FromWorker, AHugeMessageIsCutNotChokedOn) {
  const std::string huge =
      "grammar: " + std::string(100000, 'a') + ":1 " + std::string(100000, ':');
  const absl::Status st =
      FromWorker(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, huge), "decode", "h:1");
  EXPECT_EQ(ErrorField(st), "grammar");
  EXPECT_LE(st.message().size(), 4200u);
}

}  // namespace
}  // namespace tandem::router
