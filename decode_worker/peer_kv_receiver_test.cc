// PeerKvReceiver and the decode worker's peer-KV half on many threads, without gRPC:
// senders drive the in-process fake communicator (fake_peer_comm.h) and call
// AcceptPeerKv / Submit as the KvTransfer service would, from several threads at once
// and out of order. gRPC never runs, so the receiver's threads, the staging pool and
// the engine thread's writes are all visible to TSan (scripts/sanitize.sh runs this
// there); peer_transport_test covers the same receiver behind the real service.
//
// Checked: concurrent senders deliver KV that decodes to the same tokens as the same
// bytes written through the host path (WriteKv); a rendezvous that replaces a busy
// communicator, and a receiver destroyed under pending payloads, fail what was in
// flight, never hang an EndKv, and leak nothing; more senders than kMaxSenders evict
// idle communicators. After every test: every block free, no lease, every staging
// buffer back.
#include "decode_worker/peer_kv_receiver.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "common/engine/synthetic_model.h"
#include "common/transport/fake_peer_comm.h"
#include "common/util/half.h"
#include "decode_worker/decode_worker.h"
#include "gtest/gtest.h"
#include "kernels/backend_factory.h"
#include "tests/worker_test_util.h"

namespace tandem::decode {
namespace {

using Clock = std::chrono::steady_clock;
using transport::TransportKind;

// Each Recv and seq gap: generous, for TSan's slowdown on a 2-core machine.
constexpr auto kTimeout = std::chrono::milliseconds(5000);
constexpr int32_t kStagingBuffers = 3;
constexpr int32_t kRunBlocks = 4;  // blocks per payload at most (the staging size)

// One payload of a push: `num_blocks` blocks of `layer` from `first_block`.
struct Piece {
  int32_t layer = 0;
  int32_t first_block = 0;
  int32_t num_blocks = 0;
};

class PeerKvReceiverTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto config = engine::SyntheticConfig("tiny");
    ASSERT_TRUE(config.ok()) << config.status();
    auto w = engine::ModelWeights::Random(*config, model::GgmlType::kF32, 11);
    ASSERT_TRUE(w.ok()) << w.status();
    weights_ = w->release();
  }
  static void TearDownTestSuite() { delete weights_; }

  void SetUp() override {
    DecodeWorkerOptions o;
    o.engine.num_threads = 1;
    o.engine.kv_cache_bytes = int64_t{8} << 20;
    o.engine.prefix_caching = false;
    auto w = DecodeWorker::Create(*weights_, o);
    ASSERT_TRUE(w.ok()) << w.status();
    worker_ = std::move(*w);
    layout_ = worker_->layout();
    auto staging = worker_->MakeStaging(kStagingBuffers, kRunBlocks * layout_.LayerBytes());
    ASSERT_TRUE(staging.ok()) << staging.status();
    staging_ = *staging;
    receiver_ = std::make_unique<PeerKvReceiver>(
        worker_.get(), staging_, PeerKvReceiverOptions{.nccl = &network_, .timeout = kTimeout});
    total_blocks_ = worker_->Stats().engine.blocks.num_blocks;
  }

