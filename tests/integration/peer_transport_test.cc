// The peer KV transport (the NCCL / CUDA IPC path) without a GPU: a prefill and a
// decode worker in one process, their KvTransfer service on loopback gRPC, the payloads
// on the in-process fake communicator (fake_peer_comm.h), which pairs sends with
// receives exactly as NCCL does and breaks a pair whose byte counts differ. The
// workers run the CPU backend; the devices they report are labelled GPUs so the
// handshake picks the peer transport ("nccl").
//
// Checked: answers identical to one engine, alone and under many concurrent requests
// (every payload paired in descriptor order); a payload named twice, or one never
// named, is detected; a stalled transfer fails its request within its deadline, frees
// the blocks on both sides, and the next transfer rebuilds the communicator; a partial
// transfer is never acknowledged; an expired, released or other-epoch reservation is
// refused with nothing written (and the communicator survives); a destination of
// another epoch makes the sender rendezvous again and fails with nothing written; a
// mismatched layout is refused naming the field. After every test the leak oracle holds: every
// block of both workers free, no lease, every staging buffer back.
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <future>
#include <mutex>
#include <thread>

#include "common/engine/engine.h"
#include "common/engine/loaded_model.h"
#include "common/rpc/engine_convert.h"
#include "common/rpc/kv_fingerprint.h"
#include "common/rpc/rpc_server.h"
#include "common/transport/fake_peer_comm.h"
#include "common/transport/stream_kv_sender.h"
#include "decode_worker/decode_service.h"
#include "decode_worker/decode_worker.h"
#include "decode_worker/peer_kv_receiver.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/backend_factory.h"
#include "kernels/cpu/matmul_q8.h"
#include "prefill_worker/prefill_worker.h"
#include "tests/test_paths.h"
#include "tests/worker_test_util.h"

namespace tandem {
namespace {

using ::testing::HasSubstr;
using Clock = std::chrono::steady_clock;
using transport::TransportKind;

// Each peer Send / Recv: long enough that a loaded 2-core machine never misses it on the
// happy path, short enough for the failure tests.
constexpr auto kTimeout = std::chrono::milliseconds(3000);

// Polls `pred` for up to 5 s.
template <class F>
bool Eventually(F pred) {
  const auto deadline = Clock::now() + std::chrono::seconds(5);
  while (!pred() && Clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  return pred();
}

class PeerTransportTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto m = engine::LoadModel(::tandem::testing::DefaultModelPath());
    ASSERT_TRUE(m.ok()) << m.status();
    model_ = new engine::LoadedModel(*std::move(m));
  }
  static void TearDownTestSuite() { delete model_; }

  static engine::EngineOptions Options() {
    engine::EngineOptions o;
    o.num_threads = 1;
    o.kv_cache_bytes = int64_t{48} << 20;
    o.prefix_caching = false;  // every request moves all of its blocks
    return o;
  }

  void SetUp() override {
    decode::DecodeWorkerOptions d;
    d.engine = Options();
    decode_ = *decode::DecodeWorker::Create(*model_->weights, d);
    layer_bytes_ = decode_->layout().LayerBytes();
    // Staging for 8 blocks' layer: a longer prompt's layer goes in several payloads.
    auto staging = decode_->MakeStaging(kStagingBuffers, 8 * layer_bytes_);
    ASSERT_TRUE(staging.ok()) << staging.status();
    staging_ = *staging;
    receiver_ = std::make_unique<decode::PeerKvReceiver>(
        decode_.get(), staging_,
        decode::PeerKvReceiverOptions{.nccl = &network_, .timeout = kTimeout});
    fingerprint_ =
        rpc::MakeFingerprint(decode_->layout(), model_->hash, "cpu", kernels::CpuMath::kExact);
    kv_service_.SetWorker(decode_.get(), fingerprint_,
                          {.device = {"cuda", "gpu-decode", ""},
                           .accepted = {TransportKind::kNccl, TransportKind::kHost},
                           .peer = receiver_.get()});
    auto server = rpc::RpcServer::Start("127.0.0.1:0", {&kv_service_}, {});
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    address_ = "127.0.0.1:" + std::to_string(server_->port());
    prefill_ = *prefill::PrefillWorker::Create(
        *model_->weights, Options(),
        [this](
            const kernels::KvStorage& kv) -> absl::StatusOr<std::unique_ptr<transport::KvSender>> {
          auto s = transport::StreamKvSender::Create(
              &kv, rpc::MakeFingerprint(kv.layout(), model_->hash, "cpu", kernels::CpuMath::kExact),
              {.api_key = {},
               .device = {"cuda", "gpu-prefill", ""},
               .offered = {TransportKind::kNccl},
               .nccl = &network_,
               .timeout = kTimeout,
               .staging_buffers = 2,
               .staging_bytes = 16 * kv.layout().LayerBytes()});
          if (s.ok()) sender_ = s->get();
          return s;
        });
  }

