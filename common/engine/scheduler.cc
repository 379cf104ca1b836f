#include "common/engine/scheduler.h"

#include <algorithm>

#include "common/util/check.h"

namespace tandem::engine {

void Scheduler::Enqueue(Sequence* seq) {
  seq->state = SequenceState::kWaiting;
  waiting_.push_back(seq);
}

void Scheduler::Remove(Sequence* seq) {
  Detach(seq);
  blocks_->Free(seq->id);
}

void Scheduler::Detach(Sequence* seq) {
  waiting_.erase(std::remove(waiting_.begin(), waiting_.end(), seq), waiting_.end());
  running_.erase(std::remove(running_.begin(), running_.end(), seq), running_.end());
}

void Scheduler::Preempt(Sequence* seq) {
  running_.erase(std::remove(running_.begin(), running_.end(), seq), running_.end());
  blocks_->Free(seq->id);
  seq->num_cached = 0;
  seq->state = SequenceState::kWaiting;
  ++seq->preemptions;
  ++preemptions_;
  // Back to the front of the queue — behind waiting sequences of a lower priority value,
  // which it must not hold up.
  auto at = std::find_if(waiting_.begin(), waiting_.end(), [seq](const Sequence* w) {
    return w->params.priority >= seq->params.priority;
  });
  waiting_.insert(at, seq);
}

ScheduledStep Scheduler::Schedule() {
  ScheduledStep step;
  // Stage 1: capacity. In running_'s order (priority, then age); the last — the
  // youngest of the highest priority value — gives way until the rest fit.
  size_t i = 0;
  while (i < running_.size()) {
    Sequence* seq = running_[i];
    // A draft needs room for its K/V too; without that room it is dropped first.
    if (!seq->draft.empty() &&
        !blocks_->CanAppend(seq->id, seq->size() + static_cast<int64_t>(seq->draft.size()))) {
      seq->draft.clear();
    }
    const int64_t need = seq->size() + static_cast<int64_t>(seq->draft.size());
    if (blocks_->CanAppend(seq->id, need)) {
      TANDEM_CHECK(blocks_->Append(seq->id, need).ok());
      ++i;
      continue;
    }
    Sequence* victim = running_.back();  // index ≥ i: not grown yet this step
    victim->draft.clear();
    Preempt(victim);
    step.preempted.push_back(victim);
  }
  int64_t budget = options_.max_batched_tokens;
  auto schedule = [&](Sequence* seq, int64_t n) {
    step.sequences.push_back(seq);
    step.num_tokens.push_back(n);
    budget -= n;
  };
  auto start = [&](Sequence* seq, int64_t n) {
    seq->state = SequenceState::kRunning;
    // Behind every running sequence of the same or a lower priority value.
    running_.insert(std::upper_bound(running_.begin(), running_.end(), seq,
                                     [](const Sequence* a, const Sequence* b) {
                                       return a->params.priority < b->params.priority;
                                     }),
                    seq);
    schedule(seq, n);
  };
  // Stage 2: decoding sequences first (one token each, plus its draft), then the next
  // chunk of every prompt being prefilled, then the queue.
  for (Sequence* seq : running_) {
    if (seq->num_uncomputed() == 1) schedule(seq, 1 + static_cast<int64_t>(seq->draft.size()));
  }
  for (Sequence* seq : running_) {
    if (seq->num_uncomputed() <= 1) continue;
    if (const int64_t n = ChunkOf(*seq, budget, step.sequences.empty()); n > 0) schedule(seq, n);
  }
  // Waiting sequences that already hold their blocks (prefilled elsewhere) go first and
  // out of order: they need no new memory to start, and running them is what frees it.
  // (Were they kept behind a fresh sequence that cannot get blocks — which they hold —
  // nothing would ever run again.)
  for (auto it = waiting_.begin();
       it != waiting_.end() && static_cast<int32_t>(running_.size()) < options_.max_running;) {
    Sequence* seq = *it;
    const int64_t n = blocks_->Has(seq->id) ? ChunkOf(*seq, budget, step.sequences.empty()) : 0;
    if (n == 0 || !blocks_->CanAppend(seq->id, seq->size())) {
      ++it;
      continue;
    }
    TANDEM_CHECK(blocks_->Append(seq->id, seq->size()).ok());
    it = waiting_.erase(it);
    start(seq, n);
  }
  // Then fresh (or preempted) sequences, in arrival order.
  while (!waiting_.empty() && static_cast<int32_t>(running_.size()) < options_.max_running) {
    Sequence* seq = waiting_.front();
    const bool alone = step.sequences.empty();
    if (blocks_->Has(seq->id)) break;  // could not start above
    // It starts from the longest cached prefix.
    kv::PrefixMatch prefix;
    if (blocks_->prefix_caching()) {
      std::vector<int32_t> tokens(seq->prompt);
      tokens.insert(tokens.end(), seq->output.begin(), seq->output.end());
      prefix = blocks_->MatchPrefix(tokens, seq->cache_salt);
    }
    const int64_t cached = prefix.tokens(blocks_->block_size());
    const int64_t saved = seq->num_cached;
    seq->num_cached = cached;
    const int64_t n = ChunkOf(*seq, budget, alone);
    seq->num_cached = saved;
    if (n == 0 || !blocks_->CanAllocate(seq->size(), prefix)) break;
    TANDEM_CHECK(blocks_->Allocate(seq->id, seq->size(), prefix, seq->cache_salt).ok());
    seq->num_cached = cached;
    if (seq->preemptions == 0) seq->prefix_hit_tokens = cached;
    waiting_.pop_front();
    start(seq, n);
  }
  return step;
}

int64_t Scheduler::ChunkOf(const Sequence& seq, int64_t budget, bool alone) const {
  const int64_t need = seq.num_uncomputed();
  const int64_t bs = blocks_->block_size();
  int64_t cap = budget;
  if (options_.max_prefill_chunk > 0) cap = std::min<int64_t>(cap, options_.max_prefill_chunk);
  if (need <= cap) return need;
  // A partial chunk ends on a block boundary (num_cached is on one too).
  int64_t n = (seq.num_cached + cap) / bs * bs - seq.num_cached;
  if (n <= 0 && alone) n = std::min(need, bs - seq.num_cached % bs);
  return std::max<int64_t>(n, 0);
}

}  // namespace tandem::engine
