#include "router/fake_workers.h"

#include "common/util/strings.h"

namespace tandem::router {

// --- FakeScheduler ---

FakeScheduler::FakeScheduler() : thread_([this] { Run(); }) {}

FakeScheduler::~FakeScheduler() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void FakeScheduler::At(Clock::time_point when, std::function<void()> fn) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    items_.push({when, seq_++, std::move(fn)});
  }
  cv_.notify_all();
}

void FakeScheduler::Run() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    if (items_.empty()) {
      cv_.wait(lock);
      continue;
    }
    const Clock::time_point when = items_.top().when;
    if (Clock::now() < when) {
      cv_.wait_until(lock, when);
      continue;
    }
    std::function<void()> fn = std::move(const_cast<Item&>(items_.top()).fn);
    items_.pop();
    lock.unlock();
    fn();
    lock.lock();
  }
}

namespace {

// A fake call: ends once, by its own course or by Cancel.
class FakeCall : public WorkerCall {
 public:
  // Runs (once, outside the lock) on the first Cancel of a call that has not ended.
  void OnCancel(std::function<void()> f) {
    std::lock_guard<std::mutex> lock(mu_);
    on_cancel_ = std::move(f);
  }
  void Cancel() override {
    std::function<void()> f;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (ended_ || cancelled_) return;
      cancelled_ = true;
      f = on_cancel_;
    }
    f();
  }
  // True for the first caller: it ends the call.
  bool TakeEnd() {
    std::lock_guard<std::mutex> lock(mu_);
    if (ended_) return false;
    ended_ = true;
    return true;
  }
  bool cancelled() {
    std::lock_guard<std::mutex> lock(mu_);
    return cancelled_;
  }

 private:
  std::mutex mu_;
  bool ended_ = false, cancelled_ = false;
  std::function<void()> on_cancel_;
};

}  // namespace

// One Decode stream: a token per tick until max_tokens, a break, or the end of the call.
struct FakeDecodeClient::Stream {
  std::shared_ptr<FakeCall> call;
  std::function<void(DecodeChunk)> chunk;
  std::function<void(absl::Status)> done;
  FakeDecodeBehaviour b;
  int32_t max_tokens = 0;
  int32_t sent = 1;  // the first token came from prefill (0: prefilled here, sent first)
  int chunks = 0;
  std::shared_ptr<Counts> counts;
  FakeScheduler* scheduler = nullptr;
  std::shared_ptr<Stream> self;  // a stall keeps itself until it ends

  void End(absl::Status s) {
    if (!call->TakeEnd()) return;
    --counts->live;
    done(std::move(s));
    self.reset();
  }

  static void Tick(const std::shared_ptr<Stream>& st) {
    if (st->call->cancelled()) {  // the cancel's own End may have found the stream gone
      st->End(absl::CancelledError("fake decode: cancelled"));
      return;
    }
    if (st->b.break_after >= 0 && st->chunks >= st->b.break_after) {
      st->End(st->b.break_status);
      return;
    }
    DecodeChunk c;
    const int32_t i = st->sent - 1;
    c.tokens.push_back(i < 0 ? st->b.first_token
                       : st->b.tokens.empty()
                           ? 1000 + i
                           : st->b.tokens[static_cast<size_t>(i) % st->b.tokens.size()]);
    ++st->sent;
    ++st->chunks;
    const bool last = st->sent >= st->max_tokens;
    if (last) c.finish = engine::FinishReason::kLength;
    st->chunk(std::move(c));
    if (last) {
      st->End(absl::OkStatus());
      return;
    }
    st->scheduler->After(st->b.interval, [st] { Tick(st); });
  }
};

// --- FakePrefillClient ---

void FakePrefillClient::Set(FakePrefillBehaviour b) {
  std::lock_guard<std::mutex> lock(mu_);
  behaviour_ = b;
}

absl::StatusOr<WorkerLoad> FakePrefillClient::Poll(std::chrono::milliseconds) {
  if (!healthy_) return absl::UnavailableError("fake prefill worker: down");
  std::lock_guard<std::mutex> lock(mu_);
  return WorkerLoad{
      .num_blocks = 1024, .block_size = 16, .free_blocks = 1024, .kv_layout = behaviour_.kv_layout};
}

