// libFuzzer target: the prefill worker's gRPC service (PrefillWorker.Prefill and
// GetWorkerStats, prefill_service.h) over a real PrefillWorker on the tiny synthetic
// model, pushing its KV over the gRPC stream transport to a real DecodeWorker on a
// loopback port, so a Prefill's destination (address, lease, epoch, block ids, cached
// blocks, fingerprint), prompt and sampling parameters are checked as a router's would
// be, and a transfer the decode worker refuses is unwound on both sides.
//
// An input is a script of calls: [op][flags][length][message bytes] repeated. The low
// bits of op pick the call (Reserve and Release on the decode worker, which make and
// drop the reservations a Prefill can name; Prefill; two identical Prefills at once;
// GetWorkerStats); a message that does not parse as the request is sent as raw bytes.
// Flags substitute what an attacker could not guess but a router would send: a lease
// id and epoch the decode worker handed out earlier (by slot), the reservation's block
// ids and cached-block count, the layout fingerprint, prompt ids inside the vocabulary.
// The address is the live decode worker, a closed loopback port, a malformed loopback
// port from the input, or one of a fixed set of malformed targets: never a host that
// needs DNS or a route, nor another listener on this machine, so a call cannot hang.
//
// After each script every lease is released; then both workers must be back at their
// baseline (no lease, nothing running, waiting or queued, every block free or cached)
// within a few seconds, and every answer must have been OK or a documented refusal. A
// crash, a sanitizer report, a hang, another status code (INTERNAL above all) or a
// block that never comes back is a finding.
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "common/engine/model_weights.h"
#include "common/engine/synthetic_model.h"
#include "common/rpc/engine_convert.h"
#include "common/transport/stream_kv_sender.h"
#include "decode_worker/decode_service.h"
#include "decode_worker/decode_worker.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "prefill_worker/prefill_service.h"
#include "prefill_worker/prefill_worker.h"
#include "tests/fuzz/service_script.h"

namespace {

using namespace tandem;  // NOLINT: a fuzzer's one file

[[noreturn]] void Fail(const std::string& what) {
  std::fprintf(stderr, "prefill_service_fuzzer: %s\n", what.c_str());
  std::abort();
}

// TANDEM_FUZZ_VERBOSE=1: every answer on stderr (to see how far a seed gets).
const bool kVerbose = std::getenv("TANDEM_FUZZ_VERBOSE") != nullptr;

// The codes a refusal may carry (docs/api.md, "Statuses"): the caller's mistake, a lease that is
// gone or not ready, a layout that does not match, a pool that is full, a decode
// worker that cannot be reached or ended the transfer.
void CheckStatus(const grpc::Status& st, const char* call) {
  if (kVerbose)
    std::fprintf(stderr, "%s: %d %s\n", call, st.error_code(), st.error_message().c_str());
  switch (st.error_code()) {
    case grpc::StatusCode::OK:
    case grpc::StatusCode::INVALID_ARGUMENT:
    case grpc::StatusCode::NOT_FOUND:
    case grpc::StatusCode::FAILED_PRECONDITION:
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
    case grpc::StatusCode::OUT_OF_RANGE:
    case grpc::StatusCode::CANCELLED:
    case grpc::StatusCode::DATA_LOSS:
    case grpc::StatusCode::ABORTED:
    case grpc::StatusCode::UNAVAILABLE:
      return;
    default:
      Fail(std::string(call) + " answered " + std::to_string(st.error_code()) + ": " +
           st.error_message());
  }
}

struct Harness {
  std::unique_ptr<engine::ModelWeights> weights;
  // The decode worker, on a loopback port (the prefill worker dials it).
  std::unique_ptr<decode::DecodeWorker> decode_worker;
  decode::DecodeService decode_service;
  decode::KvReceiverService kv_service;
  std::unique_ptr<grpc::Server> decode_server;
  std::unique_ptr<v1::DecodeWorker::Stub> decode;
  std::string decode_address;
  // The prefill worker under test, on an in-process channel.
  std::unique_ptr<prefill::PrefillWorker> prefill_worker;
  prefill::PrefillService prefill_service;
  std::unique_ptr<grpc::Server> prefill_server;
  std::unique_ptr<v1::PrefillWorker::Stub> prefill;
  std::unique_ptr<grpc::GenericStub> generic;
  v1::KvLayoutFingerprint fingerprint;
  int64_t vocab = 0;
  int32_t decode_blocks = 0;
  int32_t prefill_blocks = 0;