  void TearDown() override {
    auto clean = [](const engine::EngineStats& e) {
      return e.blocks.free_blocks + e.blocks.cached_blocks == e.blocks.num_blocks;
    };
    const auto deadline = Clock::now() + std::chrono::seconds(5);
    while ((!clean(prefill_->Stats().engine) || !clean(decode_->Stats().engine) ||
            decode_->Stats().leases != 0 || staging_->free_count() != kStagingBuffers) &&
           Clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    EXPECT_TRUE(clean(prefill_->Stats().engine)) << "prefill worker leaked blocks";
    EXPECT_TRUE(clean(decode_->Stats().engine)) << "decode worker leaked blocks";
    EXPECT_EQ(decode_->Stats().leases, 0) << "decode worker leaked a reservation";
    EXPECT_EQ(staging_->free_count(), kStagingBuffers) << "a staging buffer was not returned";
    prefill_.reset();
    server_->Shutdown(std::chrono::milliseconds(100));
    receiver_.reset();
    decode_.reset();
  }

  // One request over the peer transport (a failure's reservation released, as the
  // router releases it).
  absl::StatusOr<std::vector<int32_t>> Run(const std::vector<int32_t>& prompt,
                                           const engine::SamplingParams& p) {
    return ::tandem::testing::RunPair(*decode_, *prefill_, address_, prompt, p);
  }

  static std::vector<int32_t> Reference(const std::vector<int32_t>& prompt,
                                        const engine::SamplingParams& p) {
    return ::tandem::testing::SingleEngineTokens(*model_->weights, Options(), prompt, p);
  }

  static std::vector<int32_t> Tokens(const std::string& text) {
    return *model_->tokenizer->Encode(text);
  }

  // --- a hand-driven sender, for what a well-behaved one never does -----------------
  struct RawPeer {
    std::unique_ptr<v1::KvTransfer::Stub> stub;
    std::unique_ptr<transport::PeerComm> comm;
    uint64_t sender_id = 0;
    uint64_t generation = 0;
  };
  RawPeer Rendezvous(uint64_t sender_id, uint64_t generation) {
    RawPeer p;
    p.stub = v1::KvTransfer::NewStub(rpc::MakeChannel(address_));
    p.sender_id = sender_id;
    p.generation = generation;
    auto created = network_.Create();
    EXPECT_TRUE(created.ok());
    v1::HandshakeRequest req;
    *req.mutable_fingerprint() = fingerprint_;
    req.add_transports(v1::TRANSPORT_KIND_NCCL);
    req.mutable_device()->set_backend("cuda");
    req.mutable_device()->set_uuid("gpu-raw");
    req.mutable_peer()->set_sender_id(sender_id);
    req.mutable_peer()->set_generation(generation);
    req.mutable_peer()->set_comm_id(created->id);
    v1::HandshakeResponse resp;
    grpc::ClientContext ctx;
    grpc::Status st = p.stub->Handshake(&ctx, req, &resp);
    EXPECT_TRUE(st.ok()) << st.error_message();
    EXPECT_EQ(resp.transport(), v1::TRANSPORT_KIND_NCCL);
    p.comm = std::move(created->comm);
    return p;
  }
  // A chunk naming `num_blocks` blocks of `layer` at `first` as payload `seq`.
  v1::KvBlocksChunk PeerChunk(const RawPeer& p, const decode::Reservation& r, int32_t layer,
                              int32_t first, int32_t num_blocks, uint64_t seq, bool header = true) {
    v1::KvBlocksChunk c;
    if (header) {
      c.set_lease_id(r.lease_id);
      c.set_epoch(r.epoch);
      *c.mutable_fingerprint() = fingerprint_;
      c.mutable_block_ids()->Assign(r.block_ids.begin(), r.block_ids.end());
    }
    c.set_layer(layer);
    c.set_first_block(first);
    c.set_num_blocks(num_blocks);
    c.mutable_peer()->set_sender_id(p.sender_id);
    c.mutable_peer()->set_generation(p.generation);
    c.mutable_peer()->set_seq(seq);
    return c;
  }
  // A host buffer of the payload size, for the raw sender's Sends.
  std::unique_ptr<kernels::Buffer> Payload(int32_t num_blocks) {
    return *backend_->Allocate(kernels::MemoryKind::kStaging, num_blocks * layer_bytes_);
  }

  static constexpr int32_t kStagingBuffers = 4;
  static engine::LoadedModel* model_;
  transport::FakePeerNetwork network_;
  std::unique_ptr<kernels::Backend> backend_ = *kernels::MakeBackend({.device = "cpu"});
  std::unique_ptr<decode::DecodeWorker> decode_;
  transport::StagingPool* staging_ = nullptr;
  std::unique_ptr<decode::PeerKvReceiver> receiver_;
  decode::KvReceiverService kv_service_;
  std::unique_ptr<rpc::RpcServer> server_;
  std::string address_;
  v1::KvLayoutFingerprint fingerprint_;
  std::unique_ptr<prefill::PrefillWorker> prefill_;
  transport::StreamKvSender* sender_ = nullptr;
  int64_t layer_bytes_ = 0;
};
engine::LoadedModel* PeerTransportTest::model_ = nullptr;

TEST_F(PeerTransportTest, AnswersLikeOneEngineOverThePeerTransport) {
  // 5 blocks and 21 blocks (16 tokens each): one payload per layer, and three (8 + 8 +
  // 5 blocks: the decode worker's staging holds 8).
  const std::vector<int32_t> shortp = Tokens("The capital of France is");
  std::vector<int32_t> longp;
  while (longp.size() < 330) {
    const auto more = Tokens(" Once upon a time, in a land far away, there lived a king.");
    longp.insert(longp.end(), more.begin(), more.end());
  }
  longp.resize(330);
  for (const auto& prompt : {shortp, longp}) {
    auto got = Run(prompt, ::tandem::testing::Greedy(6));
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(*got, Reference(prompt, ::tandem::testing::Greedy(6)));
  }
  EXPECT_EQ(sender_->TransportOf(address_), TransportKind::kNccl);
  // One communicator, built once, and on it per prompt and layer one payload per 8
  // blocks, in order.
  std::vector<int64_t> expected;
  for (const auto& prompt : {shortp, longp}) {
    const int32_t blocks = static_cast<int32_t>((prompt.size() + 15) / 16);
    for (int32_t l = 0; l < decode_->layout().n_layers; ++l) {
      for (int32_t b = 0; b < blocks; b += 8)
        expected.push_back(std::min(8, blocks - b) * layer_bytes_);
    }
  }
  const auto pairings = network_.Pairings();
  ASSERT_EQ(pairings.size(), 1u);
  EXPECT_EQ(pairings.begin()->second, expected);
  EXPECT_EQ(prefill_->Stats().kv_comm_rebuilds, 0);
}

// Prompts of different lengths from many threads: their payloads interleave on one
// communicator, and any pairing out of descriptor order would either mismatch byte
// counts (the fake breaks the pair) or put one request's K/V into another's blocks.
TEST_F(PeerTransportTest, ManyConcurrentRequestsPairInDescriptorOrder) {
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 12; ++i) {
    std::vector<int32_t> p = Tokens("Question " + std::to_string(i) + ": what is " +
                                    std::to_string(i * 7) + " plus " + std::to_string(i) + "?");
    for (int k = 0; k < i % 4; ++k) {
      const auto more = Tokens(" Please show every step of the working, then the answer.");
      p.insert(p.end(), more.begin(), more.end());
    }
    prompts.push_back(std::move(p));
  }
  std::vector<std::future<absl::StatusOr<std::vector<int32_t>>>> runs;
  for (const auto& p : prompts) {
    runs.push_back(std::async(std::launch::async,
                              [this, &p] { return Run(p, ::tandem::testing::Greedy(4)); }));
  }
  for (size_t i = 0; i < prompts.size(); ++i) {
    auto got = runs[i].get();
    ASSERT_TRUE(got.ok()) << "request " << i << ": " << got.status();
    EXPECT_EQ(*got, Reference(prompts[i], ::tandem::testing::Greedy(4))) << "request " << i;
  }
  EXPECT_EQ(network_.communicators(), 1);
  EXPECT_EQ(receiver_->stats().broken, 0);
}

TEST_F(PeerTransportTest, APayloadNamedTwiceOrNeverIsDetected) {
  auto r = decode_->Reserve(40, std::chrono::seconds(30));  // 3 blocks
  ASSERT_TRUE(r.ok());
  auto payload = Payload(3);
  {
    RawPeer p = Rendezvous(77, 1);
    grpc::ClientContext ctx;
    v1::PushKvBlocksResponse resp;
    auto writer = p.stub->PushKvBlocks(&ctx, &resp);
    ASSERT_TRUE(writer->Write(PeerChunk(p, *r, 0, 0, 3, 0)));
    ASSERT_TRUE(p.comm->Send(*payload, 0, 3 * layer_bytes_, Clock::now() + kTimeout).ok());
    writer->Write(PeerChunk(p, *r, 1, 0, 3, 0, /*header=*/false));  // seq 0 again
    writer->WritesDone();
    grpc::Status st = writer->Finish();
    EXPECT_EQ(st.error_code(), grpc::StatusCode::DATA_LOSS) << st.error_message();
    EXPECT_THAT(st.error_message(), HasSubstr("out of order"));
  }
  {
    RawPeer p = Rendezvous(77, 2);  // the broken communicator is replaced
    grpc::ClientContext ctx;
    v1::PushKvBlocksResponse resp;
    auto writer = p.stub->PushKvBlocks(&ctx, &resp);
    const auto t0 = Clock::now();
    writer->Write(PeerChunk(p, *r, 0, 0, 3, 1));  // seq 0 never named
    writer->WritesDone();
    grpc::Status st = writer->Finish();
    EXPECT_EQ(st.error_code(), grpc::StatusCode::DATA_LOSS) << st.error_message();
    EXPECT_THAT(st.error_message(), HasSubstr("never announced"));
    EXPECT_LT(Clock::now() - t0, 3 * kTimeout);
  }
  EXPECT_EQ(receiver_->stats().broken, 2);
  EXPECT_EQ(decode_->Stats().kv_bytes_received, 3 * layer_bytes_);  // the first payload only
  // A stale generation may not replace the current communicator.
  EXPECT_FALSE(receiver_->Join(TransportKind::kNccl, 77, 1, "fake:0").ok());
  EXPECT_TRUE(decode_->Release(r->lease_id));
}

// The decode worker never receives the payload: the sender's Send passes its deadline,
// the request fails with that status within about the deadline, and both workers free
// the blocks; the next request rebuilds the communicator and answers correctly.
TEST_F(PeerTransportTest, AStalledTransferFailsWithinItsDeadlineAndTheNextRebuilds) {
  const std::vector<int32_t> prompt = Tokens("A stalled link is");
  ASSERT_TRUE(Run(prompt, ::tandem::testing::Greedy(2)).ok());  // the communicator is up
  network_.Stall(true);
  const auto t0 = Clock::now();
  auto failed = Run(prompt, ::tandem::testing::Greedy(2));
  const auto took = Clock::now() - t0;
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kDeadlineExceeded) << failed.status();
  EXPECT_LT(took, 3 * kTimeout) << "the stalled transfer was not bounded by its deadline";
  EXPECT_GE(took, kTimeout);
  EXPECT_EQ(prefill_->Stats().kv_failures, 1);
  network_.Stall(false);
  auto next = Run(prompt, ::tandem::testing::Greedy(4));
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_EQ(*next, Reference(prompt, ::tandem::testing::Greedy(4)));
  EXPECT_EQ(prefill_->Stats().kv_comm_rebuilds, 1);
  EXPECT_EQ(network_.communicators(), 2);
}

