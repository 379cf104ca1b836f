#include "tests/cluster_harness.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include "common/rpc/router_probe.h"
#include "common/rpc/rpc_server.h"
#include "common/util/strings.h"
#include "tests/test_paths.h"

namespace tandem::testing {

namespace {
using Clock = std::chrono::steady_clock;
constexpr auto kStartTimeout = std::chrono::seconds(60);

std::string Bin(const std::string& name) {
  const char* dir = std::getenv("TANDEM_BIN_DIR");
  return StrCat(dir != nullptr && *dir != '\0' ? dir : TANDEM_BIN_DIR, "/", name);
}
}  // namespace

std::unique_ptr<Cluster> Cluster::Start(const ClusterConfig& config, std::string* error) {
  std::unique_ptr<Cluster> c(new Cluster());
  char tmpl[] = "/tmp/tandem-cluster-test-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) {
    *error = "mkdtemp failed";
    return nullptr;
  }
  c->dir_ = tmpl;
  const std::string model = config.model.empty() ? DefaultModelPath() : config.model;
  const std::string device =
      config.device.empty() ? ::tandem::testing::TestDevice() : config.device;
  auto start_worker = [&](const std::string& role, int i,
                          int64_t kv_bytes) -> std::unique_ptr<Proc> {
    auto p = std::make_unique<Proc>();
    const std::string port_file = StrCat(c->dir_, "/", role, i, ".port");
    std::vector<std::string> args = {Bin(StrCat("tandem-", role, "-worker")),
                                     "--model",
                                     model,
                                     "--port-file",
                                     port_file,
                                     "--threads",
                                     std::to_string(config.threads),
                                     "--kv-cache-bytes",
                                     std::to_string(kv_bytes),
                                     "--device",
                                     device};
    const auto& extra = role == "prefill" ? config.prefill_flags : config.decode_flags;
    args.insert(args.end(), extra.begin(), extra.end());
    const auto& env = role == "prefill" ? config.prefill_env : config.decode_env;
    if (!env.empty()) {  // through env(1), which execs the worker in its place
      std::vector<std::string> with_env = {"/usr/bin/env"};
      with_env.insert(with_env.end(), env.begin(), env.end());
      args.insert(args.begin(), with_env.begin(), with_env.end());
    }
    p->process.Start(args, StrCat(c->dir_, "/", role, i, ".log"));
    p->port = WaitForPortFile(port_file, &p->process, kStartTimeout);
    if (p->port == 0) *error = StrCat(role, " worker ", i, " did not start; log in ", c->dir_);
    return p;
  };
  std::vector<std::string> prefill_addrs, decode_addrs;
  for (int i = 0; i < config.prefill; ++i) {
    c->prefill_.push_back(start_worker("prefill", i, config.prefill_kv_bytes));
    if (c->prefill_.back()->port == 0) return nullptr;
    prefill_addrs.push_back(c->address(kPrefill, i));
    c->prefill_stubs_.push_back(v1::PrefillWorker::NewStub(rpc::MakeChannel(prefill_addrs.back())));
  }
  for (int i = 0; i < config.decode; ++i) {
    c->decode_.push_back(start_worker("decode", i, config.decode_kv_bytes));
    if (c->decode_.back()->port == 0) return nullptr;
    decode_addrs.push_back(c->address(kDecode, i));
    auto channel = rpc::MakeChannel(decode_addrs.back());
    c->decode_stubs_.push_back(v1::DecodeWorker::NewStub(channel));
    c->kv_stubs_.push_back(v1::KvTransfer::NewStub(channel));
  }
  c->router_ = std::make_unique<Proc>();
  std::vector<std::string> args = {Bin("tandem-router"),
                                   "--model",
                                   model,
                                   "--port",
                                   "0",
                                   "--port-file",
                                   c->dir_ + "/router.port",
                                   "--prefill",
                                   Join(prefill_addrs, ","),
                                   "--decode",
                                   Join(decode_addrs, ","),
                                   "--health-poll-ms",
                                   "200"};
  // Every prompt disaggregated unless a test asks otherwise: these tests are about the
  // prefill → decode path, whatever tandem-router's default.
  if (std::find(config.router_flags.begin(), config.router_flags.end(), "--disagg-min-tokens") ==
      config.router_flags.end()) {
    args.insert(args.end(), {"--disagg-min-tokens", "0"});
  }
  args.insert(args.end(), config.router_flags.begin(), config.router_flags.end());
  c->router_->process.Start(args, c->dir_ + "/router.log");
  c->router_->port = WaitForPortFile(c->dir_ + "/router.port", &c->router_->process, kStartTimeout);
  if (c->router_->port == 0) {
    *error = "router did not start; log in " + c->dir_;
    return nullptr;
  }
  c->endpoint_ = StrCat("127.0.0.1:", c->router_->port);
  auto channel = rpc::MakeChannel(c->endpoint_);
  c->generation_ = v1::Generation::NewStub(channel);
  if (!rpc::WaitForRouterReady(c->endpoint_, kStartTimeout, config.wait_until_ready)) {
    *error = "the router never saw every worker healthy; logs in " + c->dir_;
    return nullptr;
  }
  return c;
}

