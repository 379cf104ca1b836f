// RpcServer's API key: one check before any handler, health and reflection left open.
#include "common/rpc/rpc_server.h"

#include <grpcpp/generic/generic_stub.h>

#include <atomic>

#include "grpc/health/v1/health.grpc.pb.h"
#include "gtest/gtest.h"
#include "tandem/v1/worker.grpc.pb.h"

namespace tandem::rpc {
namespace {

constexpr char kKey[] = "s3cret-key";

// Counts the calls that reach it.
class CountingService : public v1::PrefillWorker::Service {
 public:
  grpc::Status GetWorkerStats(grpc::ServerContext*, const v1::GetWorkerStatsRequest*,
                              v1::WorkerStats* resp) override {
    ++calls;
    resp->set_num_blocks(7);
    return grpc::Status::OK;
  }
  std::atomic<int> calls{0};
};

class RpcServerKeyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto s = RpcServer::Start("127.0.0.1:0", {&service_}, {"tandem.v1.PrefillWorker"}, {}, kKey);
    ASSERT_TRUE(s.ok()) << s.status();
    server_ = *std::move(s);
    address_ = "127.0.0.1:" + std::to_string(server_->port());
  }
  void TearDown() override { server_->Shutdown(std::chrono::milliseconds(100)); }

  grpc::Status Stats(const std::string& key, v1::WorkerStats* out) {
    auto stub = v1::PrefillWorker::NewStub(MakeChannel(address_, key));
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    return stub->GetWorkerStats(&ctx, v1::GetWorkerStatsRequest(), out);
  }

  CountingService service_;
  std::unique_ptr<RpcServer> server_;
  std::string address_;
};

TEST_F(RpcServerKeyTest, ACallWithoutTheKeyNeverReachesItsHandler) {
  v1::WorkerStats stats;
  for (const std::string& key : {std::string(), std::string("wrong"), std::string(kKey) + "x"}) {
    const grpc::Status st = Stats(key, &stats);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAUTHENTICATED) << "key '" << key << "'";
    EXPECT_NE(st.error_message().find("API key"), std::string::npos) << st.error_message();
  }
  EXPECT_EQ(service_.calls.load(), 0);
  const grpc::Status ok = Stats(kKey, &stats);
  ASSERT_TRUE(ok.ok()) << ok.error_message();
  EXPECT_EQ(stats.num_blocks(), 7);
  EXPECT_EQ(service_.calls.load(), 1);
}

TEST_F(RpcServerKeyTest, HealthAndReflectionStayOpenForProbes) {
  auto channel = MakeChannel(address_);  // no key
  auto health = grpc::health::v1::Health::NewStub(channel);
  grpc::ClientContext hctx;
  grpc::health::v1::HealthCheckResponse hresp;
  const grpc::Status hs = health->Check(&hctx, grpc::health::v1::HealthCheckRequest(), &hresp);
  ASSERT_TRUE(hs.ok()) << hs.error_message();
  EXPECT_EQ(hresp.status(), grpc::health::v1::HealthCheckResponse::SERVING);

  // Reflection's one method, called generically: ServerReflectionRequest{list_services: ""}
  // is field 7, an empty string.
  grpc::CompletionQueue cq;
  grpc::GenericStub stub(channel);
  grpc::ClientContext rctx;
  rctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  auto call = stub.PrepareCall(
      &rctx, "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo", &cq);
  auto step = [&](int tag) {
    void* got = nullptr;
    bool ok = false;
    EXPECT_TRUE(cq.Next(&got, &ok));
    EXPECT_EQ(got, reinterpret_cast<void*>(tag));
    return ok;
  };
  call->StartCall(reinterpret_cast<void*>(1));
  ASSERT_TRUE(step(1));
  const char request[] = {0x3a, 0x00};
  grpc::Slice slice(request, sizeof(request));
  grpc::ByteBuffer out(&slice, 1);
  call->Write(out, reinterpret_cast<void*>(2));
  ASSERT_TRUE(step(2));
  call->WritesDone(reinterpret_cast<void*>(3));
  ASSERT_TRUE(step(3));
  grpc::ByteBuffer in;
  call->Read(&in, reinterpret_cast<void*>(4));
  EXPECT_TRUE(step(4));  // an answer came back
  std::vector<grpc::Slice> slices;
  ASSERT_TRUE(in.Dump(&slices).ok());
  std::string answer;
  for (const grpc::Slice& s : slices)
    answer.append(reinterpret_cast<const char*>(s.begin()), s.size());
  EXPECT_NE(answer.find("tandem.v1.PrefillWorker"), std::string::npos);
  grpc::Status st;
  call->Finish(&st, reinterpret_cast<void*>(5));
  step(5);
  EXPECT_TRUE(st.ok()) << st.error_code() << " " << st.error_message();
  cq.Shutdown();
  void* tag;
  bool ok;
  while (cq.Next(&tag, &ok)) {
  }
}

TEST(RpcServer, WithoutAKeyEveryCallIsServed) {
  CountingService service;
  auto s = RpcServer::Start("127.0.0.1:0", {&service}, {});
  ASSERT_TRUE(s.ok()) << s.status();
  auto stub = v1::PrefillWorker::NewStub(MakeChannel("127.0.0.1:" + std::to_string((*s)->port())));
  grpc::ClientContext ctx;
  v1::WorkerStats stats;
  EXPECT_TRUE(stub->GetWorkerStats(&ctx, v1::GetWorkerStatsRequest(), &stats).ok());
  EXPECT_EQ(service.calls.load(), 1);
  (*s)->Shutdown(std::chrono::milliseconds(100));
}

}  // namespace
}  // namespace tandem::rpc
