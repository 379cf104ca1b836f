#include "prefill_worker/prefill_worker.h"

#include "common/util/status_macros.h"
#include "common/util/strings.h"

namespace tandem::prefill {

namespace {
constexpr auto kIdleWait = std::chrono::milliseconds(50);

double Ms(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}
}  // namespace

// Opens each scheduled prompt's transfer before the forward pass and feeds it layers
// as the pass completes them.
class PrefillWorker::Observer : public engine::StepObserver {
 public:
  explicit Observer(PrefillWorker* w) : w_(w) {}

  // A prompt may take several steps (chunked prefill): its transfer opens with the
  // first chunk (which also sends the blocks that came from the prefix cache), and
  // each step sends the blocks its chunk completed.
  void OnScheduled(std::span<engine::Sequence* const> sequences,
                   std::span<const int64_t> num_tokens) override {
    active_.clear();
    const auto now = Clock::now();
    const int32_t bs = w_->layout().block_size;
    for (size_t i = 0; i < sequences.size(); ++i) {
      engine::Sequence* seq = sequences[i];
      auto it = w_->pending_.find(seq->id);
      if (it == w_->pending_.end()) continue;
      Pending* p = it->second.get();
      const int32_t n = static_cast<int32_t>((seq->prompt.size() + bs - 1) / bs);
      const bool first_chunk = p->transfer == nullptr;
      if (first_chunk) {
        if (!p->error.ok()) continue;
        p->started_at = now;
        // Prefill() checked the destination's blocks against the prompt.
        const std::vector<int32_t>& table = w_->engine_->BlockTable(seq->id);
        if (static_cast<int32_t>(table.size()) < n) {
          p->error = absl::InternalError(
              StrCat("prefill: the engine holds ", table.size(), " blocks for a prompt of ", n));
          continue;
        }
        transport::KvDestination dst = p->destination;
        dst.block_ids.resize(n);
        auto t = w_->sender_->Begin(dst, std::vector<int32_t>(table.begin(), table.begin() + n));
        if (!t.ok()) {
          p->error = t.status();
          continue;
        }
        p->transfer = *std::move(t);
      }
      const int64_t begin = first_chunk ? 0 : seq->num_cached;
      const int64_t end = seq->num_cached + num_tokens[i];
      // Blocks the decode worker already caches are not sent.
      const int32_t first =
          std::max(static_cast<int32_t>(begin / bs), p->destination.cached_blocks);
      const int32_t last = std::min<int32_t>(n, static_cast<int32_t>((end + bs - 1) / bs));
      if (last > first) active_.push_back({p->transfer.get(), first, last - first});
    }
  }

  void OnLayerKv(int32_t layer, const std::shared_ptr<kernels::Event>& ready) override {
    for (const Send& s : active_) s.transfer->SendLayer(layer, s.first, s.count, ready);
  }

