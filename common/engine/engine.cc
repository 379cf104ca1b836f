#include "common/engine/engine.h"

#include <algorithm>
#include <random>
#include <thread>

#include "common/util/check.h"
#include "common/util/status_macros.h"
#include "common/util/strings.h"

namespace tandem::engine {

absl::StatusOr<std::unique_ptr<Engine>> Engine::Create(const ModelWeights& weights,
                                                       const EngineOptions& options) {
  std::unique_ptr<Engine> e(new Engine());
  e->weights_ = &weights;
  const auto& c = weights.config();
  int threads = options.num_threads > 0
                    ? options.num_threads
                    : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  e->backend_ = std::make_unique<kernels::CpuBackend>(threads);
  kv::KvLayout layout{static_cast<int32_t>(c.n_layers), static_cast<int32_t>(c.n_kv_heads),
                      static_cast<int32_t>(c.head_dim), options.block_size};
  ASSIGN_OR_RETURN(e->cache_, kv::KvCache::Create(layout, options.kv_cache_bytes));
  e->blocks_ = std::make_unique<kv::BlockManager>(e->cache_->num_blocks(), options.block_size);
  e->scheduler_ = std::make_unique<Scheduler>(options.scheduler, e->blocks_.get());
  e->executor_ = std::make_unique<ModelExecutor>(weights, e->backend_.get(), e->cache_.get());
  std::random_device rd;
  e->seed_counter_ = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  return e;
}

absl::StatusOr<kv::SeqId> Engine::AddRequest(std::vector<int32_t> prompt, const SamplingParams& p) {
  const auto& c = weights_->config();
  if (prompt.empty()) return absl::InvalidArgumentError("prompt: must not be empty");
  for (int32_t t : prompt) {
    if (t < 0 || t >= c.vocab_size) {
      return absl::InvalidArgumentError(
          StrCat("prompt: token id ", t, " is outside the vocabulary of ", c.vocab_size));
    }
  }
  RETURN_IF_ERROR(p.Validate(static_cast<int32_t>(c.vocab_size), c.context_length));
  const int64_t total = static_cast<int64_t>(prompt.size()) + p.max_tokens;
  if (total > c.context_length) {
    return absl::InvalidArgumentError(StrCat("max_tokens: prompt (", prompt.size(),
                                             " tokens) + max_tokens (", p.max_tokens,
                                             ") exceeds the context of ", c.context_length));
  }
  const int64_t capacity = int64_t{blocks_->num_blocks()} * blocks_->block_size();
  if (total > capacity) {
    return absl::InvalidArgumentError(StrCat("max_tokens: prompt + max_tokens (", total,
                                             " tokens) exceeds the KV cache (", capacity,
                                             " tokens)"));
  }
  auto seq = std::make_unique<Sequence>();
  seq->id = next_id_++;
  seq->prompt = std::move(prompt);
  seq->params = p;
  seq->seed = p.seed.has_value() ? *p.seed : seed_counter_++;
  Sequence* raw = seq.get();
  sequences_[raw->id] = std::move(seq);
  scheduler_->Enqueue(raw);
  return raw->id;
}

void Engine::Cancel(kv::SeqId id) {
  auto it = sequences_.find(id);
  if (it == sequences_.end() || it->second->state == SequenceState::kFinished) return;
  scheduler_->Remove(it->second.get());
  it->second->state = SequenceState::kFinished;
  cancelled_.push_back(id);
}

const Sequence* Engine::Find(kv::SeqId id) const {
  auto it = sequences_.find(id);
  return it == sequences_.end() ? nullptr : it->second.get();
}

void Engine::Finish(Sequence* seq, FinishReason reason, std::vector<TokenEvent>* events) {
  seq->finish = reason;
  seq->state = SequenceState::kFinished;
  scheduler_->Remove(seq);
  if (!events->empty() && events->back().id == seq->id && !events->back().finished) {
    events->back().finished = true;
    events->back().reason = reason;
  } else {
    events->push_back({seq->id, -1, 0, {}, true, reason});
  }
}

absl::StatusOr<std::vector<TokenEvent>> Engine::Step() {
  std::vector<TokenEvent> events;
  for (kv::SeqId id : cancelled_) {
    auto it = sequences_.find(id);
    if (it == sequences_.end()) continue;
    it->second->finish = FinishReason::kCancelled;
    events.push_back({id, -1, 0, {}, true, FinishReason::kCancelled});
    sequences_.erase(it);
  }
  cancelled_.clear();

  ScheduledStep step = scheduler_->Schedule();
  if (step.empty()) return events;

  batch_ = ForwardBatch();
  std::vector<int32_t> new_tokens;
  for (Sequence* seq : step.sequences) {
    new_tokens.clear();
    for (int64_t i = seq->num_cached; i < seq->size(); ++i) new_tokens.push_back(seq->TokenAt(i));
    if (seq->num_cached == 0) stats_.prompt_tokens_computed += seq->size();
    batch_.AddSequence(new_tokens, static_cast<int32_t>(seq->size()), blocks_->BlockTable(seq->id),
                       /*want_logits=*/true);
  }
  RETURN_IF_ERROR(executor_->Forward(batch_, &logits_));
  ++stats_.steps;

  const auto& c = weights_->config();
  const int64_t vocab = c.vocab_size;
  for (size_t s = 0; s < step.sequences.size(); ++s) {
    Sequence* seq = step.sequences[s];
    const int64_t bs = blocks_->block_size();
    const bool filled_block = seq->size() / bs > seq->num_cached / bs;
    seq->num_cached = seq->size();
    if (filled_block) {
      std::vector<int32_t> tokens(seq->prompt);
      tokens.insert(tokens.end(), seq->output.begin(), seq->output.end());
      blocks_->HashFullBlocks(seq->id, tokens);
    }
    const std::span<const float> row(logits_.data() + s * vocab, vocab);
    SampleResult r =
        Sampler::Sample(row, seq->params, seq->seed, seq->size(), seq->prompt, seq->output);
    seq->output.push_back(r.token);
    ++stats_.generated_tokens;
    events.push_back({seq->id, r.token, r.logprob, std::move(r.top), false, FinishReason::kNone});

    const auto& stops = seq->params.stop_token_ids;
    if ((!seq->params.ignore_eos && r.token == c.eos_token_id) ||
        std::find(stops.begin(), stops.end(), r.token) != stops.end()) {
      Finish(seq, FinishReason::kStop, &events);
    } else if (static_cast<int32_t>(seq->output.size()) >= seq->params.max_tokens ||
               seq->size() >= c.context_length) {
      Finish(seq, FinishReason::kLength, &events);
    }
  }
  for (auto it = sequences_.begin(); it != sequences_.end();) {
    auto next = std::next(it);
    if (it->second->state == SequenceState::kFinished) sequences_.erase(it);
    it = next;
  }
  return events;
}

EngineStats Engine::Stats() const {
  EngineStats s = stats_;
  s.running = static_cast<int32_t>(scheduler_->num_running());
  s.waiting = static_cast<int32_t>(scheduler_->num_waiting());
  s.preemptions = scheduler_->num_preemptions();
  s.blocks = blocks_->Stats();
  return s;
}

}  // namespace tandem::engine