  void TearDown() override {
    receiver_.reset();  // joins its threads; fails what is pending
    const auto deadline = Clock::now() + std::chrono::seconds(20);
    auto clean = [&] {
      const DecodeWorkerStats s = worker_->Stats();
      return s.engine.blocks.free_blocks == total_blocks_ && s.leases == 0 &&
             staging_->free_count() == kStagingBuffers;
    };
    while (!clean() && Clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    const DecodeWorkerStats s = worker_->Stats();
    EXPECT_EQ(s.engine.blocks.free_blocks, total_blocks_) << "blocks leaked";
    EXPECT_EQ(s.leases, 0) << "a reservation leaked";
    EXPECT_EQ(staging_->free_count(), kStagingBuffers) << "a staging buffer was not returned";
    worker_.reset();
  }

  struct Sender {
    uint64_t id = 0;
    uint64_t generation = 0;
    std::unique_ptr<transport::PeerComm> comm;
    uint64_t next_seq = 0;
  };
  absl::StatusOr<Sender> Join(uint64_t id, uint64_t generation) {
    auto created = network_.Create();
    if (!created.ok()) return created.status();
    if (absl::Status st = receiver_->Join(TransportKind::kNccl, id, generation, created->id);
        !st.ok()) {
      return st;
    }
    return Sender{id, generation, std::move(created->comm), 0};
  }

  // Every layer of `blocks` blocks, in runs of at most kRunBlocks, layer-major.
  static std::vector<Piece> Plan(int32_t blocks, int32_t layers) {
    std::vector<Piece> plan;
    for (int32_t l = 0; l < layers; ++l)
      for (int32_t b = 0; b < blocks; b += kRunBlocks)
        plan.push_back({l, b, std::min(kRunBlocks, blocks - b)});
    return plan;
  }

  // The bytes of `piece` for a push named `salt`: K/V values in [-1, 1) that depend
  // on (salt, layer, block, element), in the layout's dtype.
  std::string Bytes(uint64_t salt, const Piece& piece) const {
    const int64_t per_block = layout_.LayerStride();
    std::string out(piece.num_blocks * layout_.LayerBytes(), '\0');
    std::mt19937_64 rng(salt * 1000003 + piece.layer * 7919 + piece.first_block);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (int64_t i = 0; i < piece.num_blocks * per_block; ++i) {
      const float x = u(rng);
      if (layout_.dtype == kv::KvDtype::kF32) {
        std::memcpy(out.data() + 4 * i, &x, 4);
      } else {
        const uint16_t h = layout_.dtype == kv::KvDtype::kF16 ? FloatToHalf(x) : FloatToBf16(x);
        std::memcpy(out.data() + 2 * i, &h, 2);
      }
    }
    return out;
  }

  // One push over the peer transport: BeginKv, then one thread Sends every payload in
  // seq order while `submitters` threads Accept and Submit them (thread j the pieces
  // j, j + submitters, ...: out of order across threads), then EndKv's answer. A Send
  // that fails stops the sending (the communicator is broken).
  absl::Status PushPeer(Sender& s, const Reservation& r, uint64_t salt, int submitters) {
    if (absl::Status st = worker_->BeginKv(r.lease_id, r.epoch, r.block_ids); !st.ok()) return st;
    const std::vector<Piece> plan =
        Plan(static_cast<int32_t>(r.block_ids.size()), layout_.n_layers);
    const uint64_t base = s.next_seq;
    s.next_seq += plan.size();
    std::thread sending([&] {
      auto buffer =
          *backend_->Allocate(kernels::MemoryKind::kStaging, kRunBlocks * layout_.LayerBytes());
      for (const Piece& p : plan) {
        const std::string bytes = Bytes(salt, p);
        std::memcpy(buffer->address(), bytes.data(), bytes.size());
        if (!s.comm->Send(*buffer, 0, bytes.size(), Clock::now() + kTimeout).ok()) return;
      }
    });
    std::vector<std::thread> submitting;
    for (int j = 0; j < submitters; ++j) {
      submitting.emplace_back([&, j] {
        for (size_t i = j; i < plan.size(); i += submitters) {
          const Piece& p = plan[i];
          PeerPayload payload{.seq = base + i,
                              .lease_id = r.lease_id,
                              .layer = p.layer,
                              .first_block = p.first_block,
                              .num_blocks = p.num_blocks,
                              .bytes = p.num_blocks * layout_.LayerBytes()};
          payload.accepted =
              worker_->AcceptPeerKv(r.lease_id, p.layer, p.first_block, p.num_blocks).ok();
          // A refusal has been reported to the worker (PeerKvFailed) by Submit itself.
          (void)receiver_->Submit(s.id, s.generation, payload);
        }
      });
    }
    for (auto& t : submitting) t.join();
    sending.join();
    return worker_->EndKv(r.lease_id);
  }

  // The same bytes through the host path.
  absl::Status PushHost(const Reservation& r, uint64_t salt) {
    if (absl::Status st = worker_->BeginKv(r.lease_id, r.epoch, r.block_ids); !st.ok()) return st;
    for (const Piece& p : Plan(static_cast<int32_t>(r.block_ids.size()), layout_.n_layers)) {
      if (absl::Status st =
              worker_->WriteKv(r.lease_id, p.layer, p.first_block, p.num_blocks, Bytes(salt, p));
          !st.ok()) {
        return st;
      }
    }
    return worker_->EndKv(r.lease_id);
  }

  absl::StatusOr<std::vector<int32_t>> Decode(const Reservation& r,
                                              const std::vector<int32_t>& prompt) {
    auto sink = std::make_shared<::tandem::testing::CollectingSink>();
    if (absl::Status st = worker_->StartDecode(r.lease_id, prompt, /*first_token=*/7,
                                               ::tandem::testing::Greedy(6), sink);
        !st.ok()) {
      worker_->Release(r.lease_id);
      return st;
    }
    return sink->Wait();
  }

  static engine::ModelWeights* weights_;
  transport::FakePeerNetwork network_;
  std::unique_ptr<kernels::Backend> backend_ = *kernels::MakeBackend({.device = "cpu"});
  std::unique_ptr<DecodeWorker> worker_;
  kv::KvLayout layout_;
  transport::StagingPool* staging_ = nullptr;
  std::unique_ptr<PeerKvReceiver> receiver_;
  int32_t total_blocks_ = 0;
};
engine::ModelWeights* PeerKvReceiverTest::weights_ = nullptr;

// A prompt of `n` tokens (its K/V is what the push wrote, whatever the ids).
std::vector<int32_t> Prompt(int32_t n) {
  std::vector<int32_t> p(n);
  for (int32_t i = 0; i < n; ++i) p[i] = 3 + (i * 37) % 200;
  return p;
}

TEST_F(PeerKvReceiverTest, ConcurrentSendersDecodeLikeTheSameBytesOverTheHostPath) {
  constexpr int kSenders = 4;
  const std::vector<int32_t> prompt = Prompt(5 * layout_.block_size - 3);  // 5 blocks
  std::vector<Reservation> peer(kSenders), host(kSenders);
  for (int i = 0; i < kSenders; ++i) {
    auto a = worker_->Reserve(prompt.size() + 1, std::chrono::seconds(120));
    auto b = worker_->Reserve(prompt.size() + 1, std::chrono::seconds(120));
    ASSERT_TRUE(a.ok() && b.ok());
    peer[i] = *a;
    host[i] = *b;
  }
  std::vector<absl::Status> pushed(kSenders);
  std::vector<std::thread> threads;
  for (int i = 0; i < kSenders; ++i) {
    threads.emplace_back([&, i] {
      auto s = Join(100 + i, 1);
      if (!s.ok()) {
        pushed[i] = s.status();
        return;
      }
      // Two pushes per sender on one communicator: seqs carry on across transfers.
      auto first = worker_->Reserve(prompt.size() + 1, std::chrono::seconds(120));
      if (!first.ok()) {
        pushed[i] = first.status();
        return;
      }
      absl::Status st = PushPeer(*s, *first, 999, /*submitters=*/2);
      worker_->Release(first->lease_id);
      pushed[i] = st.ok() ? PushPeer(*s, peer[i], i + 1, /*submitters=*/3) : st;
    });
  }
  for (int i = 0; i < kSenders; ++i) ASSERT_TRUE(PushHost(host[i], i + 1).ok());
  for (auto& t : threads) t.join();
  std::vector<std::vector<int32_t>> answers;
  for (int i = 0; i < kSenders; ++i) {
    ASSERT_TRUE(pushed[i].ok()) << "sender " << i << ": " << pushed[i];
    auto over_peer = Decode(peer[i], prompt);
    auto over_host = Decode(host[i], prompt);
    ASSERT_TRUE(over_peer.ok()) << over_peer.status();
    ASSERT_TRUE(over_host.ok()) << over_host.status();
    EXPECT_EQ(*over_peer, *over_host) << "sender " << i;
    answers.push_back(*over_peer);
  }
  // The check can fail: the K/V pushed decides the tokens.
  EXPECT_TRUE(std::any_of(answers.begin(), answers.end(), [&](const auto& a) {
    return a != answers[0];
  })) << "different K/V decoded to the same tokens: the comparison shows nothing";
  EXPECT_EQ(receiver_->stats().broken, 0);
  const auto pairings = network_.Pairings();
  EXPECT_EQ(pairings.size(), static_cast<size_t>(kSenders));
}

// A newer rendezvous of the same sender replaces its communicator while pushes are in
// flight on it: every push ends (OK or an error), none hangs, nothing leaks.
TEST_F(PeerKvReceiverTest, ARendezvousThatReplacesABusyCommunicatorFailsWhatWasInFlight) {
  const std::vector<int32_t> prompt = Prompt(6 * layout_.block_size);
  for (int round = 0; round < 3; ++round) {
    auto s = Join(7, 2 * round + 1);
    ASSERT_TRUE(s.ok()) << s.status();
    auto r = worker_->Reserve(prompt.size() + 1, std::chrono::seconds(120));
    ASSERT_TRUE(r.ok());
    absl::Status st;
    const auto t0 = Clock::now();
    std::thread pushing([&] { st = PushPeer(*s, *r, round, /*submitters=*/2); });
    std::this_thread::sleep_for(std::chrono::milliseconds(2 * round));
    // The sender gave up on its communicator (as a prefill worker does before it
    // rendezvouses again); the receiver learns of it from the new rendezvous.
    s->comm->Abort(absl::AbortedError("sender rebuilds"));
    auto newer = Join(7, 2 * round + 2);
    ASSERT_TRUE(newer.ok()) << newer.status();
    pushing.join();
    // Ends within one Recv deadline of the replacement, not after the seq-gap or lease.
    EXPECT_LT(Clock::now() - t0, 2 * kTimeout) << "the push outlived its communicator";
    if (!st.ok()) {
      EXPECT_TRUE(st.code() == absl::StatusCode::kAborted ||
                  st.code() == absl::StatusCode::kFailedPrecondition ||
                  st.code() == absl::StatusCode::kDataLoss ||
                  st.code() == absl::StatusCode::kDeadlineExceeded ||
                  st.code() == absl::StatusCode::kCancelled)
          << st;
    }
    EXPECT_TRUE(worker_->Release(r->lease_id));
    // The new communicator carries a whole push.
    auto next = worker_->Reserve(prompt.size() + 1, std::chrono::seconds(120));
    ASSERT_TRUE(next.ok());
    EXPECT_TRUE(PushPeer(*newer, *next, 50 + round, /*submitters=*/2).ok());
    EXPECT_TRUE(worker_->Release(next->lease_id));
  }
  EXPECT_EQ(receiver_->stats().rebuilt, 5);  // each Join after the first replaced one
  EXPECT_EQ(receiver_->stats().senders, 1);
}

// The receiver goes away (the worker stops) while payloads wait for Sends that never
// come: each accepted payload fails, EndKv answers, the staging buffers come back.
TEST_F(PeerKvReceiverTest, ADestroyedReceiverFailsThePendingPayloads) {
  auto s = Join(9, 1);
  ASSERT_TRUE(s.ok());
  auto r = worker_->Reserve(3 * layout_.block_size, std::chrono::seconds(120));
  ASSERT_TRUE(r.ok());
  ASSERT_TRUE(worker_->BeginKv(r->lease_id, r->epoch, r->block_ids).ok());
  for (int32_t layer = 0; layer < layout_.n_layers; ++layer) {
    ASSERT_TRUE(worker_->AcceptPeerKv(r->lease_id, layer, 0, 3).ok());
    ASSERT_TRUE(receiver_
                    ->Submit(s->id, s->generation,
                             {.seq = static_cast<uint64_t>(layer),
                              .lease_id = r->lease_id,
                              .layer = layer,
                              .first_block = 0,
                              .num_blocks = 3,
                              .bytes = 3 * layout_.LayerBytes(),
                              .accepted = true})
                    .ok());
  }
  absl::Status ended;
  std::thread ending([&] { ended = worker_->EndKv(r->lease_id); });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const auto t0 = Clock::now();
  receiver_.reset();
  ending.join();
  EXPECT_LT(Clock::now() - t0, kTimeout) << "the receiver waited out a Recv's deadline";
  EXPECT_FALSE(ended.ok());
  EXPECT_TRUE(worker_->Release(r->lease_id));
}

// More senders than kMaxSenders rendezvous from several threads while the first one
// is busy (its payloads named, its Sends not yet made): idle communicators are evicted,
// least recently used first, so every rendezvous gets in; the busy one, though least
// recently used, survives and completes its push.
TEST_F(PeerKvReceiverTest, MoreSendersThanTheLimitEvictIdleCommunicatorsNotBusyOnes) {
  auto busy = Join(5000, 1);
  ASSERT_TRUE(busy.ok()) << busy.status();
  auto r = worker_->Reserve(2 * layout_.block_size, std::chrono::seconds(120));
  ASSERT_TRUE(r.ok());
  ASSERT_TRUE(worker_->BeginKv(r->lease_id, r->epoch, r->block_ids).ok());
  const std::vector<Piece> plan = Plan(2, layout_.n_layers);
  for (size_t i = 0; i < plan.size(); ++i) {
    const Piece& p = plan[i];
    ASSERT_TRUE(worker_->AcceptPeerKv(r->lease_id, p.layer, p.first_block, p.num_blocks).ok());
    ASSERT_TRUE(receiver_
                    ->Submit(busy->id, busy->generation,
                             {.seq = i,
                              .lease_id = r->lease_id,
                              .layer = p.layer,
                              .first_block = p.first_block,
                              .num_blocks = p.num_blocks,
                              .bytes = p.num_blocks * layout_.LayerBytes(),
                              .accepted = true})
                    .ok());
  }
  constexpr int kThreads = 4;
  constexpr int kEach = (PeerKvReceiver::kMaxSenders + 16) / kThreads;
  std::atomic<int> refused{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kEach; ++i)
        if (!Join(1000 + t * kEach + i, 1).ok()) ++refused;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(refused.load(), 0);
  EXPECT_EQ(receiver_->stats().senders, static_cast<int32_t>(PeerKvReceiver::kMaxSenders));
  EXPECT_EQ(receiver_->stats().broken, 80 + 1 - PeerKvReceiver::kMaxSenders);  // the evicted
  // The busy communicator is still there: its Sends pair and its push completes, while
  // more rendezvous keep evicting around it.
  std::thread more([&] {
    for (int i = 0; i < 20; ++i)
      if (!Join(2000 + i, 1).ok()) ++refused;
  });
  auto buffer =
      *backend_->Allocate(kernels::MemoryKind::kStaging, kRunBlocks * layout_.LayerBytes());
  for (const Piece& p : plan) {
    EXPECT_TRUE(
        busy->comm->Send(*buffer, 0, p.num_blocks * layout_.LayerBytes(), Clock::now() + kTimeout)
            .ok());
  }
  more.join();
  EXPECT_EQ(refused.load(), 0);
  EXPECT_TRUE(worker_->EndKv(r->lease_id).ok());
  EXPECT_TRUE(worker_->Release(r->lease_id));
}

}  // namespace
}  // namespace tandem::decode