TEST_F(PeerTransportTest, APartialTransferIsNeverAcknowledged) {
  auto r = decode_->Reserve(40, std::chrono::seconds(30));
  ASSERT_TRUE(r.ok());
  auto payload = Payload(3);
  RawPeer p = Rendezvous(91, 1);
  grpc::ClientContext ctx;
  v1::PushKvBlocksResponse resp;
  auto writer = p.stub->PushKvBlocks(&ctx, &resp);
  ASSERT_TRUE(writer->Write(PeerChunk(p, *r, 0, 0, 3, 0)));  // layer 0 only
  ASSERT_TRUE(p.comm->Send(*payload, 0, 3 * layer_bytes_, Clock::now() + kTimeout).ok());
  writer->WritesDone();
  grpc::Status st = writer->Finish();
  EXPECT_EQ(st.error_code(), grpc::StatusCode::DATA_LOSS) << st.error_message();
  EXPECT_THAT(st.error_message(), HasSubstr("layer 1 got 0 of 3 blocks"));
  auto sink = std::make_shared<::tandem::testing::CollectingSink>();
  absl::Status start =
      decode_->StartDecode(r->lease_id, Tokens("x"), 1, ::tandem::testing::Greedy(2), sink);
  EXPECT_EQ(start.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(start.message(), HasSubstr("not fully arrived"));
  EXPECT_EQ(receiver_->stats().broken, 0);  // the pairing held
  EXPECT_TRUE(decode_->Release(r->lease_id));
}

// The sender gives up mid-push (its deadline passed while the decode worker was
// stalled, its process died): the decode worker frees the reservation as soon as it
// sees the stream cancelled, without waiting for the router's Release or the lease.
// Over the host path and over the peer transport (whose named payload still pairs).
TEST_F(PeerTransportTest, APushTheSenderAbandonsFreesItsReservationAtOnce) {
  for (bool peer : {false, true}) {
    SCOPED_TRACE(peer ? "peer" : "host");
    const int64_t free_before = decode_->Stats().engine.blocks.free_blocks;
    const int64_t received_before = decode_->Stats().kv_bytes_received;
    auto r = decode_->Reserve(40, std::chrono::seconds(600));  // 3 blocks
    ASSERT_TRUE(r.ok());
    auto payload = Payload(3);
    RawPeer p = Rendezvous(peer ? 61 : 62, 1);
    grpc::ClientContext ctx;
    v1::PushKvBlocksResponse resp;
    auto writer = p.stub->PushKvBlocks(&ctx, &resp);
    v1::KvBlocksChunk c = PeerChunk(p, *r, 0, 0, 3, 0);
    if (!peer) {
      c.clear_peer();
      c.set_payload(std::string(3 * layer_bytes_, '\1'));
    }
    ASSERT_TRUE(writer->Write(c));  // layer 0 of 3 blocks, then the sender is gone
    if (peer) {
      ASSERT_TRUE(p.comm->Send(*payload, 0, 3 * layer_bytes_, Clock::now() + kTimeout).ok());
    }
    ASSERT_TRUE(Eventually([&] { return decode_->Stats().kv_bytes_received > received_before; }));
    const auto t0 = Clock::now();
    ctx.TryCancel();
    EXPECT_EQ(writer->Finish().error_code(), grpc::StatusCode::CANCELLED);
    EXPECT_TRUE(Eventually([&] { return decode_->Stats().leases == 0; }))
        << "the abandoned reservation is still held";
    EXPECT_LT(Clock::now() - t0, std::chrono::seconds(2));
    EXPECT_TRUE(
        Eventually([&] { return decode_->Stats().engine.blocks.free_blocks == free_before; }));
    EXPECT_FALSE(decode_->Release(r->lease_id)) << "the router's Release found it still held";
  }
  EXPECT_EQ(receiver_->stats().broken, 0);  // the pairing held
}

// A reservation that expired (its blocks re-let to another), one already released,
// and one named with another process's epoch: each push is refused before anything is
// written, its payload is still taken off the communicator, and the communicator goes
// on pairing (the last push, into the live reservation, arrives whole).
TEST_F(PeerTransportTest, AnExpiredReletOrForeignReservationIsRefusedWithNoWrite) {
  auto payload = Payload(3);
  RawPeer p = Rendezvous(55, 1);
  uint64_t seq = 0;
  // Three layers, as a sender that queued them before hearing of the refusal: every
  // payload is still received (the Sends pair at once), the stream is refused.
  auto push = [&](const decode::Reservation& r, uint64_t epoch) {
    grpc::ClientContext ctx;
    v1::PushKvBlocksResponse resp;
    auto writer = p.stub->PushKvBlocks(&ctx, &resp);
    const auto t0 = Clock::now();
    for (int32_t layer = 0; layer < 3; ++layer) {
      v1::KvBlocksChunk c = PeerChunk(p, r, layer, 0, 3, seq++, layer == 0);
      c.set_epoch(epoch);
      writer->Write(c);
      EXPECT_TRUE(p.comm->Send(*payload, 0, 3 * layer_bytes_, Clock::now() + kTimeout).ok());
    }
    EXPECT_LT(Clock::now() - t0, kTimeout / 2) << "a refused payload waited for its deadline";
    writer->WritesDone();
    return writer->Finish();
  };
  auto expired = decode_->Reserve(40, std::chrono::milliseconds(50));
  ASSERT_TRUE(expired.ok());
  const auto deadline = Clock::now() + std::chrono::seconds(5);
  while (decode_->Stats().expired_leases == 0 && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_EQ(decode_->Stats().expired_leases, 1);
  auto relet = decode_->Reserve(40, std::chrono::seconds(30));  // the freed blocks again
  ASSERT_TRUE(relet.ok());
  auto sorted = [](std::vector<int32_t> v) {
    std::sort(v.begin(), v.end());
    return v;
  };
  EXPECT_EQ(sorted(relet->block_ids), sorted(expired->block_ids)) << "the blocks were not re-let";
  const int64_t received = decode_->Stats().kv_bytes_received;

  // A reservation that is gone (expired, or another process's) is NOT_FOUND.
  grpc::Status st = push(*expired, expired->epoch);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::NOT_FOUND) << st.error_message();
  EXPECT_THAT(st.error_message(), HasSubstr("expired"));
  st = push(*relet, relet->epoch + 1);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::NOT_FOUND) << st.error_message();
  EXPECT_THAT(st.error_message(), HasSubstr("epoch"));
  EXPECT_EQ(decode_->Stats().kv_bytes_received, received) << "a refused push was written";

  // The communicator still pairs: the live reservation takes a whole transfer.
  grpc::ClientContext ctx;
  v1::PushKvBlocksResponse resp;
  auto writer = p.stub->PushKvBlocks(&ctx, &resp);
  for (int32_t layer = 0; layer < decode_->layout().n_layers; ++layer) {
    ASSERT_TRUE(writer->Write(PeerChunk(p, *relet, layer, 0, 3, seq++, layer == 0)));
    ASSERT_TRUE(p.comm->Send(*payload, 0, 3 * layer_bytes_, Clock::now() + kTimeout).ok());
  }
  writer->WritesDone();
  st = writer->Finish();
  EXPECT_TRUE(st.ok()) << st.error_message();
  EXPECT_EQ(resp.bytes_received(), 3 * layer_bytes_ * decode_->layout().n_layers);
  EXPECT_EQ(receiver_->stats().broken, 0);
  EXPECT_TRUE(decode_->Release(relet->lease_id));
  EXPECT_FALSE(decode_->Release(expired->lease_id));
}