 private:
  struct Send {
    transport::KvTransfer* transfer;
    int32_t first, count;
  };
  PrefillWorker* const w_;
  std::vector<Send> active_;
};

absl::StatusOr<std::unique_ptr<PrefillWorker>> PrefillWorker::Create(
    const engine::ModelWeights& weights, const engine::EngineOptions& options,
    const SenderFactory& make_sender, TransferObserver on_transfer) {
  std::unique_ptr<PrefillWorker> w(new PrefillWorker());
  w->on_transfer_ = std::move(on_transfer);
  ASSIGN_OR_RETURN(w->engine_, engine::Engine::Create(weights, options));
  ASSIGN_OR_RETURN(w->sender_, make_sender(w->engine_->kv_storage()));
  w->observer_ = std::make_unique<Observer>(w.get());
  w->stats_.engine = w->engine_->Stats();
  w->thread_ =
      std::make_unique<engine::EngineThread>([p = w.get()] { return p->Iterate(); }, kIdleWait);
  return w;
}

PrefillWorker::~PrefillWorker() {
  thread_->Stop();
  sender_.reset();  // joins the transport thread; late completions go nowhere
  for (auto& [id, p] : pending_) {
    p->promise.set_value(absl::UnavailableError("prefill worker stopping"));
  }
}

absl::StatusOr<PrefillResult> PrefillWorker::Prefill(std::vector<int32_t> prompt,
                                                     const engine::SamplingParams& params,
                                                     const transport::KvDestination& destination,
                                                     uint64_t cache_salt,
                                                     std::function<bool()> abandoned) {
  // The destination must name a block for each of the prompt's blocks, and may say that
  // its leading ones are cached there already; checked before anything is computed or
  // anything is dialled.
  const int64_t bs = layout().block_size;
  const int64_t n = (static_cast<int64_t>(prompt.size()) + bs - 1) / bs;
  if (static_cast<int64_t>(destination.block_ids.size()) < n) {
    return absl::InvalidArgumentError(
        StrCat("destination.block_ids: ", destination.block_ids.size(), " blocks for a ",
               prompt.size(), "-token prompt that needs ", n));
  }
  if (destination.cached_blocks < 0 || destination.cached_blocks > n) {
    return absl::InvalidArgumentError(StrCat("destination.cached_blocks: must be between 0 and ", n,
                                             " (the prompt's blocks), got ",
                                             destination.cached_blocks));
  }
  // The prompt and its parameters too, before the destination is contacted.
  RETURN_IF_ERROR(engine_->ValidateRequest(prompt, params));
  RETURN_IF_ERROR(sender_->Connect(destination.address));
  auto p = std::make_unique<Pending>();
  p->destination = destination;
  p->abandoned = std::move(abandoned);
  p->queued_at = Clock::now();
  p->prompt_tokens = static_cast<int64_t>(prompt.size());
  auto future = p->promise.get_future();
  // std::function must be copyable: the request travels in a shared holder.
  auto holder = std::make_shared<std::unique_ptr<Pending>>(std::move(p));
  thread_->Post([this, holder, prompt = std::move(prompt), params, cache_salt]() mutable {
    std::unique_ptr<Pending> p = std::move(*holder);
    auto id = engine_->AddRequest(std::move(prompt), params, engine::RequestMode::kPrefillOnly,
                                  cache_salt);
    if (!id.ok()) {
      p->promise.set_value(id.status());
      return;
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      stats_.queued_prompt_tokens += p->prompt_tokens;
    }
    pending_[*id] = std::move(p);
  });
  return future.get();
}

bool PrefillWorker::Iterate() {
  // No more chunks for a prompt whose KV has nowhere to go or whose caller has gone: the
  // next Step reports it ended (cancelled), and its answer is the transfer's failure or
  // CANCELLED.
  for (auto& [id, p] : pending_) {
    if (p->stopped) continue;
    if (p->error.ok() && p->abandoned && p->abandoned()) {
      p->error =
          absl::CancelledError("prefill: the caller has gone (cancelled or past its deadline)");
    }
    if (!p->error.ok() || (p->transfer != nullptr && p->transfer->Failed())) {
      engine_->Cancel(id);
      p->stopped = true;
    }
  }
  if (engine_->HasWork()) {
    const std::vector<engine::TokenEvent> events = engine_->Step(observer_.get());
    const auto now = Clock::now();
    for (const engine::TokenEvent& ev : events) {
      auto it = pending_.find(ev.id);
      if (it == pending_.end()) continue;
      Pending* p = it->second.get();
      if (!ev.error.ok()) p->error = ev.error;
      p->result.first = ev;
      if (const engine::Sequence* seq = engine_->Find(ev.id)) {
        p->result.cached_tokens = seq->prefix_hit_tokens;
      }
      p->result.queue_ms = Ms(p->queued_at, p->started_at);
      p->result.compute_ms = Ms(p->started_at, now);
      {
        std::lock_guard<std::mutex> lock(mu_);
        stats_.queued_prompt_tokens -= p->prompt_tokens;
      }
      const kv::SeqId id = ev.id;
      if (p->transfer == nullptr) {
        Done(id, p->error.ok() ? absl::InternalError("no KV transfer") : p->error, {});
        continue;
      }
      p->transfer->Finish([this, id](absl::Status st, transport::KvTransferStats stats) {
        thread_->Post([this, id, st = std::move(st), stats] { Done(id, st, stats); });
      });
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  stats_.engine = engine_->Stats();
  return engine_->HasWork();
}

void PrefillWorker::Done(kv::SeqId id, absl::Status status, transport::KvTransferStats stats) {
  auto it = pending_.find(id);
  if (it == pending_.end()) return;
  // A failed pass explains a failed transfer (whose layers it never filled).
  if (!it->second->error.ok()) status = it->second->error;
  engine_->Release(id);
  if (on_transfer_) on_transfer_(stats, status);
  std::unique_ptr<Pending> p = std::move(it->second);
  pending_.erase(it);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (status.ok()) {
      stats_.kv_bytes_sent += stats.bytes;
    } else {
      ++stats_.kv_failures;
    }
    stats_.engine = engine_->Stats();
  }
  if (!status.ok()) {
    p->promise.set_value(status);
    return;
  }
  p->result.transfer_ms = stats.ms;
  p->result.kv_bytes = stats.bytes;
  p->promise.set_value(std::move(p->result));
}

PrefillWorkerStats PrefillWorker::Stats() const {
  const int64_t rebuilds = sender_->Stats().comm_rebuilds;
  std::lock_guard<std::mutex> lock(mu_);
  PrefillWorkerStats s = stats_;
  s.kv_comm_rebuilds = rebuilds;
  return s;
}

}  // namespace tandem::prefill
