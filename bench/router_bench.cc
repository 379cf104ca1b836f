// router_bench: how many concurrent streams one tandem-router carries, and at what
// cost, with fake workers that have no model (issue #17).
//
// This process serves a fake prefill worker (answers at once) and a fake decode worker
// (one token per stream every --interval-ms, --tokens tokens) over gRPC, starts the
// router binary given against them, and opens --streams concurrent Generate streams to
// it. It reports the router process's threads (idle and most seen), CPU time per
// token, resident memory per stream, how many streams completed, and the latency the
// path added to each token: token k of a stream is due (k − 1)·interval after its first
// decoded token; its lateness less the stream's smallest lateness is what queueing in
// the router and the client added (the fake's own tick lateness is reported beside it).
// "Transit" is measured directly: the fake and the client share this process's clock,
// so each decoded token's arrival at the client less the moment the fake queued it is
// the whole path's latency (two gRPC hops, the router, the client's own scheduling),
// without the fake's tick lateness.
//
//   router_bench --router build/bin/tandem-router --model models/...gguf --streams 4000
#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <cinttypes>
#include <cstdio>
#include <fstream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>
#include <vector>

#include "common/rpc/rpc_server.h"
#include "common/rpc/stream_outbox.h"
#include "common/util/strings.h"
#include "common/util/subprocess.h"
#include "tandem/v1/generation.grpc.pb.h"
#include "tandem/v1/worker.grpc.pb.h"

namespace tandem {
namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// --- The fake workers ---

v1::WorkerStats FakeStats() {
  v1::WorkerStats s;
  s.set_num_blocks(1 << 22);
  s.set_block_size(16);
  s.set_free_blocks(1 << 22);
  return s;
}

// Finishes a unary call OK.
grpc::ServerUnaryReactor* Ok(grpc::CallbackServerContext* ctx) {
  auto* r = ctx->DefaultReactor();
  r->Finish(grpc::Status::OK);
  return r;
}

class FakePrefill : public v1::PrefillWorker::CallbackService {
 public:
  grpc::ServerUnaryReactor* Prefill(grpc::CallbackServerContext* ctx, const v1::PrefillRequest*,
                                    v1::PrefillResponse* resp) override {
    resp->set_first_token_id(1000);
    return Ok(ctx);
  }
  grpc::ServerUnaryReactor* GetWorkerStats(grpc::CallbackServerContext* ctx,
                                           const v1::GetWorkerStatsRequest*,
                                           v1::WorkerStats* resp) override {
    *resp = FakeStats();
    return Ok(ctx);
  }
};

bool MergeTokens(v1::DecodeResponse* into, const v1::DecodeResponse& next) {
  into->mutable_token_ids()->MergeFrom(next.token_ids());
  into->set_finish_reason(next.finish_reason());
  return true;
}

class FakeDecode : public v1::DecodeWorker::CallbackService {
 public:
  explicit FakeDecode(std::chrono::microseconds interval)
      : interval_(interval), ticker_([this] { Tick(); }) {}
  ~FakeDecode() override {
    stop_ = true;
    ticker_.join();
  }

  grpc::ServerUnaryReactor* Reserve(grpc::CallbackServerContext* ctx, const v1::ReserveRequest* req,
                                    v1::ReserveResponse* resp) override {
    resp->set_lease_id(++lease_);
    for (int i = 0; i < (req->num_tokens() + 15) / 16; ++i) resp->add_block_ids(i);
    return Ok(ctx);
  }
  grpc::ServerUnaryReactor* Release(grpc::CallbackServerContext* ctx, const v1::ReleaseRequest*,
                                    v1::ReleaseResponse*) override {
    return Ok(ctx);
  }
  grpc::ServerUnaryReactor* GetWorkerStats(grpc::CallbackServerContext* ctx,
                                           const v1::GetWorkerStatsRequest*,
                                           v1::WorkerStats* resp) override {
    *resp = FakeStats();
    return Ok(ctx);
  }
  grpc::ServerWriteReactor<v1::DecodeResponse>* Decode(grpc::CallbackServerContext*,
                                                       const v1::DecodeRequest* req) override {
    auto* reactor = new Reactor;
    auto s = std::make_shared<Stream>();
    s->outbox = std::make_shared<rpc::StreamOutbox<v1::DecodeResponse>>(reactor, &MergeTokens);
    s->remaining = std::max(0, req->params().max_tokens() - 1);
    s->request_id = req->request_id();
    reactor->stream = s;
    if (s->remaining == 0) {
      s->outbox->End(grpc::Status::OK);
      return reactor;
    }
    std::lock_guard<std::mutex> lock(mu_);
    s->due = Clock::now() + interval_;
    streams_.push_back(std::move(s));
    return reactor;
  }