// A destination naming another epoch (a reservation from before the decode worker
// restarted): the sender rendezvouses again before sending, the push is refused with
// nothing written, and the next request, with the live epoch, answers correctly.
TEST_F(PeerTransportTest, AReservationOfAnotherEpochFailsItsRequestAndTheNextSucceeds) {
  const std::vector<int32_t> prompt = Tokens("An old reservation");
  ASSERT_TRUE(Run(prompt, ::tandem::testing::Greedy(2)).ok());
  auto r = decode_->Reserve(static_cast<int64_t>(prompt.size()) + 1, std::chrono::seconds(30));
  ASSERT_TRUE(r.ok());
  const int64_t received = decode_->Stats().kv_bytes_received;
  const auto t0 = Clock::now();
  auto stale = prefill_->Prefill(prompt, ::tandem::testing::Greedy(2),
                                 {address_, r->lease_id, r->block_ids, 0, r->epoch + 1});
  ASSERT_FALSE(stale.ok());
  EXPECT_LT(Clock::now() - t0, kTimeout) << "nothing should have waited for a deadline";
  EXPECT_EQ(stale.status().code(), absl::StatusCode::kNotFound) << stale.status();
  EXPECT_THAT(stale.status().message(), HasSubstr("epoch"));
  EXPECT_EQ(decode_->Stats().kv_bytes_received, received);
  // It rendezvoused once before sending (and learnt the live epoch), then sent nothing.
  EXPECT_EQ(network_.communicators(), 2);
  EXPECT_EQ(prefill_->Stats().kv_comm_rebuilds, 1);
  EXPECT_TRUE(decode_->Release(r->lease_id));
  auto next = Run(prompt, ::tandem::testing::Greedy(4));
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_EQ(*next, Reference(prompt, ::tandem::testing::Greedy(4)));
  EXPECT_EQ(prefill_->Stats().kv_comm_rebuilds, 1);  // the live epoch needs no other
}

