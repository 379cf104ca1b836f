#include "decode_worker/decode_worker.h"

#include <optional>

#include "common/util/check.h"
#include "common/util/random_id.h"
#include "common/util/status_macros.h"
#include "common/util/strings.h"

namespace tandem::decode {

namespace {
using Clock = std::chrono::steady_clock;
constexpr auto kIdleWait = std::chrono::milliseconds(50);
}  // namespace

absl::StatusOr<std::unique_ptr<DecodeWorker>> DecodeWorker::Create(
    const engine::ModelWeights& weights, const DecodeWorkerOptions& options) {
  std::unique_ptr<DecodeWorker> w(new DecodeWorker());
  w->options_ = options;
  ASSIGN_OR_RETURN(w->engine_, engine::Engine::Create(weights, options.engine));
  w->layout_ = w->engine_->kv_layout();
  w->epoch_ = RandomNonZero64();
  w->stats_.engine = w->engine_->Stats();
  w->thread_ =
      std::make_unique<engine::EngineThread>([p = w.get()] { return p->Iterate(); }, kIdleWait);
  return w;
}

DecodeWorker::~DecodeWorker() {
  thread_->Stop();
  for (auto& [id, d] : sinks_) d.sink->OnError(absl::UnavailableError("decode worker stopping"));
}

absl::StatusOr<Reservation> DecodeWorker::Reserve(int64_t num_tokens,
                                                  std::chrono::milliseconds lease,
                                                  std::span<const int32_t> prompt,
                                                  uint64_t cache_salt, uint64_t key) {
  if (lease <= std::chrono::milliseconds(0) || lease > options_.max_lease) {
    return absl::InvalidArgumentError(
        StrCat("lease_ms: must be in [1, ", options_.max_lease.count(), "]"));
  }
  absl::StatusOr<Reservation> result;
  RunOnEngine([&] {
    if (key != 0) {
      std::lock_guard<std::mutex> lock(mu_);
      if (abandoned_.contains(key)) {
        result = absl::CancelledError("the caller abandoned this reservation before it was made");
        return;
      }
    }
    int32_t cached = 0;
    auto id = engine_->Reserve(num_tokens, prompt, cache_salt, &cached);
    if (!id.ok()) {
      result = id.status();
      return;
    }
    std::lock_guard<std::mutex> lock(mu_);
    // A random id, not the engine's sequential one: a lease cannot be guessed.
    uint64_t lease_id = RandomNonZero64();
    while (leases_.contains(lease_id) || decoding_.contains(lease_id)) lease_id = RandomNonZero64();
    Reservation r{lease_id, epoch_, engine_->BlockTable(*id), cached};
    Lease& l = leases_[lease_id];
    l.seq = *id;
    l.blocks = r.block_ids;
    l.cached_blocks = cached;
    l.expires = Clock::now() + lease;
    l.duration = lease;
    l.layer_received.assign(layout_.n_layers, 0);
    l.key = key;
    result = std::move(r);
  });
  return result;
}

bool DecodeWorker::Release(uint64_t lease_id) {
  bool released = false;
  RunOnEngine([&] {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = leases_.find(lease_id);
    if (it == leases_.end()) return;
    released = engine_->Release(it->second.seq);
    TANDEM_CHECK(released);
    leases_.erase(it);
  });
  return released;
}

bool DecodeWorker::Abandon(uint64_t key) {
  if (key == 0) return false;
  bool released = false;
  RunOnEngine([&] {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = leases_.begin(); it != leases_.end(); ++it) {
      if (it->second.key != key) continue;
      // Past BeginKv the caller did learn of the lease: it is no longer abandoned.
      if (it->second.expected_blocks >= 0) return;
      released = engine_->Release(it->second.seq);
      TANDEM_CHECK(released);
      leases_.erase(it);
      return;
    }
    // Not made yet (or already gone): a Reserve under this key that runs later fails.
    if (abandoned_.insert(key).second) {
      abandoned_order_.push_back(key);
      if (abandoned_order_.size() > kAbandonedKeys) {
        abandoned_.erase(abandoned_order_.front());
        abandoned_order_.pop_front();
      }
    }
  });
  return released;
}

absl::StatusOr<DecodeWorker::Lease*> DecodeWorker::WritableLease(uint64_t lease_id) {
  auto it = leases_.find(lease_id);
  if (it == leases_.end()) {
    ++stats_.kv_failures;
    return absl::NotFoundError(
        StrCat("lease ", lease_id, ": unknown, expired or already decoding; KV refused"));
  }
  return &it->second;
}

