// libFuzzer target: the decode worker's gRPC services (DecodeWorker and KvTransfer,
// decode_service.h) over a real DecodeWorker on the tiny synthetic model, called
// through an in-process channel, so every request is serialized and parsed as on the
// wire and every KV chunk is checked and written as a prefill worker's would be.
//
// An input is a script of calls: [op][flags][length][message bytes] repeated, the
// message parsed as the op's request (Reserve, Release, Decode, Handshake, one
// PushKvBlocks stream of several chunks) and sent as parsed, or as the raw bytes when
// they do not parse. Flags substitute what an attacker could not guess but a router
// would send — a lease id and epoch the worker handed out earlier (by slot), the
// reservation's block ids, the layout fingerprint, payloads of the right size — so
// the fuzzer reaches written, complete and decoding reservations, not only refusals.
//
// After each script every lease is released; then the worker must be back at its
// baseline (no lease, nothing running or waiting, every block free) within a few
// seconds, and every answer must have been OK or a documented refusal. A crash, a
// sanitizer report, a hang, another status code or a block that never comes back is a
// finding.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "common/engine/model_weights.h"
#include "common/engine/synthetic_model.h"
#include "common/rpc/engine_convert.h"
#include "decode_worker/decode_service.h"
#include "decode_worker/decode_worker.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "tests/fuzz/service_script.h"

namespace {

using namespace tandem;  // NOLINT: a fuzzer's one file

[[noreturn]] void Fail(const std::string& what) {
  std::fprintf(stderr, "decode_service_fuzzer: %s\n", what.c_str());
  std::abort();
}

// TANDEM_FUZZ_VERBOSE=1: every answer on stderr (to see how far a seed gets).
const bool kVerbose = std::getenv("TANDEM_FUZZ_VERBOSE") != nullptr;

// The codes a refusal may carry (docs/api.md, "Statuses"): the caller's mistake, a lease that is
// gone or not ready, a pool that is full, a stream cut short, a deadline.
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
      return;
    default:
      Fail(std::string(call) + " answered " + std::to_string(st.error_code()) + ": " +
           st.error_message());
  }
}

struct Harness {
  std::unique_ptr<engine::ModelWeights> weights;
  std::unique_ptr<decode::DecodeWorker> worker;
  decode::DecodeService decode_service;
  decode::KvReceiverService kv_service;
  std::unique_ptr<grpc::Server> server;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1::DecodeWorker::Stub> decode;
  std::unique_ptr<v1::KvTransfer::Stub> kv;
  std::unique_ptr<grpc::GenericStub> generic;
  v1::KvLayoutFingerprint fingerprint;
  int64_t layer_bytes = 0;
  int32_t num_blocks = 0;

  Harness() {
    auto config = engine::SyntheticConfig("tiny");
    if (!config.ok()) Fail(config.status().ToString());
    auto w = engine::ModelWeights::Random(*config, model::GgmlType::kF32, 7);
    if (!w.ok()) Fail(w.status().ToString());
    weights = std::move(*w);
    decode::DecodeWorkerOptions options;
    options.engine.kv_cache_bytes = int64_t{4} << 20;
    options.engine.num_threads = 1;
    auto dw = decode::DecodeWorker::Create(*weights, options);
    if (!dw.ok()) Fail(dw.status().ToString());
    worker = std::move(*dw);
    fingerprint = rpc::MakeFingerprint(worker->layout(), "fuzz", "cpu", kernels::CpuMath::kExact);
    decode_service.SetWorker(worker.get(), fingerprint);
    kv_service.SetWorker(worker.get(), fingerprint);
    grpc::ServerBuilder builder;
    builder.RegisterService(&decode_service);
    builder.RegisterService(&kv_service);
    server = builder.BuildAndStart();
    channel = server->InProcessChannel(grpc::ChannelArguments());
    decode = v1::DecodeWorker::NewStub(channel);
    kv = v1::KvTransfer::NewStub(channel);
    generic = std::make_unique<grpc::GenericStub>(channel);
    layer_bytes = worker->layout().LayerBytes();
    num_blocks = worker->Stats().engine.blocks.num_blocks;
  }
};