  Harness() {
    auto config = engine::SyntheticConfig("tiny");
    if (!config.ok()) Fail(config.status().ToString());
    vocab = config->vocab_size;
    auto w = engine::ModelWeights::Random(*config, model::GgmlType::kF32, 7);
    if (!w.ok()) Fail(w.status().ToString());
    weights = std::move(*w);

    decode::DecodeWorkerOptions d;
    d.engine.kv_cache_bytes = int64_t{4} << 20;
    d.engine.num_threads = 1;
    auto dw = decode::DecodeWorker::Create(*weights, d);
    if (!dw.ok()) Fail(dw.status().ToString());
    decode_worker = std::move(*dw);
    fingerprint =
        rpc::MakeFingerprint(decode_worker->layout(), "fuzz", "cpu", kernels::CpuMath::kExact);
    decode_service.SetWorker(decode_worker.get(), fingerprint);
    kv_service.SetWorker(decode_worker.get(), fingerprint);
    int port = 0;
    grpc::ServerBuilder db;
    db.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    db.RegisterService(&decode_service);
    db.RegisterService(&kv_service);
    decode_server = db.BuildAndStart();
    if (decode_server == nullptr || port == 0) Fail("the decode worker's server did not start");
    decode_address = "127.0.0.1:" + std::to_string(port);
    decode = v1::DecodeWorker::NewStub(
        grpc::CreateChannel(decode_address, grpc::InsecureChannelCredentials()));
    decode_blocks = decode_worker->Stats().engine.blocks.num_blocks;

    engine::EngineOptions p;
    p.kv_cache_bytes = int64_t{4} << 20;
    p.num_threads = 1;
    auto pw = prefill::PrefillWorker::Create(
        *weights, p,
        [](const kernels::KvStorage& kv) -> absl::StatusOr<std::unique_ptr<transport::KvSender>> {
          return transport::StreamKvSender::Create(
              &kv, rpc::MakeFingerprint(kv.layout(), "fuzz", "cpu", kernels::CpuMath::kExact), {});
        });
    if (!pw.ok()) Fail(pw.status().ToString());
    prefill_worker = std::move(*pw);
    prefill_service.SetWorker(prefill_worker.get(), fingerprint);
    grpc::ServerBuilder pb;
    pb.RegisterService(&prefill_service);
    prefill_server = pb.BuildAndStart();
    auto channel = prefill_server->InProcessChannel(grpc::ChannelArguments());
    prefill = v1::PrefillWorker::NewStub(channel);
    generic = std::make_unique<grpc::GenericStub>(channel);
    prefill_blocks = prefill_worker->Stats().engine.blocks.num_blocks;
  }
};

Harness& H() {
  static Harness* h = new Harness();  // never destroyed: the workers' threads outlive main
  return *h;
}

// One reservation the script made on the decode worker, by slot.
struct Slot {
  uint64_t lease_id = 0;
  uint64_t epoch = 0;
  std::vector<int32_t> block_ids;
  int32_t cached_blocks = 0;
};

// Sends `bytes` unparsed to the prefill worker's `method`, as a client with a broken
// encoder would.
void SendRaw(const std::string& method, std::string_view bytes) {
  const grpc::Status st = fuzz::CallRaw(*H().generic, method, bytes);
  // INTERNAL: gRPC's answer to bytes that do not parse, before any handler runs.
  if (st.error_code() != grpc::StatusCode::INTERNAL) CheckStatus(st, method.c_str());
}

const Slot* Pick(const std::vector<Slot>& slots, uint8_t flags) {
  if (!(flags & 0x80) || slots.empty()) return nullptr;
  return &slots[((flags >> 4) & 7) % slots.size()];
}

void Reserve(std::string_view bytes, uint8_t flags, std::vector<Slot>& slots) {
  v1::ReserveRequest req;
  if (!req.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) return;
  if (flags & 1) req.set_num_tokens(1 + req.num_tokens() % 200);  // one that fits, mostly
  if (flags & 2) req.set_lease_ms(1 + req.lease_ms() % 20000);
  v1::ReserveResponse resp;
  auto ctx = fuzz::Context(std::chrono::seconds(5));
  const grpc::Status st = H().decode->Reserve(ctx.get(), req, &resp);
  CheckStatus(st, "Reserve");
  if (st.ok()) {
    slots.push_back({resp.lease_id(),
                     resp.epoch(),
                     {resp.block_ids().begin(), resp.block_ids().end()},
                     resp.cached_blocks()});
  }
}

void Release(std::string_view bytes, uint8_t flags, const std::vector<Slot>& slots) {
  v1::ReleaseRequest req;
  if (!req.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) return;
  if (const Slot* s = Pick(slots, flags)) req.set_lease_id(s->lease_id);
  v1::ReleaseResponse resp;
  auto ctx = fuzz::Context(std::chrono::seconds(5));
  CheckStatus(H().decode->Release(ctx.get(), req, &resp), "Release");
}

// The address a Prefill names, by flags bits 2-3: never one that needs DNS or a route.
std::string Address(uint8_t flags, const std::string& fuzzed) {
  switch ((flags >> 2) & 3) {
    case 0:
      return H().decode_address;
    case 1:
      return "127.0.0.1:1";  // nothing listens there
    case 2: {
      // The input's digits as a port; a valid one that is not the decode worker's becomes
      // the closed port 1, so that no other listener on this machine is dialled.
      std::string port;
      for (char c : fuzzed) {
        if (port.size() < 6 && c >= '0' && c <= '9') port += c;
      }
      const std::string address = "127.0.0.1:" + port;
      if (!port.empty() && port.size() <= 5 && std::stoi(port) >= 1 && std::stoi(port) <= 65535 &&
          address != H().decode_address) {
        return "127.0.0.1:1";
      }
      return address;
    }
    default: {
      static const char* const kMalformed[] = {"",
                                               ":",
                                               "127.0.0.1",
                                               "127.0.0.1:99999",
                                               "[::1",
                                               "ipv4:",
                                               "unix:",
                                               "ipv4:127.0.0.1:0",
                                               "127.0.0.1:-5",
                                               "ipv6:[::1]:1",
                                               "\x01\xff",
                                               "127.0.0.1:1,127.0.0.1:2",
                                               "unix:80",
                                               "dns:1234"};
      return kMalformed[fuzzed.size() % std::size(kMalformed)];
    }
  }
}

// Applies the flags' substitutions to a parsed Prefill request.
void Substitute(v1::PrefillRequest& req, uint8_t op, uint8_t flags,
                const std::vector<Slot>& slots) {
  v1::KvDestination* d = req.mutable_destination();
  if (const Slot* s = Pick(slots, flags)) {
    d->set_lease_id(s->lease_id);
    d->set_epoch(s->epoch);
    if (flags & 1) d->mutable_block_ids()->Assign(s->block_ids.begin(), s->block_ids.end());
    if (op & 0x20) d->set_cached_blocks(s->cached_blocks);
  }
  if (flags & 2) *d->mutable_fingerprint() = H().fingerprint;
  d->set_address(Address(flags, d->address()));
  if (op & 0x10) {
    for (int32_t& t : *req.mutable_prompt_token_ids()) {
      t = static_cast<int32_t>(static_cast<uint32_t>(t) % static_cast<uint32_t>(H().vocab));
    }
  }
}

// One Prefill, or `copies` identical ones at once (two routers racing for one lease).
void Prefill(std::string_view bytes, uint8_t op, uint8_t flags, const std::vector<Slot>& slots,
             int copies) {
  v1::PrefillRequest req;
  if (!req.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    return SendRaw("/tandem.v1.PrefillWorker/Prefill", bytes);
  }
  Substitute(req, op, flags, slots);
  auto call = [&req] {
    v1::PrefillResponse resp;
    // The tiny model prefills in milliseconds and a refused transfer ends at once; a
    // Prefill still running at its deadline is a hang.
    auto ctx = fuzz::Context(std::chrono::seconds(8));
    const grpc::Status st = H().prefill->Prefill(ctx.get(), req, &resp);
    if (st.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) Fail("a Prefill never ended");
    CheckStatus(st, "Prefill");
    if (st.ok() && (resp.first_token_id() < 0 || resp.first_token_id() >= H().vocab)) {
      Fail("Prefill answered token " + std::to_string(resp.first_token_id()));
    }
  };
  std::vector<std::thread> threads;
  for (int i = 1; i < copies; ++i) threads.emplace_back(call);
  call();
  for (std::thread& t : threads) t.join();
}

void Stats(std::string_view bytes) {
  v1::GetWorkerStatsRequest req;
  if (!req.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    return SendRaw("/tandem.v1.PrefillWorker/GetWorkerStats", bytes);
  }
  v1::WorkerStats resp;
  auto ctx = fuzz::Context(std::chrono::seconds(5));
  const grpc::Status st = H().prefill->GetWorkerStats(ctx.get(), req, &resp);
  if (!st.ok()) Fail("GetWorkerStats: " + st.error_message());
}

// Every lease released; then both workers must return to their baseline.
void CheckBaseline(const std::vector<Slot>& slots) {
  for (const Slot& s : slots) {
    v1::ReleaseRequest req;
    req.set_lease_id(s.lease_id);
    v1::ReleaseResponse resp;
    auto ctx = fuzz::Context(std::chrono::seconds(5));
    CheckStatus(H().decode->Release(ctx.get(), req, &resp), "Release (cleanup)");
  }
  v1::WorkerStats d, p;
  auto at_baseline = [](const v1::WorkerStats& s, int32_t blocks) {
    return s.reserved() == 0 && s.running() == 0 && s.waiting() == 0 &&
           s.queued_prompt_tokens() == 0 && s.free_blocks() + s.cached_blocks() == blocks;
  };
  for (int i = 0; i < 500; ++i) {
    d.Clear();
    p.Clear();
    auto dctx = fuzz::Context(std::chrono::seconds(5));
    auto pctx = fuzz::Context(std::chrono::seconds(5));
    if (grpc::Status st = H().decode->GetWorkerStats(dctx.get(), {}, &d); !st.ok())
      Fail("decode GetWorkerStats: " + st.error_message());
    if (grpc::Status st = H().prefill->GetWorkerStats(pctx.get(), {}, &p); !st.ok())
      Fail("prefill GetWorkerStats: " + st.error_message());
    if (at_baseline(d, H().decode_blocks) && at_baseline(p, H().prefill_blocks)) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  auto show = [](const v1::WorkerStats& s, int32_t blocks) {
    return std::to_string(s.reserved()) + " leases, " + std::to_string(s.running()) + " running, " +
           std::to_string(s.waiting()) + " waiting, " + std::to_string(s.queued_prompt_tokens()) +
           " prompt tokens queued, " + std::to_string(s.free_blocks()) + " free + " +
           std::to_string(s.cached_blocks()) + " cached of " + std::to_string(blocks) + " blocks";
  };
  Fail("not back at baseline after 5 s: decode worker " + show(d, H().decode_blocks) +
       "; prefill worker " + show(p, H().prefill_blocks));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  H();
  fuzz::Script script({reinterpret_cast<const char*>(data), size});
  std::vector<Slot> slots;
  uint8_t op, flags;
  std::string_view message;
  for (int calls = 0; calls < 12 && script.Next(&op, &flags, &message); ++calls) {
    switch ((op & 0x0f) % 5) {
      case 0:
        Reserve(message, flags, slots);
        break;
      case 1:
        Prefill(message, op, flags, slots, 1);
        break;
      case 2:
        Prefill(message, op, flags, slots, 2);
        break;
      case 3:
        Release(message, flags, slots);
        break;
      default:
        Stats(message);
        break;
    }
  }
  CheckBaseline(slots);
  return 0;
}