absl::Status DecodeWorker::BeginKv(uint64_t lease_id, uint64_t epoch,
                                   std::span<const int32_t> block_ids) {
  std::lock_guard<std::mutex> lock(mu_);
  if (epoch != epoch_) {
    ++stats_.kv_failures;
    return absl::NotFoundError(
        StrCat("epoch: ", epoch, " is not this decode worker's (", epoch_,
               "): the reservation was made in an earlier process; KV refused"));
  }
  ASSIGN_OR_RETURN(Lease * lease, WritableLease(lease_id));
  Lease& l = *lease;
  if (l.peer_in_flight > 0) {
    ++stats_.kv_failures;
    return absl::FailedPreconditionError(
        StrCat("lease ", lease_id, ": another transfer into it is still in flight"));
  }
  if (block_ids.size() < static_cast<size_t>(l.cached_blocks) || block_ids.empty() ||
      block_ids.size() > l.blocks.size() ||
      !std::equal(block_ids.begin(), block_ids.end(), l.blocks.begin())) {
    ++stats_.kv_failures;
    return absl::InvalidArgumentError(
        StrCat("block_ids: not the blocks reserved under lease ", lease_id));
  }
  // A new push (the router may retry a prefill into the same reservation) starts clean.
  l.expected_blocks = static_cast<int32_t>(block_ids.size());
  l.layer_received.assign(layout_.n_layers, 0);
  l.write_error = absl::OkStatus();
  l.complete = false;
  return absl::OkStatus();
}

absl::Status DecodeWorker::CountKv(uint64_t lease_id, int32_t layer, int32_t first_block,
                                   int32_t num_blocks, int64_t bytes, bool received) {
  ASSIGN_OR_RETURN(Lease * lease, WritableLease(lease_id));
  Lease& l = *lease;
  const int64_t slice_bytes = layout_.LayerBytes();
  absl::Status bad;
  if (l.expected_blocks < 0) {
    bad = absl::InvalidArgumentError("block_ids: the first chunk must name the blocks");
  } else if (layer < 0 || layer >= layout_.n_layers) {
    bad = absl::InvalidArgumentError(
        StrCat("layer: ", layer, " outside [0, ", layout_.n_layers, ")"));
  } else if (first_block < l.cached_blocks || num_blocks < 1 ||
             int64_t{first_block} + num_blocks > l.expected_blocks) {
    bad = absl::InvalidArgumentError(StrCat("first_block/num_blocks: [", first_block, ", ",
                                            int64_t{first_block} + num_blocks, ") outside blocks [",
                                            l.cached_blocks, ", ", l.expected_blocks,
                                            ") of the transfer (the rest are cached here)"));
  } else if (bytes != num_blocks * slice_bytes) {
    bad = absl::InvalidArgumentError(
        StrCat("payload: ", bytes, " bytes, expected ", num_blocks * slice_bytes));
  }
  if (!bad.ok()) {
    ++stats_.kv_failures;
    return bad;
  }
  l.layer_received[layer] += num_blocks;
  l.expires = Clock::now() + l.duration;
  if (received) stats_.kv_bytes_received += bytes;
  return absl::OkStatus();
}

void DecodeWorker::RecordWriteError(uint64_t lease_id, const absl::Status& st) {
  auto it = leases_.find(lease_id);
  if (!st.ok() && it != leases_.end() && it->second.write_error.ok()) {
    ++stats_.kv_failures;
    it->second.write_error = st;
  }
}

absl::Status DecodeWorker::WriteKv(uint64_t lease_id, int32_t layer, int32_t first_block,
                                   int32_t num_blocks, std::string payload) {
  std::unique_lock<std::mutex> lock(mu_);
  // Backpressure: the engine thread applies writes between steps; a sender waits
  // while that much is still queued.
  kv_drained_.wait(lock, [&] { return pending_kv_bytes_ < kMaxPendingKvBytes; });
  const int64_t size = static_cast<int64_t>(payload.size());
  RETURN_IF_ERROR(CountKv(lease_id, layer, first_block, num_blocks, size, /*received=*/true));
  pending_kv_bytes_ += size;
  // The lease's block ids are the reservation's table in order, as BeginKv checked.
  // Leases are removed only on the engine thread, so one found here stays while the
  // copy runs outside `mu_`.
  thread_->Post([this, lease_id, layer, first_block, num_blocks, size,
                 payload = std::move(payload)] {
    std::optional<kv::SeqId> seq;  // none: expired or released, nothing to write
    {
      std::lock_guard<std::mutex> l(mu_);
      if (auto it = leases_.find(lease_id); it != leases_.end()) seq = it->second.seq;
    }
    const absl::Status st =
        seq.has_value() ? engine_->WriteReservedKv(
                              *seq, layer, first_block, num_blocks,
                              {reinterpret_cast<const uint8_t*>(payload.data()), payload.size()})
                        : absl::OkStatus();
    {
      std::lock_guard<std::mutex> l(mu_);
      pending_kv_bytes_ -= size;
      RecordWriteError(lease_id, st);
    }
    kv_drained_.notify_all();
  });
  return absl::OkStatus();
}