Harness& H() {
  static Harness* h = new Harness();  // never destroyed: the worker's threads outlive main
  return *h;
}

// One reservation the script made, by slot.
struct Slot {
  uint64_t lease_id = 0;
  uint64_t epoch = 0;
  std::vector<int32_t> block_ids;
};

// Sends `bytes` unparsed to `method` (a unary call), as a client with a broken encoder would.
void SendRaw(const std::string& method, std::string_view bytes) {
  const grpc::Status st = fuzz::CallRaw(*H().generic, method, bytes);
  // INTERNAL: gRPC's answer to bytes that do not parse, before any handler runs.
  if (st.error_code() != grpc::StatusCode::INTERNAL) CheckStatus(st, method.c_str());
}

void Reserve(std::string_view bytes, uint8_t flags, std::vector<Slot>& slots) {
  v1::ReserveRequest req;
  if (!req.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    return SendRaw("/tandem.v1.DecodeWorker/Reserve", bytes);
  }
  if (flags & 1) req.set_num_tokens(1 + req.num_tokens() % 200);  // one that fits, mostly
  if (flags & 2) req.set_lease_ms(1 + req.lease_ms() % 20000);
  v1::ReserveResponse resp;
  auto ctx = fuzz::Context(std::chrono::seconds(5));
  const grpc::Status st = H().decode->Reserve(ctx.get(), req, &resp);
  CheckStatus(st, "Reserve");
  if (st.ok()) {
    if (resp.lease_id() == 0) Fail("Reserve answered OK with lease 0");
    slots.push_back(
        {resp.lease_id(), resp.epoch(), {resp.block_ids().begin(), resp.block_ids().end()}});
  }
}

const Slot* Pick(const std::vector<Slot>& slots, uint8_t flags) {
  if (!(flags & 0x80) || slots.empty()) return nullptr;
  return &slots[(flags >> 4) % slots.size()];
}

void Release(std::string_view bytes, uint8_t flags, const std::vector<Slot>& slots) {
  v1::ReleaseRequest req;
  if (!req.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    return SendRaw("/tandem.v1.DecodeWorker/Release", bytes);
  }
  if (const Slot* s = Pick(slots, flags)) req.set_lease_id(s->lease_id);
  v1::ReleaseResponse resp;
  auto ctx = fuzz::Context(std::chrono::seconds(5));
  CheckStatus(H().decode->Release(ctx.get(), req, &resp), "Release");
}

void Handshake(std::string_view bytes, uint8_t flags) {
  v1::HandshakeRequest req;
  if (!req.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    return SendRaw("/tandem.v1.KvTransfer/Handshake", bytes);
  }
  if (flags & 1) *req.mutable_fingerprint() = H().fingerprint;
  v1::HandshakeResponse resp;
  auto ctx = fuzz::Context(std::chrono::seconds(5));
  CheckStatus(H().kv->Handshake(ctx.get(), req, &resp), "Handshake");
}