std::shared_ptr<WorkerCall> FakePrefillClient::Prefill(
    const PrefillArgs& args, std::function<void(absl::StatusOr<PrefillResult>)> done) {
  FakePrefillBehaviour b;
  {
    std::lock_guard<std::mutex> lock(mu_);
    b = behaviour_;
  }
  ++counts_->calls;
  // A prefill into a reservation that is not (or no longer) held fails, as the decode
  // worker would refuse the KV.
  if (lease_live_ && !lease_live_(args.decode_address, args.reservation->lease_id)) {
    b.kind = FakePrefillBehaviour::kError;
    b.error = absl::NotFoundError("fake prefill: the reservation is not held");
  }
  auto call = std::make_shared<FakeCall>();
  auto answer = std::make_shared<decltype(done)>(std::move(done));
  // The pending answer holds the call; the cancel handler only a weak reference.
  auto finish = [call, answer](absl::StatusOr<PrefillResult> r) {
    if (call->TakeEnd()) (*answer)(std::move(r));
  };
  std::weak_ptr<FakeCall> weak = call;
  call->OnCancel(
      [scheduler = scheduler_, counts = counts_, weak, answer, ignore = b.ignore_cancel] {
        ++counts->cancels;
        if (ignore) return;
        scheduler->After(std::chrono::microseconds(0), [weak, answer] {
          auto c = weak.lock();
          if (c != nullptr && c->TakeEnd())
            (*answer)(absl::CancelledError("fake prefill: cancelled"));
        });
      });
  switch (b.kind) {
    case FakePrefillBehaviour::kAnswer: {
      PrefillResult r;
      r.first_token = b.first_token;
      r.finish = b.finish;
      r.cached_tokens = b.cached_tokens;
      scheduler_->After(b.delay, [finish, r] { finish(r); });
      break;
    }
    case FakePrefillBehaviour::kUnavailable:
      scheduler_->After(b.delay,
                        [finish] { finish(absl::UnavailableError("fake prefill: unreachable")); });
      break;
    case FakePrefillBehaviour::kError:
      scheduler_->After(b.delay, [finish, error = b.error] { finish(error); });
      break;
    case FakePrefillBehaviour::kStall:
      scheduler_->At(
          FakeScheduler::Clock::now() + std::chrono::duration_cast<FakeScheduler::Clock::duration>(
                                            args.deadline - std::chrono::system_clock::now()),
          [finish] { finish(absl::DeadlineExceededError("fake prefill: deadline")); });
      break;
  }
  return call;
}

// --- FakeDecodeClient ---

void FakeDecodeClient::Set(FakeDecodeBehaviour b) {
  std::lock_guard<std::mutex> lock(mu_);
  behaviour_ = std::move(b);
}

bool FakeDecodeClient::HoldsLease(uint64_t lease_id) {
  std::lock_guard<std::mutex> lock(mu_);
  return leases_.contains(lease_id);
}

int FakeDecodeClient::outstanding_leases() {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int>(leases_.size());
}

absl::StatusOr<WorkerLoad> FakeDecodeClient::Poll(std::chrono::milliseconds) {
  if (!healthy_) return absl::UnavailableError("fake decode worker: down");
  std::lock_guard<std::mutex> lock(mu_);
  return WorkerLoad{.num_blocks = behaviour_.num_blocks,
                    .block_size = behaviour_.block_size,
                    .free_blocks = behaviour_.num_blocks,
                    .kv_layout = behaviour_.kv_layout};
}

void FakeDecodeClient::Reserve(const ReserveArgs& args,
                               std::function<void(absl::StatusOr<Reservation>)> done) {
  ++counts_->reserves;
  absl::StatusOr<Reservation> answer;
  FakeScheduler::Clock::time_point when = FakeScheduler::Clock::now();
  {
    std::lock_guard<std::mutex> lock(mu_);
    switch (behaviour_.reserve) {
      case FakeDecodeBehaviour::kReserve:
      case FakeDecodeBehaviour::kReserveLate: {
        Reservation r;
        r.lease_id = next_lease_++;
        const int32_t blocks =
            (args.num_tokens + behaviour_.block_size - 1) / behaviour_.block_size;
        for (int32_t i = 0; i < blocks; ++i) r.block_ids.push_back(i);
        r.epoch = 7;
        if (!behaviour_.forget_leases) leases_.insert(r.lease_id);
        if (args.key != 0 && !behaviour_.forget_leases) lease_of_key_[args.key] = r.lease_id;
        if (behaviour_.reserve == FakeDecodeBehaviour::kReserve) {
          answer = std::move(r);
          break;
        }
        [[fallthrough]];  // reserved, but answered past the deadline
      }
      case FakeDecodeBehaviour::kStall:  // no answer: the caller's deadline ends it
        answer = absl::DeadlineExceededError("fake decode: reserve deadline");
        when += std::chrono::duration_cast<FakeScheduler::Clock::duration>(
            args.deadline - std::chrono::system_clock::now());
        break;
      case FakeDecodeBehaviour::kExhausted:
        answer = absl::ResourceExhaustedError("fake decode: no room");
        break;
      case FakeDecodeBehaviour::kUnavailable:
        answer = absl::UnavailableError("fake decode: unreachable");
        break;
    }
  }
  scheduler_->At(when, [done = std::move(done), answer = std::move(answer)]() mutable {
    done(std::move(answer));
  });
}