absl::Status DecodeWorker::AcceptPeerKv(uint64_t lease_id, int32_t layer, int32_t first_block,
                                        int32_t num_blocks) {
  std::lock_guard<std::mutex> lock(mu_);
  RETURN_IF_ERROR(CountKv(lease_id, layer, first_block, num_blocks,
                          num_blocks * layout_.LayerBytes(), /*received=*/false));
  ++leases_[lease_id].peer_in_flight;
  return absl::OkStatus();
}

void DecodeWorker::PeerKvArrived(uint64_t lease_id, int32_t layer, int32_t first_block,
                                 int32_t num_blocks,
                                 std::shared_ptr<const kernels::Buffer> staging) {
  // Posted before the count goes down, so StartDecode (posted after EndKv saw the count
  // at zero) runs after this write.
  thread_->Post([this, lease_id, layer, first_block, num_blocks, staging = std::move(staging)] {
    std::optional<kv::SeqId> seq;  // none: expired or released, nothing to write
    {
      std::lock_guard<std::mutex> l(mu_);
      if (auto it = leases_.find(lease_id); it != leases_.end()) seq = it->second.seq;
    }
    const absl::Status st = seq.has_value() ? engine_->WriteReservedKv(*seq, layer, first_block,
                                                                       num_blocks, *staging, 0)
                                            : absl::OkStatus();
    std::lock_guard<std::mutex> l(mu_);
    RecordWriteError(lease_id, st);
  });
  std::lock_guard<std::mutex> lock(mu_);
  stats_.kv_bytes_received += num_blocks * layout_.LayerBytes();
  if (auto it = leases_.find(lease_id); it != leases_.end()) --it->second.peer_in_flight;
  kv_drained_.notify_all();
}

void DecodeWorker::PeerKvFailed(uint64_t lease_id, const absl::Status& status) {
  std::lock_guard<std::mutex> lock(mu_);
  RecordWriteError(lease_id, status);
  if (auto it = leases_.find(lease_id); it != leases_.end()) --it->second.peer_in_flight;
  kv_drained_.notify_all();
}

absl::StatusOr<transport::StagingPool*> DecodeWorker::MakeStaging(int32_t count, int64_t bytes) {
  absl::StatusOr<transport::StagingPool*> result;
  thread_->Run([&] {
    if (staging_ != nullptr) {
      result = absl::FailedPreconditionError("decode worker: staging made already");
      return;
    }
    auto pool = transport::StagingPool::Create(engine_->kv_storage(), count, bytes);
    if (!pool.ok()) {
      result = pool.status();
      return;
    }
    staging_ = *std::move(pool);
    result = staging_.get();
  });
  return result;
}

void DecodeWorker::AwaitPeerKv(uint64_t lease_id) {
  std::unique_lock<std::mutex> lock(mu_);
  WaitPeerKv(lease_id, lock);
}

void DecodeWorker::WaitPeerKv(uint64_t lease_id, std::unique_lock<std::mutex>& lock) {
  // Each peer payload arrives or fails within the transport's deadline.
  kv_drained_.wait(lock, [&] {
    auto it = leases_.find(lease_id);
    return it == leases_.end() || it->second.peer_in_flight == 0;
  });
}

absl::Status DecodeWorker::EndKv(uint64_t lease_id) {
  // Waited for and checked under one hold of the lock: no payload accepted in between.
  std::unique_lock<std::mutex> lock(mu_);
  WaitPeerKv(lease_id, lock);
  auto it = leases_.find(lease_id);
  if (it == leases_.end()) {
    ++stats_.kv_failures;
    return absl::NotFoundError(StrCat("lease ", lease_id, ": expired during the transfer"));
  }
  Lease& l = it->second;
  if (!l.write_error.ok()) return l.write_error;
  for (int32_t layer = 0; layer < layout_.n_layers; ++layer) {
    const int32_t expected = l.expected_blocks - l.cached_blocks;
    if (l.expected_blocks < 0 || l.layer_received[layer] < expected) {
      ++stats_.kv_failures;
      return absl::DataLossError(StrCat("lease ", lease_id, ": layer ", layer, " got ",
                                        l.layer_received[layer], " of ", expected, " blocks"));
    }
  }
  l.complete = true;
  return absl::OkStatus();
}

