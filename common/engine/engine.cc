#include "common/engine/engine.h"

#include <algorithm>

#include "common/engine/kv_budget.h"
#include "common/engine/speculative.h"
#include "common/model/token_rules.h"
#include "common/util/check.h"
#include "common/util/random_id.h"
#include "common/util/status_macros.h"
#include "common/util/strings.h"
#include "kernels/backend_factory.h"

namespace tandem::engine {

namespace {

// The KV pool's bytes under --gpu-memory-utilization (KvBudgetBytes), the executors'
// workspaces (`workspace_bytes`) set aside.
absl::StatusOr<int64_t> KvBudget(const kernels::Backend& backend, const EngineOptions& o,
                                 int64_t workspace_bytes) {
  absl::StatusOr<kernels::DeviceMemory> m = backend.Memory();
  if (!m.ok()) {
    return absl::InvalidArgumentError(
        StrCat("gpu_memory_utilization: the ", backend.name(),
               " backend has no device memory to size from; give --kv-cache-bytes"));
  }
  return KvBudgetBytes(*m, o.gpu_memory_utilization, workspace_bytes);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Engine>> Engine::Create(const ModelWeights& weights,
                                                       const EngineOptions& options) {
  std::unique_ptr<Engine> e(new Engine());
  e->weights_ = &weights;
  const auto& c = weights.config();
  if (options.make_backend) {
    ASSIGN_OR_RETURN(e->backend_, options.make_backend());
  } else {
    ASSIGN_OR_RETURN(e->backend_, kernels::MakeBackend({.device = options.device,
                                                        .num_threads = options.num_threads,
                                                        .gpu = options.gpu,
                                                        .batch_invariant = options.batch_invariant,
                                                        .cpu_math = options.cpu_math}));
  }
  ASSIGN_OR_RETURN(e->device_weights_, DeviceWeights::Prepare(weights, e->backend_.get()));
  kv::KvLayout layout{static_cast<int32_t>(c.n_layers), static_cast<int32_t>(c.n_kv_heads),
                      static_cast<int32_t>(c.head_dim), options.block_size, options.kv_dtype};
  // The scheduler bounds every pass: its token budget (a lone chunk may take one
  // block more) and one token per running sequence.
  const SchedulerOptions& so = options.scheduler;
  const ExecutorLimits limits{so.max_batched_tokens + so.max_running + options.block_size,
                              so.max_running, !options.enforce_eager};
  const EngineOptions::Speculative& spec = options.speculative;
  const bool drafting = spec.method == EngineOptions::Speculative::Method::kDraftModel;
  if (drafting) {
    if (spec.draft_weights == nullptr) {
      return absl::InvalidArgumentError("speculative: the draft method needs a draft model");
    }
    // The draft's weights first, so that a device budget below counts them.
    ASSIGN_OR_RETURN(e->draft_model_,
                     DraftModel::Create(*spec.draft_weights, c.vocab_size, e->backend_.get()));
  }
  int64_t kv_bytes = options.kv_cache_bytes;
  if (options.gpu_memory_utilization > 0) {
    int64_t workspace = ModelExecutor::DeviceBytes(c, limits, options.block_size, *e->backend_);
    if (drafting) {  // and the draft's (its weights are loaded: Memory counts them)
      workspace += ModelExecutor::DeviceBytes(spec.draft_weights->config(), limits,
                                              options.block_size, *e->backend_);
    }
    ASSIGN_OR_RETURN(kv_bytes, KvBudget(*e->backend_, options, workspace));
  }
  if (drafting) {
    // Both pools hold the same number of blocks (the target's may get one more) and
    // together take the budget.
    const int64_t target_block = layout.BlockBytes();
    const int64_t draft_block =
        DraftModel::BlockBytes(spec.draft_weights->config(), options.block_size, options.kv_dtype);
    const int64_t draft_bytes = kv_bytes / (target_block + draft_block) * draft_block;
    RETURN_IF_ERROR(e->draft_model_->AllocateCache({.kv_bytes = draft_bytes,
                                                    .block_size = options.block_size,
                                                    .kv_dtype = options.kv_dtype,
                                                    .limits = limits}));
    kv_bytes -= draft_bytes;
  }
  ASSIGN_OR_RETURN(e->kv_, kernels::KvStorage::Create(e->backend_.get(), layout, kv_bytes));
  e->blocks_ = std::make_unique<kv::BlockManager>(e->kv_->num_blocks(), options.block_size,
                                                  options.prefix_caching);
  e->scheduler_ = std::make_unique<Scheduler>(options.scheduler, e->blocks_.get());
  e->speculative_ = options.speculative;
  ASSIGN_OR_RETURN(e->executor_, ModelExecutor::Create(c, *e->device_weights_, e->backend_.get(),
                                                       e->kv_.get(), limits));
  e->seed_counter_ = RandomNonZero64();
  e->token_masker_ = options.token_masker;
  return e;
}

absl::StatusOr<std::shared_ptr<grammar::Constraint>> Engine::MakeConstraint(
    const SamplingParams& p, std::span<const int32_t> output) {
  if (p.grammar.empty()) return nullptr;  // ignore_eos with a grammar: refused by Validate
  if (token_masker_ == nullptr) {
    return absl::InvalidArgumentError("grammar: this engine has no vocabulary to constrain");
  }
  auto it = grammars_.find(p.grammar);
  if (it == grammars_.end()) {
    auto compiled = grammar::Grammar::Compile(p.grammar);
    if (!compiled.ok()) {
      return absl::InvalidArgumentError(StrCat("grammar: ", compiled.status().message()));
    }
    if (grammars_.size() >= kMaxCachedGrammars) grammars_.clear();
    it =
        grammars_
            .emplace(p.grammar,
                     CompiledGrammar{std::make_shared<const grammar::Grammar>(*std::move(compiled)),
                                     std::make_shared<grammar::MaskCache>()})
            .first;
  }
  auto c =
      std::make_shared<grammar::Constraint>(it->second.grammar, token_masker_, it->second.masks);
  for (int32_t token : output) {
    if (absl::Status st = c->Accept(token); !st.ok()) {
      return absl::InvalidArgumentError(StrCat("first_token_id: ", st.message()));
    }
  }
  return c;
}

absl::Status Engine::ValidateRequest(std::span<const int32_t> prompt,
                                     const SamplingParams& p) const {
  const auto& c = weights_->config();
  RETURN_IF_ERROR(model::CheckTokenIds("prompt", prompt, c.vocab_size));
  RETURN_IF_ERROR(p.Validate(static_cast<int32_t>(c.vocab_size), c.context_length));
  const int64_t n = static_cast<int64_t>(prompt.size());
  RETURN_IF_ERROR(model::CheckRoom(n, p.max_tokens, c.context_length));
  const int64_t capacity = int64_t{blocks_->num_blocks()} * blocks_->block_size();
  if (absl::Status st = model::CheckRoom(n, p.max_tokens, capacity, "the KV cache"); !st.ok()) {
    return st;
  }
  return absl::OkStatus();
}

absl::StatusOr<kv::SeqId> Engine::AddRequest(std::vector<int32_t> prompt, const SamplingParams& p,
                                             RequestMode mode, uint64_t cache_salt) {
  RETURN_IF_ERROR(ValidateRequest(prompt, p));
  auto seq = std::make_unique<Sequence>();
  seq->id = next_id_++;
  seq->prompt = std::move(prompt);
  seq->params = p;
  seq->seed = p.seed.has_value() ? *p.seed : seed_counter_++;
  seq->prefill_only = mode == RequestMode::kPrefillOnly;
  seq->cache_salt = cache_salt;
  ASSIGN_OR_RETURN(seq->constraint, MakeConstraint(p, {}));
  Sequence* raw = seq.get();
  sequences_[raw->id] = std::move(seq);
  scheduler_->Enqueue(raw);
  return raw->id;
}

absl::StatusOr<kv::SeqId> Engine::Reserve(int64_t num_tokens, std::span<const int32_t> prompt,
                                          uint64_t cache_salt, int32_t* cached_blocks) {
  if (num_tokens < 1) return absl::InvalidArgumentError("num_tokens: must be at least 1");
  if (num_tokens > weights_->config().context_length) {
    return absl::InvalidArgumentError(StrCat("num_tokens: ", num_tokens,
                                             " exceeds the model's context of ",
                                             weights_->config().context_length));
  }
  if (static_cast<int64_t>(prompt.size()) > num_tokens) {
    return absl::InvalidArgumentError("prompt_token_ids: longer than num_tokens");
  }
  const kv::SeqId id = next_id_;
  const kv::PrefixMatch prefix = blocks_->MatchPrefix(prompt, cache_salt);
  if (!blocks_->CanAllocate(num_tokens, prefix)) {
    return absl::ResourceExhaustedError(StrCat("KV cache: ", blocks_->BlocksFor(num_tokens),
                                               " blocks needed, ", blocks_->num_free_blocks(),
                                               " free"));
  }
  TANDEM_CHECK(blocks_->Allocate(id, num_tokens, prefix, cache_salt).ok());
  if (cached_blocks != nullptr) *cached_blocks = static_cast<int32_t>(prefix.blocks.size());
  ++next_id_;
  auto seq = std::make_unique<Sequence>();
  seq->id = id;
  seq->cache_salt = cache_salt;
  seq->state = SequenceState::kReserved;
  seq->shared_blocks = static_cast<int32_t>(prefix.blocks.size());
  sequences_[id] = std::move(seq);
  return id;
}

absl::Status Engine::AdmitPrefilled(kv::SeqId id, std::vector<int32_t> prompt, int32_t first_token,
                                    const SamplingParams& p) {
  return AdmitReserved(id, std::move(prompt), first_token, p);
}

absl::Status Engine::PrefillReserved(kv::SeqId id, std::vector<int32_t> prompt,
                                     const SamplingParams& p) {
  return AdmitReserved(id, std::move(prompt), std::nullopt, p);
}

absl::Status Engine::AdmitReserved(kv::SeqId id, std::vector<int32_t> prompt,
                                   std::optional<int32_t> first_token, const SamplingParams& p) {
  auto it = sequences_.find(id);
  if (it == sequences_.end() || it->second->state != SequenceState::kReserved) {
    return absl::NotFoundError(StrCat("reservation ", id, ": unknown or already used"));
  }
  RETURN_IF_ERROR(ValidateRequest(prompt, p));
  const auto& c = weights_->config();
  if (first_token.has_value()) {
    RETURN_IF_ERROR(model::CheckTokenId("first_token_id", *first_token, c.vocab_size));
  }
  const int32_t have = static_cast<int32_t>(blocks_->BlockTable(id).size());
  if (blocks_->BlocksFor(static_cast<int64_t>(prompt.size())) > have) {
    return absl::InvalidArgumentError(StrCat("prompt_token_ids: ", prompt.size(),
                                             " tokens do not fit the ", have, " reserved blocks"));
  }
  Sequence* seq = it->second.get();
  const int64_t shared = int64_t{seq->shared_blocks} * blocks_->block_size();
  // Computed here: at least the last prompt token (its logits give the first token).
  if (!first_token.has_value() && shared >= static_cast<int64_t>(prompt.size())) {
    return absl::InvalidArgumentError(
        StrCat("prompt_token_ids: ", prompt.size(), " tokens, all within the ", seq->shared_blocks,
               " cached blocks the reservation shares; it was made for another prompt"));
  }
  std::vector<int32_t> output;
  if (first_token.has_value()) output.push_back(*first_token);
  ASSIGN_OR_RETURN(std::shared_ptr<grammar::Constraint> constraint, MakeConstraint(p, output));
  seq->constraint = std::move(constraint);
  seq->prompt = std::move(prompt);
  seq->output = std::move(output);
  seq->params = p;
  seq->seed = p.seed.has_value() ? *p.seed : seed_counter_++;
  if (first_token.has_value()) {
    seq->num_cached = static_cast<int64_t>(seq->prompt.size());
    blocks_->HashFullBlocks(id, seq->prompt);
    if (const FinishReason r = CheckFinish(*seq); r != FinishReason::kNone) {
      blocks_->Free(id);
      seq->state = SequenceState::kFinished;
      ended_.emplace_back(id, r);
      return absl::OkStatus();
    }
  } else {
    // The blocks it computes are hashed as each step fills them (Step), as for any prompt.
    seq->num_cached = shared;
    seq->prefix_hit_tokens = shared;
  }
  scheduler_->Enqueue(seq);
  return absl::OkStatus();
}

absl::StatusOr<std::span<const int32_t>> Engine::ReservedBlocks(kv::SeqId id, int32_t first_block,
                                                                int32_t num_blocks,
                                                                int64_t payload_bytes) const {
  auto it = sequences_.find(id);
  if (it == sequences_.end() || it->second->state != SequenceState::kReserved) {
    return absl::InvalidArgumentError(StrCat("reservation ", id, ": unknown or already used"));
  }
  const std::vector<int32_t>& table = blocks_->BlockTable(id);
  const int32_t shared = it->second->shared_blocks;
  if (first_block < shared || num_blocks < 1 ||
      static_cast<int64_t>(first_block) + num_blocks > static_cast<int64_t>(table.size())) {
    return absl::InvalidArgumentError(StrCat(
        "blocks [", first_block, ", ", int64_t{first_block} + num_blocks,
        ") outside the writable blocks [", shared, ", ", table.size(), ") of reservation ", id));
  }
  if (payload_bytes != num_blocks * kv_->layout().LayerBytes()) {
    return absl::InvalidArgumentError(StrCat("payload: ", payload_bytes, " bytes, expected ",
                                             num_blocks * kv_->layout().LayerBytes()));
  }
  return std::span<const int32_t>(table.data() + first_block, static_cast<size_t>(num_blocks));
}

absl::Status Engine::WriteReservedKv(kv::SeqId id, int32_t layer, int32_t first_block,
                                     int32_t num_blocks, std::span<const uint8_t> payload) {
  ASSIGN_OR_RETURN(
      std::span<const int32_t> blocks,
      ReservedBlocks(id, first_block, num_blocks, static_cast<int64_t>(payload.size())));
  return kv_->WriteLayer(blocks, layer, payload.data());
}

absl::Status Engine::WriteReservedKv(kv::SeqId id, int32_t layer, int32_t first_block,
                                     int32_t num_blocks, const kernels::Buffer& staging,
                                     int64_t offset) {
  ASSIGN_OR_RETURN(
      std::span<const int32_t> blocks,
      ReservedBlocks(id, first_block, num_blocks, num_blocks * kv_->layout().LayerBytes()));
  return kv_->ScatterLayer(blocks, layer, staging, offset);
}

bool Engine::Release(kv::SeqId id) {
  auto it = sequences_.find(id);
  if (it == sequences_.end()) return false;
  const SequenceState st = it->second->state;
  if (st != SequenceState::kReserved && st != SequenceState::kHeld) return false;
  blocks_->Free(id);
  sequences_.erase(it);
  return true;
}

void Engine::Cancel(kv::SeqId id) {
  auto it = sequences_.find(id);
  if (it == sequences_.end()) return;
  Sequence* seq = it->second.get();
  if (seq->state != SequenceState::kWaiting && seq->state != SequenceState::kRunning) return;
  StopEarly(seq);
  ended_.emplace_back(id, FinishReason::kCancelled);
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
    events->push_back({seq->id, -1, 0, {}, true, reason, {}});
  }
}

void Engine::EraseFinished() {
  absl::erase_if(sequences_,
                 [](const auto& entry) { return entry.second->state == SequenceState::kFinished; });
  ForgetEndedDrafts();
}

void Engine::FailStep(const ScheduledStep& step, const absl::Status& error,
                      std::vector<TokenEvent>* events) {
  ++stats_.failed_steps;
  for (Sequence* seq : step.sequences) EndWithError(seq, error, events);
  EraseFinished();
}

void Engine::StopEarly(Sequence* seq) {
  if (seq->prefill_only) {
    // A transport may still be reading layers already sent: the blocks stay held until
    // Release, as after a successful prefill.
    scheduler_->Detach(seq);
    seq->state = SequenceState::kHeld;
  } else {
    scheduler_->Remove(seq);
    seq->state = SequenceState::kFinished;
  }
}

void Engine::EndWithError(Sequence* seq, const absl::Status& error,
                          std::vector<TokenEvent>* events) {
  StopEarly(seq);
  events->push_back({seq->id, -1, 0, {}, true, FinishReason::kNone, error});
}

FinishReason Engine::CheckFinish(const Sequence& seq) const {
  const auto& c = weights_->config();
  const int32_t token = seq.output.back();
  const auto& stops = seq.params.stop_token_ids;
  if ((!seq.params.ignore_eos && token == c.eos_token_id) ||
      std::find(stops.begin(), stops.end(), token) != stops.end()) {
    return FinishReason::kStop;
  }
  // The grammar is complete and nothing may follow: no end token needs sampling.
  if (seq.constraint != nullptr && seq.constraint->MustEnd()) return FinishReason::kStop;
  if (static_cast<int32_t>(seq.output.size()) >= seq.params.max_tokens ||
      seq.size() >= c.context_length) {
    return FinishReason::kLength;
  }
  return FinishReason::kNone;
}

std::vector<TokenEvent> Engine::Step(StepObserver* observer) {
  std::vector<TokenEvent> events;
  for (const auto& [id, reason] : ended_) {
    auto it = sequences_.find(id);
    if (it == sequences_.end()) continue;
    it->second->finish = reason;
    events.push_back({id, -1, 0, {}, true, reason, {}});
    if (it->second->state != SequenceState::kHeld) sequences_.erase(it);  // held: Release
  }
  ended_.clear();

  ProposeDrafts();
  ScheduledStep step = scheduler_->Schedule();
  if (step.empty()) return events;
  if (observer != nullptr) observer->OnScheduled(step.sequences, step.num_tokens);

  batch_ = ForwardBatch();
  std::vector<int32_t> new_tokens;
  for (size_t s = 0; s < step.sequences.size(); ++s) {
    Sequence* seq = step.sequences[s];
    const int64_t end = seq->num_cached + step.num_tokens[s];
    new_tokens.clear();
    for (int64_t i = seq->num_cached; i < end; ++i) new_tokens.push_back(seq->TokenAt(i));
    if (seq->num_cached < static_cast<int64_t>(seq->prompt.size())) {
      stats_.prompt_tokens_computed += step.num_tokens[s];
    }
    if (end < seq->size()) ++stats_.prefill_chunks;  // a partial prefill
    // Logits for the last output token's position and each draft token's.
    const int32_t logit_count =
        end >= seq->size() ? 1 + static_cast<int32_t>(end - seq->size()) : 0;
    batch_.AddSequence(new_tokens, static_cast<int32_t>(end), blocks_->BlockTable(seq->id),
                       /*want_logits=*/logit_count > 0, logit_count);
  }
  ModelExecutor::LayerCallback on_layer;
  if (observer != nullptr) {
    on_layer = [observer](int32_t l, const std::shared_ptr<kernels::Event>& ready) {
      observer->OnLayerKv(l, ready);
    };
  }
  absl::StatusOr<kernels::Tensor> logits = executor_->Forward(batch_, on_layer);
  if (!logits.ok()) {
    FailStep(step, logits.status(), &events);
    return events;
  }
  ++stats_.steps;

  // One row per logit row: a draft's position i is drawn with the draft tokens before
  // it as context (they are the output if it holds), exactly as plain decoding would.
  std::vector<SampleRow> rows;
  // A drafting sequence's output followed by its draft; row i reads the first
  // output.size() + i tokens of it. Reserved so the rows' spans stay valid.
  std::vector<std::vector<int32_t>> drafted_outputs;
  drafted_outputs.reserve(step.sequences.size());
  for (size_t s = 0; s < step.sequences.size(); ++s) {
    const Sequence* seq = step.sequences[s];
    if (seq->num_cached + step.num_tokens[s] < seq->size()) continue;  // a partial prefill
    rows.push_back({&seq->params, seq->seed, seq->size(), seq->prompt, seq->output});
    if (seq->constraint != nullptr) rows.back().allowed = seq->constraint->Allowed();
    if (seq->draft.empty()) continue;
    std::vector<int32_t>& context = drafted_outputs.emplace_back(seq->output);
    context.insert(context.end(), seq->draft.begin(), seq->draft.end());
    for (size_t i = 1; i <= seq->draft.size(); ++i) {
      rows.push_back({&seq->params, seq->seed, seq->size() + static_cast<int64_t>(i), seq->prompt,
                      std::span(context).first(seq->output.size() + i)});
    }
  }
  absl::StatusOr<std::vector<SampleResult>> sampled =
      Sampler::SampleRows(*backend_, *logits, executor_->IdsScratch(), rows);
  if (!sampled.ok()) {
    FailStep(step, sampled.status(), &events);
    return events;
  }

  size_t logit_row = 0;
  const int64_t bs = blocks_->block_size();
  // Records the hashes of the blocks `seq`'s computed tokens filled this step (`kept`:
  // draft tokens whose K/V are now part of the cache).
  auto hash_blocks = [&](Sequence* seq, int64_t before, std::span<const int32_t> kept) {
    if (seq->num_cached / bs <= before / bs) return;
    std::vector<int32_t> tokens(seq->prompt);
    tokens.insert(tokens.end(), seq->output.begin(), seq->output.end());
    tokens.insert(tokens.end(), kept.begin(), kept.end());
    tokens.resize(seq->num_cached);
    blocks_->HashFullBlocks(seq->id, tokens);
  };
  for (size_t s = 0; s < step.sequences.size(); ++s) {
    Sequence* seq = step.sequences[s];
    const int64_t before = seq->num_cached;
    const int64_t end = seq->num_cached + step.num_tokens[s];
    if (end < seq->size()) {  // more chunks to go: nothing to sample yet
      seq->num_cached = end;
      hash_blocks(seq, before, {});
      continue;
    }
    // Tokens to emit: one, or with a draft its kept prefix and one more.
    const std::span<SampleResult> drawn(sampled->data() + logit_row, 1 + seq->draft.size());
    logit_row += drawn.size();
    const size_t emit = seq->draft.empty() ? 1 : TokensToEmit(seq->draft, drawn);
    if (!seq->draft.empty()) {
      const size_t kept = emit - 1;
      ++stats_.spec_drafts;
      stats_.spec_draft_tokens += static_cast<int64_t>(seq->draft.size());
      stats_.spec_accepted_tokens += static_cast<int64_t>(kept);
      if (stats_.spec_accepted_per_position.size() < seq->draft.size()) {
        stats_.spec_accepted_per_position.resize(seq->draft.size());
      }
      for (size_t i = 0; i < kept; ++i) ++stats_.spec_accepted_per_position[i];
      // Per token: a draft cut after `kept` tokens counts the rejected one too.
      const double observed =
          static_cast<double>(kept) / static_cast<double>(std::min(kept + 1, seq->draft.size()));
      seq->draft_acceptance = 0.7 * seq->draft_acceptance + 0.3 * observed;
    }
    // The K/V computed is valid up to the last kept draft token: rejected positions
    // are left behind the cache's end and overwritten later.
    seq->num_cached = seq->size() + static_cast<int64_t>(emit) - 1;
    hash_blocks(seq, before, std::span(seq->draft).first(emit - 1));
    seq->draft.clear();
    for (size_t t = 0; t < emit; ++t) {
      SampleResult& r = drawn[t];
      if (seq->constraint != nullptr) {
        absl::Status st = r.token < 0 ? absl::FailedPreconditionError(
                                            "the grammar allows no token of the vocabulary here")
                                      : seq->constraint->Accept(r.token);
        if (!st.ok()) {
          EndWithError(seq, absl::InvalidArgumentError(StrCat("grammar: ", st.message())), &events);
          break;
        }
      }
      seq->output.push_back(r.token);
      ++stats_.generated_tokens;
      events.push_back(
          {seq->id, r.token, r.logprob, std::move(r.top), false, FinishReason::kNone, {}});

      const FinishReason reason = CheckFinish(*seq);
      if (seq->prefill_only) {
        scheduler_->Detach(seq);
        seq->state = SequenceState::kHeld;
        seq->finish = reason;
        events.back().finished = true;
        events.back().reason = reason;
        break;
      }
      if (reason != FinishReason::kNone) {
        Finish(seq, reason, &events);
        break;
      }
    }
  }
  EraseFinished();
  return events;
}

void Engine::ForgetEndedDrafts() {
  if (draft_model_ == nullptr) return;
  draft_model_->Retain([this](kv::SeqId id) {
    auto it = sequences_.find(id);
    return it != sequences_.end() && it->second->state == SequenceState::kRunning;
  });
}

void Engine::ProposeDrafts() {
  using Method = EngineOptions::Speculative::Method;
  ForgetEndedDrafts();
  const int32_t context = static_cast<int32_t>(weights_->config().context_length);
  bool off = speculative_.method == Method::kOff;
  if (!off && speculative_.disable_by_batch_size > 0) {
    int32_t decoding = 0;
    for (const auto& [id, seq] : sequences_) {
      decoding += seq->state == SequenceState::kRunning && seq->num_uncomputed() == 1;
    }
    off = decoding > speculative_.disable_by_batch_size;
  }
  std::vector<DraftModel::Request> requests;
  for (auto& [id, seq] : sequences_) {
    seq->draft.clear();
    if (off || seq->state != SequenceState::kRunning || seq->num_uncomputed() != 1 ||
        seq->constraint != nullptr || seq->prefill_only || seq->params.disable_speculation) {
      continue;
    }
    // Adaptive k: the draft tokens worth a row at this sequence's acceptance rate.
    int64_t k = 0;
    for (double p = seq->draft_acceptance;
         k < speculative_.num_tokens && p >= speculative_.min_token_acceptance;
         p *= seq->draft_acceptance) {
      ++k;
    }
    if (k == 0 && ++seq->steps_without_draft >= speculative_.probe_every) k = 1;  // look again
    // Tokens after the one this step samples, within max_tokens and the context.
    const int64_t left =
        std::min<int64_t>({k, seq->params.max_tokens - static_cast<int64_t>(seq->output.size()) - 1,
                           context - seq->size() - 1});
    if (left <= 0) continue;
    if (speculative_.method == Method::kDraftModel) {
      requests.push_back({id, seq->prompt, seq->output, static_cast<int32_t>(left), &seq->draft});
      continue;
    }
    std::vector<int32_t> tokens(seq->prompt);
    tokens.insert(tokens.end(), seq->output.begin(), seq->output.end());
    seq->draft = ProposeByPromptLookup(tokens, static_cast<int32_t>(left), speculative_.min_n,
                                       speculative_.max_n);
    if (!seq->draft.empty()) seq->steps_without_draft = 0;
  }
  if (requests.empty()) return;
  // A failed draft pass costs only the drafts: the step goes on plainly.
  if (!draft_model_->Propose(requests).ok()) ++stats_.spec_draft_failures;
  for (const DraftModel::Request& r : requests) {
    if (!r.draft->empty()) sequences_[r.id]->steps_without_draft = 0;
  }
}

EngineStats Engine::Stats() const {
  EngineStats s = stats_;
  s.running = static_cast<int32_t>(scheduler_->num_running());
  s.waiting = static_cast<int32_t>(scheduler_->num_waiting());
  s.preemptions = scheduler_->num_preemptions();
  for (const auto& [id, seq] : sequences_) {
    s.reserved += seq->state == SequenceState::kReserved;
    s.held += seq->state == SequenceState::kHeld;
    if (seq->state == SequenceState::kWaiting) s.waiting_prompt_tokens += seq->num_uncomputed();
  }
  s.blocks = blocks_->Stats();
  if (draft_model_ != nullptr) s.draft_blocks = draft_model_->block_stats();
  return s;
}

}  // namespace tandem::engine