// One PushKvBlocks stream: the message bytes are a sequence of [length][chunk].
void Push(std::string_view bytes, uint8_t flags, const std::vector<Slot>& slots) {
  const Slot* slot = Pick(slots, flags);
  v1::PushKvBlocksResponse resp;
  auto ctx = fuzz::Context(std::chrono::seconds(10));
  auto writer = H().kv->PushKvBlocks(ctx.get(), &resp);
  bool first = true;
  while (!bytes.empty()) {
    const size_t n = std::min<size_t>(static_cast<uint8_t>(bytes[0]), bytes.size() - 1);
    v1::KvBlocksChunk chunk;
    const bool parsed = chunk.ParseFromArray(bytes.data() + 1, static_cast<int>(n));
    bytes.remove_prefix(1 + n);
    if (!parsed) continue;
    if (slot != nullptr) {
      chunk.set_lease_id(slot->lease_id);
      if (first) {
        chunk.set_epoch(slot->epoch);
        if (flags & 1)
          chunk.mutable_block_ids()->Assign(slot->block_ids.begin(), slot->block_ids.end());
      }
    }
    if (first && (flags & 2)) *chunk.mutable_fingerprint() = H().fingerprint;
    if (flags & 4) {
      // A payload of the size the chunk claims (bounded), as a real sender's.
      const int64_t blocks = std::clamp<int64_t>(chunk.num_blocks(), 0, 64);
      chunk.set_payload(std::string(static_cast<size_t>(blocks * H().layer_bytes), '\x3c'));
    }
    first = false;
    if (!writer->Write(chunk)) break;  // the worker ended the stream early
  }
  writer->WritesDone();
  CheckStatus(writer->Finish(), "PushKvBlocks");
}

void Decode(std::string_view bytes, uint8_t flags, const std::vector<Slot>& slots) {
  v1::DecodeRequest req;
  if (!req.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) return;
  if (const Slot* s = Pick(slots, flags)) req.set_lease_id(s->lease_id);
  // Bounded work per call: the generation a script can ask for is capped by the
  // reservation anyway; a deadline turns an endless stream into a finding below.
  if (flags & 1) req.mutable_params()->set_max_tokens(1 + req.params().max_tokens() % 8);
  auto ctx = fuzz::Context(std::chrono::seconds(20));
  auto reader = H().decode->Decode(ctx.get(), req);
  v1::DecodeResponse resp;
  int tokens = 0;
  while (reader->Read(&resp)) tokens += resp.token_ids_size();
  if (kVerbose) std::fprintf(stderr, "Decode: %d tokens\n", tokens);
  const grpc::Status st = reader->Finish();
  if (st.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) Fail("a Decode stream never ended");
  CheckStatus(st, "Decode");
}

// Every lease released; then the worker must return to its baseline.
void CheckBaseline(const std::vector<Slot>& slots) {
  for (const Slot& s : slots) {
    v1::ReleaseRequest req;
    req.set_lease_id(s.lease_id);
    v1::ReleaseResponse resp;
    auto ctx = fuzz::Context(std::chrono::seconds(5));
    CheckStatus(H().decode->Release(ctx.get(), req, &resp), "Release (cleanup)");
  }
  v1::WorkerStats stats;
  for (int i = 0; i < 500; ++i) {
    stats.Clear();
    auto ctx = fuzz::Context(std::chrono::seconds(5));
    const grpc::Status st =
        H().decode->GetWorkerStats(ctx.get(), v1::GetWorkerStatsRequest(), &stats);
    if (!st.ok()) Fail("GetWorkerStats: " + st.error_message());
    if (stats.reserved() == 0 && stats.running() == 0 && stats.waiting() == 0 &&
        stats.free_blocks() == H().num_blocks) {
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  Fail("not back at baseline after 5 s: " + std::to_string(stats.reserved()) + " leases, " +
       std::to_string(stats.running()) + " running, " + std::to_string(stats.waiting()) +
       " waiting, " + std::to_string(stats.free_blocks()) + " of " +
       std::to_string(H().num_blocks) + " blocks free");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  H();
  fuzz::Script script({reinterpret_cast<const char*>(data), size});
  std::vector<Slot> slots;
  uint8_t op, flags;
  std::string_view message;
  for (int calls = 0; calls < 16 && script.Next(&op, &flags, &message); ++calls) {
    switch (op % 5) {
      case 0:
        Reserve(message, flags, slots);
        break;
      case 1:
        Push(message, flags, slots);
        break;
      case 2:
        Decode(message, flags, slots);
        break;
      case 3:
        Release(message, flags, slots);
        break;
      default:
        Handshake(message, flags);
        break;
    }
  }
  CheckBaseline(slots);
  return 0;
}