absl::Status DecodeWorker::Admit(uint64_t lease_id, std::vector<int32_t> prompt,
                                 std::optional<int32_t> first_token,
                                 const engine::SamplingParams& params,
                                 std::shared_ptr<TokenSink> sink) {
  kv::SeqId seq = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = leases_.find(lease_id);
    if (it == leases_.end()) {
      return absl::NotFoundError(
          StrCat("lease ", lease_id, ": unknown, expired or already decoding"));
    }
    const Lease& l = it->second;
    if (first_token.has_value() && !l.complete) {
      return absl::FailedPreconditionError(
          StrCat("lease ", lease_id, ": its KV has not fully arrived"));
    }
    // Prefilled here: no push may have begun (writes already handed over would land in
    // blocks the engine computes). Every chunk is counted only after BeginKv named the
    // blocks, so a push that began has set expected_blocks.
    if (!first_token.has_value() && l.expected_blocks >= 0) {
      return absl::FailedPreconditionError(
          StrCat("lease ", lease_id, ": a KV push has begun into it; it cannot be prefilled here"));
    }
    // Every write handed over before EndKv has run by now (commands run in order).
    if (!l.write_error.ok()) return l.write_error;
    seq = l.seq;
    leases_.erase(it);
  }
  const absl::Status admitted =
      first_token.has_value()
          ? engine_->AdmitPrefilled(seq, std::move(prompt), *first_token, params)
          : engine_->PrefillReserved(seq, std::move(prompt), params);
  if (!admitted.ok()) {
    engine_->Release(seq);
    return admitted;
  }
  sinks_[seq] = {std::move(sink), lease_id};
  decoding_[lease_id] = seq;
  return absl::OkStatus();
}

absl::Status DecodeWorker::StartDecode(uint64_t lease_id, std::vector<int32_t> prompt,
                                       std::optional<int32_t> first_token,
                                       const engine::SamplingParams& params,
                                       std::shared_ptr<TokenSink> sink) {
  absl::Status result;
  RunOnEngine([&] { result = Admit(lease_id, std::move(prompt), first_token, params, sink); });
  return result;
}

void DecodeWorker::BeginDecode(uint64_t lease_id, std::vector<int32_t> prompt,
                               std::optional<int32_t> first_token,
                               const engine::SamplingParams& params,
                               std::shared_ptr<TokenSink> sink) {
  thread_->Post([this, lease_id, prompt = std::move(prompt), first_token, params,
                 sink = std::move(sink)]() mutable {
    const absl::Status st = Admit(lease_id, std::move(prompt), first_token, params, sink);
    if (!st.ok()) sink->OnError(st);
  });
}

void DecodeWorker::CancelDecode(uint64_t lease_id) {
  thread_->Post([this, lease_id] {
    if (auto it = decoding_.find(lease_id); it != decoding_.end()) engine_->Cancel(it->second);
  });
}

void DecodeWorker::RunOnEngine(const std::function<void()>& fn) {
  thread_->Run([&] {
    fn();
    std::lock_guard<std::mutex> lock(mu_);
    stats_.engine = engine_->Stats();
  });
}

DecodeWorkerStats DecodeWorker::Stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  DecodeWorkerStats s = stats_;
  s.leases = static_cast<int32_t>(leases_.size());
  return s;
}

void DecodeWorker::ExpireLeases() {
  const auto now = Clock::now();
  for (auto it = leases_.begin(); it != leases_.end();) {
    auto next = std::next(it);
    if (it->second.expires <= now) {
      TANDEM_CHECK(engine_->Release(it->second.seq));
      ++stats_.expired_leases;
      leases_.erase(it);
    }
    it = next;
  }
}

bool DecodeWorker::Iterate() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    ExpireLeases();
  }
  if (engine_->HasWork()) {
    for (const engine::TokenEvent& ev : engine_->Step()) {
      auto it = sinks_.find(ev.id);
      if (it == sinks_.end()) continue;
      if (ev.error.ok()) {
        it->second.sink->OnToken(ev);
      } else {
        it->second.sink->OnError(ev.error);
      }
      if (ev.finished) {
        decoding_.erase(it->second.lease_id);
        sinks_.erase(it);
      }
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  stats_.engine = engine_->Stats();
  return engine_->HasWork();
}

}  // namespace tandem::decode