Cluster::~Cluster() {
  if (router_ != nullptr) router_->process.Stop(std::chrono::seconds(15));
  for (auto& p : prefill_) p->process.Stop(std::chrono::seconds(5));
  for (auto& p : decode_) p->process.Stop(std::chrono::seconds(5));
  if (std::getenv("TANDEM_KEEP_LOGS") == nullptr) {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
}

std::string Cluster::address(Role role, int i) const {
  return StrCat("127.0.0.1:", proc(role, i)->port);
}

bool Cluster::alive(Role role, int i) const { return proc(role, i)->process.running(); }

void Cluster::Kill(Role role, int i) {
  Proc* p = proc(role, i);
  p->process.Signal(SIGKILL);
  p->process.Wait(std::chrono::seconds(5));
}

void Cluster::Signal(Role role, int i, int sig) { proc(role, i)->process.Signal(sig); }

bool Cluster::Stats(Role role, int i, v1::WorkerStats* out) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
  v1::GetWorkerStatsRequest req;
  const grpc::Status s = role == kPrefill ? prefill_stubs_[i]->GetWorkerStats(&ctx, req, out)
                                          : decode_stubs_[i]->GetWorkerStats(&ctx, req, out);
  return s.ok();
}

std::string Cluster::WaitForBaseline(std::chrono::milliseconds timeout) {
  const auto until = Clock::now() + timeout;
  std::string held;
  do {
    held.clear();
    for (Role role : {kPrefill, kDecode}) {
      const int n = static_cast<int>(role == kPrefill ? prefill_.size() : decode_.size());
      for (int i = 0; i < n; ++i) {
        if (!alive(role, i)) continue;
        v1::WorkerStats s;
        if (!Stats(role, i, &s)) {
          held += StrCat(address(role, i), " did not answer; ");
          continue;
        }
        if (s.free_blocks() + s.cached_blocks() != s.num_blocks() || s.reserved() != 0 ||
            s.running() != 0 || s.waiting() != 0) {
          held += StrCat(role == kPrefill ? "prefill " : "decode ", i, ": ",
                         s.num_blocks() - s.free_blocks() - s.cached_blocks(), " blocks held, ",
                         s.reserved(), " reservations, ", s.running(), " running, ", s.waiting(),
                         " waiting; ");
        }
      }
    }
    if (held.empty()) return "";
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  } while (Clock::now() < until);
  return held;
}

GenerateResult Generate(v1::Generation::Stub* stub, const v1::GenerateRequest& req,
                        std::chrono::milliseconds timeout,
                        const std::function<void(int, grpc::ClientContext*)>& on_chunk) {
  GenerateResult r;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + timeout);
  auto reader = stub->Generate(&ctx, req);
  v1::GenerateResponse msg;
  while (reader->Read(&msg)) {
    if (msg.has_chunk()) {
      r.chunk_times.push_back(Clock::now());
      r.token_ids.insert(r.token_ids.end(), msg.chunk().token_ids().begin(),
                         msg.chunk().token_ids().end());
      r.text += msg.chunk().text();
      if (on_chunk) on_chunk(r.chunks, &ctx);
      ++r.chunks;
    } else if (msg.has_complete()) {
      r.completed = true;
      r.complete = msg.complete();
    }
  }
  r.status = reader->Finish();
  r.end = Clock::now();
  return r;
}

}  // namespace tandem::testing