  // How late the fake itself sent each token, seconds.
  std::vector<double> TakeLateness() {
    std::lock_guard<std::mutex> lock(mu_);
    return std::move(lateness_);
  }
  // request id → when each decoded token was queued for sending.
  std::map<std::string, std::vector<Clock::time_point>> TakeSent() {
    std::lock_guard<std::mutex> lock(mu_);
    return std::move(sent_);
  }

 private:
  // One stream's schedule. The reactor deletes itself when the call ends; the outbox
  // never touches it after that.
  struct Stream {
    std::shared_ptr<rpc::StreamOutbox<v1::DecodeResponse>> outbox;
    std::atomic<bool> gone{false};
    int remaining = 0;
    int32_t next_token = 1001;
    Clock::time_point due;
    std::string request_id;
    std::vector<Clock::time_point> sent;
  };
  struct Reactor : grpc::ServerWriteReactor<v1::DecodeResponse> {
    void OnWriteDone(bool ok) override { stream->outbox->WriteDone(ok); }
    void OnCancel() override {
      stream->gone = true;
      stream->outbox->End(grpc::Status(grpc::StatusCode::CANCELLED, "cancelled"));
    }
    void OnDone() override { delete this; }
    std::shared_ptr<Stream> stream;
  };

  // Every 0.5 ms: each stream's tokens that are due, then its end.
  void Tick() {
    while (!stop_) {
      std::this_thread::sleep_for(500us);
      const auto now = Clock::now();
      std::lock_guard<std::mutex> lock(mu_);
      for (size_t i = 0; i < streams_.size();) {
        Stream& s = *streams_[i];
        while (!s.gone && s.remaining > 0 && s.due <= now) {
          v1::DecodeResponse msg;
          msg.add_token_ids(s.next_token++);
          if (--s.remaining == 0) msg.set_finish_reason(v1::WORKER_FINISH_REASON_LENGTH);
          lateness_.push_back(Seconds(now - s.due));
          s.due += interval_;
          s.sent.push_back(Clock::now());
          s.outbox->Push(std::move(msg));
        }
        if (s.gone || s.remaining == 0) {
          s.outbox->End(grpc::Status::OK);
          sent_[s.request_id] = std::move(s.sent);
          streams_[i] = std::move(streams_.back());
          streams_.pop_back();
        } else {
          ++i;
        }
      }
    }
  }

  const std::chrono::microseconds interval_;
  std::atomic<uint64_t> lease_{0};
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::vector<std::shared_ptr<Stream>> streams_;
  std::vector<double> lateness_;
  std::map<std::string, std::vector<Clock::time_point>> sent_;
  std::thread ticker_;
};

// --- The client ---

// One Generate stream: when each token arrived.
class ClientStream : public grpc::ClientReadReactor<v1::GenerateResponse> {
 public:
  ClientStream(v1::Generation::Stub* stub, const v1::GenerateRequest& req, std::string id,
               std::atomic<int>* open)
      : id(std::move(id)), req_(req), open_(open) {
    req_.set_request_id(this->id);
    ctx_.set_deadline(std::chrono::system_clock::now() + std::chrono::minutes(10));
    stub->async()->Generate(&ctx_, &req_, this);
    StartRead(&msg_);
    StartCall();
  }
  void OnReadDone(bool ok) override {
    if (!ok) return;
    if (msg_.has_chunk()) {
      const auto now = Clock::now();
      for (int i = 0; i < msg_.chunk().token_ids_size(); ++i) arrivals.push_back(now);
    }
    if (msg_.has_complete()) completed = true;
    StartRead(&msg_);
  }
  void OnDone(const grpc::Status& s) override {
    status = s;
    done = true;
    --*open_;
  }

  const std::string id;
  std::vector<Clock::time_point> arrivals;
  bool completed = false;
  std::atomic<bool> done{false};
  grpc::Status status;

 private:
  grpc::ClientContext ctx_;
  v1::GenerateRequest req_;
  v1::GenerateResponse msg_;
  std::atomic<int>* open_;
};

// --- The router process ---

struct ProcSample {
  int threads = 0;
  int64_t rss_kb = 0;
  double cpu_s = 0;  // user + system
};

ProcSample Sample(pid_t pid) {
  ProcSample out;
  std::ifstream status(StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("Threads:", 0) == 0) out.threads = std::stoi(line.substr(8));
    if (line.rfind("VmRSS:", 0) == 0) out.rss_kb = std::stoll(line.substr(6));
  }
  std::ifstream stat(StrCat("/proc/", pid, "/stat"));
  std::string all((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  const size_t close = all.rfind(')');
  if (close != std::string::npos) {
    std::istringstream rest(all.substr(close + 2));
    std::string field;
    uint64_t utime = 0, stime = 0;
    for (int i = 3; i <= 15 && rest >> field; ++i) {
      if (i == 14) utime = std::stoull(field);
      if (i == 15) stime = std::stoull(field);
    }
    out.cpu_s = static_cast<double>(utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
  }
  return out;
}

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())))];
}