// Fast names its arithmetic's version, so workers whose builds would give different
// bits never pair; exact (and anything off the CPU) stays "exact".
TEST_F(PeerTransportTest, TheFingerprintNamesFastsArithmeticVersion) {
  const kv::KvLayout& layout = decode_->layout();
  const v1::KvLayoutFingerprint fast =
      rpc::MakeFingerprint(layout, model_->hash, "cpu", kernels::CpuMath::kFast);
  EXPECT_EQ(fast.cpu_math(), std::string("fast.") + kernels::kQ8ArithmeticVersion);
  EXPECT_EQ(rpc::MakeFingerprint(layout, model_->hash, "cpu", kernels::CpuMath::kExact).cpu_math(),
            "exact");
  EXPECT_EQ(rpc::MakeFingerprint(layout, model_->hash, "cuda", kernels::CpuMath::kFast).cpu_math(),
            "exact");
  v1::KvLayoutFingerprint older = fast;
  older.set_cpu_math("fast");  // a build before the version was named
  const absl::Status st = rpc::CheckFingerprint(fast, older);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(st.message(), HasSubstr("cpu_math"));
  EXPECT_TRUE(rpc::CheckFingerprint(fast, fast).ok());
}

TEST_F(PeerTransportTest, AMismatchedLayoutIsRefusedNamingTheField) {
  auto stub = v1::KvTransfer::NewStub(rpc::MakeChannel(address_));
  for (auto [field, change] :
       std::vector<std::pair<std::string, std::function<void(v1::KvLayoutFingerprint*)>>>{
           {"block_size", [](v1::KvLayoutFingerprint* f) { f->set_block_size(32); }},
           {"dtype", [](v1::KvLayoutFingerprint* f) { f->set_dtype(v1::KV_DTYPE_BFLOAT16); }},
           {"num_kv_heads", [](v1::KvLayoutFingerprint* f) { f->set_num_kv_heads(1); }},
           {"model_hash", [](v1::KvLayoutFingerprint* f) { f->set_model_hash("0"); }}}) {
    v1::HandshakeRequest req;
    *req.mutable_fingerprint() = fingerprint_;
    change(req.mutable_fingerprint());
    req.add_transports(v1::TRANSPORT_KIND_NCCL);
    req.mutable_device()->set_backend("cuda");
    auto created = network_.Create();
    req.mutable_peer()->set_sender_id(9);
    req.mutable_peer()->set_generation(1);
    req.mutable_peer()->set_comm_id(created->id);
    v1::HandshakeResponse resp;
    grpc::ClientContext ctx;
    grpc::Status st = stub->Handshake(&ctx, req, &resp);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << field;
    EXPECT_THAT(st.error_message(), HasSubstr(field));
  }
  EXPECT_EQ(receiver_->stats().rebuilt, 0);  // nothing joined
}

}  // namespace
}  // namespace tandem
