#include "common/rpc/router_probe.h"

#include <thread>

#include "common/rpc/rpc_server.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "tandem/v1/generation.grpc.pb.h"

namespace tandem::rpc {

namespace {

std::chrono::system_clock::time_point InOneSecond() {
  return std::chrono::system_clock::now() + std::chrono::seconds(1);
}

}  // namespace

bool WaitForRouterReady(const std::string& address, std::chrono::milliseconds timeout,
                        bool serving) {
  auto channel = MakeChannel(address);
  auto health = grpc::health::v1::Health::NewStub(channel);
  auto generation = v1::Generation::NewStub(channel);
  auto ready = [&] {
    grpc::health::v1::HealthCheckRequest hreq;
    hreq.set_service("tandem.v1.Generation");
    grpc::health::v1::HealthCheckResponse hresp;
    grpc::ClientContext hctx;
    hctx.set_deadline(InOneSecond());
    if (serving && (!health->Check(&hctx, hreq, &hresp).ok() ||
                    hresp.status() != grpc::health::v1::HealthCheckResponse::SERVING)) {
      return false;
    }
    v1::GetServerInfoRequest req;
    v1::GetServerInfoResponse info;
    grpc::ClientContext ctx;
    ctx.set_deadline(InOneSecond());
    if (!generation->GetServerInfo(&ctx, req, &info).ok()) return false;
    for (const auto& w : info.prefill_workers())
      if (!w.healthy()) return false;
    for (const auto& w : info.decode_workers())
      if (!w.healthy()) return false;
    return true;
  };
  const auto until = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < until) {
    if (ready()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

}  // namespace tandem::rpc