int Main(int argc, char** argv) {
  CLI::App app{"router_bench — one router, fake workers, many streams"};
  std::string router_bin, model, log = "/tmp/router_bench.log";
  int streams = 4000, tokens = 64, prompt = 16;
  double interval_ms = 100, ramp_s = 2;
  app.add_option("--router", router_bin, "The tandem-router binary")->required();
  app.add_option("--model", model, "GGUF the router tokenizes with")->required();
  app.add_option("--streams", streams, "Concurrent Generate streams")->capture_default_str();
  app.add_option("--tokens", tokens, "Tokens per stream (max_tokens)")->capture_default_str();
  app.add_option("--prompt", prompt, "Prompt tokens")->capture_default_str();
  app.add_option("--interval-ms", interval_ms, "Fake decode: time between tokens")
      ->capture_default_str();
  app.add_option("--ramp-s", ramp_s, "Open the streams evenly over this long")
      ->capture_default_str();
  app.add_option("--log", log, "The router's stderr")->capture_default_str();
  std::string router_cpus;
  app.add_option("--router-cpus", router_cpus,
                 "Pin the router to these CPUs (taskset list, e.g. 0); run this process on "
                 "the others (taskset -c 1 router_bench ...) so that neither slows the other");
  CLI11_PARSE(app, argc, argv);

  FakePrefill prefill;
  FakeDecode decode(std::chrono::microseconds(static_cast<int64_t>(interval_ms * 1000)));
  auto server = rpc::RpcServer::Start("127.0.0.1:0", {&prefill, &decode},
                                      {"tandem.v1.PrefillWorker", "tandem.v1.DecodeWorker"});
  if (!server.ok()) {
    std::fprintf(stderr, "router_bench: %s\n", server.status().ToString().c_str());
    return 1;
  }
  (*server)->SetReady(true);
  const std::string workers = StrCat("127.0.0.1:", (*server)->port());
  const std::string port_file = StrCat("/tmp/router_bench.", getpid(), ".port");
  const std::string ready_file = StrCat("/tmp/router_bench.", getpid(), ".ready");
  Subprocess router;
  std::vector<std::string> cmd;
  if (!router_cpus.empty()) cmd = {"/usr/bin/taskset", "-c", router_cpus};
  const std::vector<std::string> router_args = {router_bin,   "--model",
                                                model,        "--prefill",
                                                workers,      "--decode",
                                                workers,      "--port-file",
                                                port_file,    "--ready-file",
                                                ready_file,   "--max-queued-requests",
                                                "1000000",    "--max-queued-tokens",
                                                "1000000000", "--max-prefill-tokens-in-flight",
                                                "1000000000"};
  cmd.insert(cmd.end(), router_args.begin(), router_args.end());
  if (!router.Start(cmd, log)) {
    std::fprintf(stderr, "router_bench: cannot start %s\n", router_bin.c_str());
    return 1;
  }
  const int port = WaitForPortFile(port_file, &router, 60s);
  if (port == 0 || !WaitForFile(ready_file, &router, 60s)) {
    std::fprintf(stderr, "router_bench: the router did not become ready (see %s)\n", log.c_str());
    return 1;
  }
  std::this_thread::sleep_for(500ms);
  const ProcSample idle = Sample(router.pid());

  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);
  // Streams spread over a few connections, as a fleet of clients would be.
  std::vector<std::unique_ptr<v1::Generation::Stub>> stubs;
  for (int i = 0; i < 8; ++i) {
    args.SetInt("grpc.channel_id", i);  // distinct channels, not one shared subchannel
    stubs.push_back(v1::Generation::NewStub(grpc::CreateCustomChannel(
        StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials(), args)));
  }
  v1::GenerateRequest req;
  for (int i = 0; i < prompt; ++i) req.mutable_token_ids()->add_ids(100 + i);
  req.mutable_sampling_params()->set_max_tokens(tokens);
  req.mutable_sampling_params()->set_ignore_eos(true);
  req.set_stream(true);

  std::atomic<int> open{0};
  std::vector<std::unique_ptr<ClientStream>> clients;
  std::atomic<bool> sampling{true};
  ProcSample peak = idle;
  int most_open = 0;
  std::thread sampler([&] {
    while (sampling) {
      const ProcSample s = Sample(router.pid());
      peak.threads = std::max(peak.threads, s.threads);
      peak.rss_kb = std::max(peak.rss_kb, s.rss_kb);
      most_open = std::max(most_open, open.load());
      std::this_thread::sleep_for(20ms);
    }
  });
  const auto t0 = Clock::now();
  for (int i = 0; i < streams; ++i) {
    ++open;
    clients.push_back(std::make_unique<ClientStream>(stubs[i % stubs.size()].get(), req,
                                                     StrCat("bench-", i), &open));
    std::this_thread::sleep_until(t0 +
                                  std::chrono::duration_cast<Clock::duration>(
                                      std::chrono::duration<double>(ramp_s * (i + 1) / streams)));
  }
  const auto deadline =
      Clock::now() + std::chrono::seconds(static_cast<int>(60 + tokens * interval_ms / 1000 * 4));
  while (open > 0 && Clock::now() < deadline) std::this_thread::sleep_for(20ms);
  const double wall = Seconds(Clock::now() - t0);
  sampling = false;
  sampler.join();
  const ProcSample end = Sample(router.pid());

  int completed = 0, failed = 0;
  int64_t delivered = 0;
  std::vector<double> added, transit;
  const auto sent = decode.TakeSent();
  std::map<std::string, int> errors;
  const auto interval = std::chrono::duration<double>(interval_ms / 1000);
  for (auto& c : clients) {
    if (!c->done) {
      ++errors["never ended"];
      continue;
    }
    delivered += static_cast<int64_t>(c->arrivals.size());
    if (c->status.ok() && c->completed) {
      ++completed;
    } else {
      ++failed;
      ++errors[StrCat(static_cast<int>(c->status.error_code()), " ",
                      c->status.error_message().substr(0, 80))];
    }
    // Decoded token k (k ≥ 1) was queued by the fake at sent[k − 1].
    if (auto it = sent.find(c->id); it != sent.end()) {
      for (size_t k = 1; k < c->arrivals.size() && k - 1 < it->second.size(); ++k) {
        transit.push_back(Seconds(c->arrivals[k] - it->second[k - 1]));
      }
    }
    // Token k (k ≥ 1: the decoded ones) is due (k − 1)·interval after token 1.
    if (c->arrivals.size() < 3) continue;
    std::vector<double> late;
    for (size_t k = 1; k < c->arrivals.size(); ++k) {
      late.push_back(Seconds(c->arrivals[k] - c->arrivals[1]) -
                     static_cast<double>(k - 1) * interval.count());
    }
    const double floor = *std::min_element(late.begin(), late.end());
    for (double l : late) added.push_back(l - floor);
  }
  const std::vector<double> fake_late = decode.TakeLateness();
  router.Stop(5s);
  (*server)->Shutdown(1s);
  std::remove(port_file.c_str());
  std::remove(ready_file.c_str());

  nlohmann::json out = {
      {"streams", streams},
      {"completed", completed},
      {"failed", failed},
      {"most_open_at_once", most_open},
      {"tokens_per_stream", tokens},
      {"interval_ms", interval_ms},
      {"tokens_delivered", delivered},
      {"wall_s", wall},
      {"router_threads_idle", idle.threads},
      {"router_threads_most", peak.threads},
      {"router_cpu_s", end.cpu_s - idle.cpu_s},
      {"router_cpu_us_per_token",
       delivered > 0 ? (end.cpu_s - idle.cpu_s) * 1e6 / static_cast<double>(delivered) : 0},
      {"router_rss_idle_mb", static_cast<double>(idle.rss_kb) / 1024},
      {"router_rss_peak_mb", static_cast<double>(peak.rss_kb) / 1024},
      {"router_kb_per_stream",
       most_open > 0 ? static_cast<double>(peak.rss_kb - idle.rss_kb) / most_open : 0},
      {"added_latency_ms_p50", Percentile(added, 0.50) * 1e3},
      {"added_latency_ms_p99", Percentile(added, 0.99) * 1e3},
      {"added_latency_ms_max", Percentile(added, 1.0) * 1e3},
      {"fake_tick_lateness_ms_p99", Percentile(fake_late, 0.99) * 1e3},
      {"transit_tokens", transit.size()},
      {"transit_ms_p50", Percentile(transit, 0.50) * 1e3},
      {"transit_ms_p99", Percentile(transit, 0.99) * 1e3},
      {"transit_ms_max", Percentile(transit, 1.0) * 1e3},
      {"errors", errors}};
  std::printf("%s\n", out.dump(2).c_str());
  return completed == streams ? 0 : 2;
}

}  // namespace
}  // namespace tandem

int main(int argc, char** argv) { return tandem::Main(argc, argv); }