void FakeDecodeClient::Release(const ReleaseArgs& args, std::function<void(absl::Status)> done) {
  absl::Status answer;
  if (release_unreachable_) {
    answer = absl::UnavailableError("fake decode: unreachable");
  } else {
    ++(args.lease_id != 0 ? counts_->releases : counts_->abandons);
    std::lock_guard<std::mutex> lock(mu_);
    if (args.lease_id != 0) {
      leases_.erase(args.lease_id);
    } else if (auto it = lease_of_key_.find(args.key); it != lease_of_key_.end()) {
      leases_.erase(it->second);
      lease_of_key_.erase(it);
    }
  }
  if (done) {
    scheduler_->After(std::chrono::microseconds(0),
                      [done = std::move(done), answer] { done(answer); });
  }
}

std::shared_ptr<WorkerCall> FakeDecodeClient::Decode(const DecodeArgs& args,
                                                     std::function<void(DecodeChunk)> chunk,
                                                     std::function<void(absl::Status)> done) {
  FakeDecodeBehaviour b;
  bool known = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    b = behaviour_;
    known = leases_.erase(args.lease_id) > 0;  // Decode consumes the lease
  }
  ++counts_->streams;
  ++counts_->live;
  auto st = std::make_shared<Stream>();
  st->call = std::make_shared<FakeCall>();
  st->chunk = std::move(chunk);
  st->done = std::move(done);
  st->b = b;
  st->max_tokens = args.params->max_tokens;
  if (!args.first_token.has_value()) {
    st->sent = 0;
    ++counts_->local;
  }
  st->counts = counts_;
  st->scheduler = scheduler_;
  std::weak_ptr<Stream> weak = st;
  st->call->OnCancel([weak, counts = counts_, scheduler = scheduler_] {
    ++counts->cancels;
    scheduler->After(std::chrono::microseconds(0), [weak] {
      if (auto s = weak.lock()) s->End(absl::CancelledError("fake decode: cancelled"));
    });
  });
  std::shared_ptr<WorkerCall> call = st->call;
  if (!known) {
    scheduler_->After(std::chrono::microseconds(0),
                      [st] { st->End(absl::NotFoundError("fake decode: unknown lease")); });
  } else if (b.stall) {
    // Held by the deadline event, or by nobody but the caller's cancel (weak above:
    // a stall without a deadline ends only by Cancel, so keep it alive until then).
    st->self = st;
    if (args.deadline.has_value()) {
      scheduler_->At(
          FakeScheduler::Clock::now() + std::chrono::duration_cast<FakeScheduler::Clock::duration>(
                                            *args.deadline - std::chrono::system_clock::now()),
          [st] { st->End(absl::DeadlineExceededError("fake decode: deadline")); });
    }
  } else {
    scheduler_->After(b.interval, [st] { Stream::Tick(st); });
  }
  return call;
}

// --- FakeWorkers ---

WorkerClientFactory FakeWorkers::Factory() {
  return {[this](const std::string& address) -> std::unique_ptr<PrefillClient> {
            auto c = std::make_unique<FakePrefillClient>(&scheduler);
            c->SetLeaseCheck([this](const std::string& decode_address, uint64_t lease) {
              FakeDecodeClient* d = decode(decode_address);
              return d != nullptr && d->HoldsLease(lease);
            });
            std::lock_guard<std::mutex> lock(mu_);
            prefill_[address] = c.get();
            return c;
          },
          [this](const std::string& address) -> std::unique_ptr<DecodeClient> {
            auto c = std::make_unique<FakeDecodeClient>(&scheduler);
            std::lock_guard<std::mutex> lock(mu_);
            decode_[address] = c.get();
            return c;
          }};
}

FakePrefillClient* FakeWorkers::prefill(const std::string& address) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = prefill_.find(address);
  return it == prefill_.end() ? nullptr : it->second;
}

FakeDecodeClient* FakeWorkers::decode(const std::string& address) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = decode_.find(address);
  return it == decode_.end() ? nullptr : it->second;
}

}  // namespace tandem::router
