// Engine: the single-process generation loop — queue, continuous batching,
// preemption by recompute, cancellation — over one model and one KV cache.
//
// Each Step() = scheduler.Schedule() → executor.Forward() → sample → append → finish.
// Requests join and leave at every step. The engine is driven by one thread (the
// caller of Step); every other method must come from that same thread. Tokens are
// returned as events from Step.
//
// The same engine serves both halves of a disaggregated pair:
//   prefill worker — AddRequest(..., kPrefillOnly): the request stops after its first
//     token and keeps its blocks (kHeld) so their K/V can be sent; Release frees them.
//   decode worker — Reserve blocks for a prompt, let a transport fill them, then
//     AdmitPrefilled(prompt, first token): the sequence continues as if this engine had
//     computed the prompt itself; or PrefillReserved(prompt), which has it compute the
//     prompt into the reservation (a decode worker's local prefill).
//
// Memory: the engine gets its Backend from the factory (options.device) and owns it;
// the backend holds the prepared weights, the KV storage and the executor's
// workspace. Only the engine thread writes KV: its forward passes, and
// WriteReservedKv for blocks a transport received. Transports read finished blocks
// through kv_storage().
//
// A forward pass that fails (a backend or device error) ends the requests of that
// step — each gets a finished event carrying the error and its blocks are freed (a
// prefill-only request's stay held until Release, as its transfer may still be
// reading them) — and the engine goes on with the rest.
#ifndef TANDEM_COMMON_ENGINE_ENGINE_H_
#define TANDEM_COMMON_ENGINE_ENGINE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "common/engine/device_weights.h"
#include "common/engine/draft_model.h"
#include "common/engine/model_executor.h"
#include "common/engine/model_weights.h"
#include "common/engine/sampler.h"
#include "common/engine/scheduler.h"
#include "common/engine/sequence.h"
#include "common/grammar/constraint.h"
#include "common/kv/block_manager.h"
#include "common/kv/kv_layout.h"
#include "kernels/backend.h"
#include "kernels/kv_storage.h"

namespace tandem::engine {

struct EngineOptions {
  std::string device = "cpu";  // kernels::MakeBackend's names
  int gpu = 0;                 // the CUDA device (--device cuda)
  // Tokens independent of batching on every backend (the CPU is; CUDA pins its GEMM
  // algorithms and attention splits: cuda/cuda_backend.h).
  bool batch_invariant = false;
  // Every pass eager: no CUDA graphs for decode steps (vLLM's --enforce-eager).
  bool enforce_eager = false;
  int64_t kv_cache_bytes = int64_t{256} << 20;
  // On a device backend, > 0 sizes the KV pool instead of kv_cache_bytes (vLLM's
  // meaning): this engine may use that fraction of the device's total memory —
  // weights, activations and KV together; the KV pool gets what the rest leaves.
  double gpu_memory_utilization = 0;
  int32_t block_size = 16;
  kv::KvDtype kv_dtype = kv::KvDtype::kF32;
  int num_threads = 0;  // CPU compute threads (0: every core)
  // The CPU backend's arithmetic for quantized weights (--cpu-math; kernels/backend.h).
  kernels::CpuMath cpu_math = kernels::DefaultCpuMath();
  // Tests: builds the backend instead of `device` (e.g. one with an injected fault).
  std::function<absl::StatusOr<std::unique_ptr<kernels::Backend>>()> make_backend;
  // Keep full blocks after their sequence ends and reuse them for requests that start
  // with the same tokens (same cache salt); output is identical either way.
  bool prefix_caching = false;
  SchedulerOptions scheduler;
  // The vocabulary as a grammar sees it (MakeTokenMasker); without it requests with a
  // grammar are refused.
  std::shared_ptr<const grammar::TokenMasker> token_masker;
  // Speculative decoding (speculative.h): each decoding sequence proposes up to
  // `num_tokens` tokens — by prompt lookup (kNgram) or from a draft model (kDraftModel,
  // draft_model.h) — and one pass checks them. Sequences with a grammar or
  // disable_speculation, prefill-only ones and those near max_tokens decode plainly.
  // k adapts per sequence: draft token i is proposed only while the sequence's recent
  // acceptance rate a gives a^i ≥ min_token_acceptance (a row costs a pass's share of
  // compute whether or not its token holds); below that the sequence decodes plainly
  // and tries one token again after `probe_every` passes.
  struct Speculative {
    enum class Method { kOff, kNgram, kDraftModel };
    Method method = Method::kOff;
    int32_t num_tokens = 4;
    int32_t min_n = 1, max_n = 3;  // kNgram: n-gram sizes matched, longest first
    // kDraftModel: the draft's weights (borrowed; a model with the target's vocabulary:
    // LoadDraftModel checks it). Its KV pool holds as many blocks as the target's and
    // the two together take the KV budget.
    const ModelWeights* draft_weights = nullptr;
    double min_token_acceptance = 0.4;
    int32_t probe_every = 8;
    // No drafts while more sequences than this decode at once (vLLM's
    // --speculative-disable-by-batch-size): on a CPU a batch of two is already
    // compute-bound, where a draft row costs about what the token it may save is worth
    // (tandem bench speculative: docs/performance.md). 0: never off.
    int32_t disable_by_batch_size = 1;
  } speculative;
};

// One generated token (or the end of a request).
struct TokenEvent {
  kv::SeqId id = 0;
  int32_t token = -1;  // -1 when the event only ends the request (cancel)
  float logprob = 0;
  std::vector<TokenLogprob> top_logprobs;
  // Last event of the request. For a prefill-only request the first token's event is
  // its last; `reason` then says whether that token itself ends generation (kNone: no).
  bool finished = false;
  FinishReason reason = FinishReason::kNone;
  // Set (with finished, token -1) when the forward pass that computed this request
  // failed: the request is over and its blocks are freed (kPrefillOnly: held until
  // Release).
  absl::Status error;
};

enum class RequestMode {
  kFull,         // prefill, then decode to the end
  kPrefillOnly,  // stop after the first token; keep the blocks until Release
};

// Watches a step from inside (the prefill worker's KV sender).
class StepObserver {
 public:
  virtual ~StepObserver() = default;
  // Before the forward pass: the sequences it computes; sequence i computes tokens
  // [num_cached, num_cached + num_tokens[i]) (a prompt may take several steps).
  virtual void OnScheduled(std::span<Sequence* const> sequences,
                           std::span<const int64_t> num_tokens) = 0;
  // Layer `layer`'s K/V of every scheduled sequence are enqueued; they are in the
  // storage once `ready` completes.
  virtual void OnLayerKv(int32_t layer, const std::shared_ptr<kernels::Event>& ready) = 0;
};

struct EngineStats {
  int32_t running = 0;
  int32_t waiting = 0;
  int32_t reserved = 0;  // kReserved sequences
  int32_t held = 0;      // kHeld sequences
  int64_t waiting_prompt_tokens = 0;
  int64_t preemptions = 0;
  kv::BlockManagerStats blocks;
  int64_t steps = 0;
  int64_t prompt_tokens_computed = 0;  // incl. recomputation after preemption
  int64_t prefill_chunks = 0;          // partial prefills (a prompt split over steps)
  int64_t generated_tokens = 0;
  int64_t failed_steps = 0;  // forward passes that failed (their requests ended)
  // Speculative decoding, as vLLM counts it: drafts checked, tokens proposed, tokens
  // accepted, and accepted tokens by position in the draft.
  int64_t spec_drafts = 0;
  int64_t spec_draft_tokens = 0;
  int64_t spec_accepted_tokens = 0;
  std::vector<int64_t> spec_accepted_per_position;
  int64_t spec_draft_failures = 0;     // draft-model passes that failed (no draft that step)
  kv::BlockManagerStats draft_blocks;  // the draft model's KV pool (kDraftModel)
};

class Engine {
 public:
  static absl::StatusOr<std::unique_ptr<Engine>> Create(const ModelWeights& weights,
                                                        const EngineOptions& options);

  // Validates and queues a request. InvalidArgument names the bad field: empty
  // prompt, token ids out of range, prompt + max_tokens over the context or over the
  // whole KV cache, bad sampling parameters.
  // `cache_salt`: requests only share cached prefixes with requests of the same salt.
  absl::StatusOr<kv::SeqId> AddRequest(std::vector<int32_t> prompt, const SamplingParams& params,
                                       RequestMode mode = RequestMode::kFull,
                                       uint64_t cache_salt = 0);

  // Allocates blocks for `num_tokens` tokens under a new kReserved sequence, to be
  // filled from outside (WriteReservedKv). With prefix
  // caching, the leading blocks of `prompt` found in the cache are shared instead
  // (*cached_blocks of them; they must not be written). ResourceExhausted (nothing
  // changes) when they do not fit.
  absl::StatusOr<kv::SeqId> Reserve(int64_t num_tokens, std::span<const int32_t> prompt = {},
                                    uint64_t cache_salt = 0, int32_t* cached_blocks = nullptr);
  // Turns a kReserved sequence whose blocks hold `prompt`'s K/V into a waiting one
  // with `first_token` generated; it runs from the next step. Validates like
  // AddRequest; a first token that already ends the request is reported by the next
  // Step. On error the reservation is left as it was.
  absl::Status AdmitPrefilled(kv::SeqId id, std::vector<int32_t> prompt, int32_t first_token,
                              const SamplingParams& params);
  // Turns a kReserved sequence into a waiting one that computes `prompt` here — all of
  // it but the leading blocks the reservation shares from the prefix cache, in chunks
  // as any prompt — samples its first token and decodes on: a decode worker's local
  // prefill (selective disaggregation). `prompt` must be the one reserved with (the
  // shared blocks hold its K/V). Validates like AddRequest; on error the reservation is
  // left as it was.
  absl::Status PrefillReserved(kv::SeqId id, std::vector<int32_t> prompt,
                               const SamplingParams& params);
  // Frees a kReserved or kHeld sequence; false (and nothing changes) otherwise.
  bool Release(kv::SeqId id);
  // Forgets every cached prefix block (they become free).
  void ClearPrefixCache() { blocks_->ClearCache(); }

  // Ends a waiting or running request at the next step boundary (its blocks are freed
  // now, or, for a prefill-only request, held until Release: a transport may still be
  // reading what it computed); the next Step reports it finished with kCancelled.
  // Other ids are ignored.
  void Cancel(kv::SeqId id);

  // Runs one forward pass over the scheduled batch; returns the tokens it produced
  // (and, when the pass failed, an error event for each request it computed).
  std::vector<TokenEvent> Step(StepObserver* observer = nullptr);

  // Whether Step has anything to do.
  bool HasWork() const {
    return scheduler_->num_waiting() + scheduler_->num_running() > 0 || !ended_.empty();
  }
  const Sequence* Find(kv::SeqId id) const;
  EngineStats Stats() const;
  // Bytes of weights a pass reads as the backend holds them: the copies on a device
  // (bf16 on CUDA), the mapped file's tensors on the CPU.
  int64_t weight_bytes() const {
    return device_weights_->copied_bytes() > 0 ? device_weights_->copied_bytes()
                                               : weights_->weight_bytes();
  }
  // Of those, the bytes one decode step reads per token (a mixture of experts reads
  // only its picked experts; ModelWeights::token_read_bytes).
  int64_t token_read_bytes() const {
    return device_weights_->copied_bytes() > 0 ? device_weights_->copied_bytes()
                                               : weights_->token_read_bytes();
  }
  // Writes one layer of blocks [first_block, first_block + num_blocks) of kReserved
  // sequence `id`'s block table from `payload` (num_blocks × KvLayout::LayerBytes()).
  // InvalidArgument (nothing written) for an unknown id, a range outside its table,
  // or blocks shared from the prefix cache.
  absl::Status WriteReservedKv(kv::SeqId id, int32_t layer, int32_t first_block, int32_t num_blocks,
                               std::span<const uint8_t> payload);
  // The same from `staging` (a buffer of this engine's backend, from byte `offset`),
  // device to device (a peer transport's received payload).
  absl::Status WriteReservedKv(kv::SeqId id, int32_t layer, int32_t first_block, int32_t num_blocks,
                               const kernels::Buffer& staging, int64_t offset);
  // The KV bytes, for transports reading finished blocks (kv_storage.h).
  const kernels::KvStorage& kv_storage() const { return *kv_; }
  const kv::KvLayout& kv_layout() const { return kv_->layout(); }
  const std::vector<int32_t>& BlockTable(kv::SeqId id) const { return blocks_->BlockTable(id); }
  int num_threads() const { return backend_->num_threads(); }
  // What AddRequest and AdmitPrefilled check of a prompt and its parameters (the ids, every
  // sampling field, the room in the context and in the KV pool), naming the field.
  // Thread-safe: it reads only what construction fixed.
  absl::Status ValidateRequest(std::span<const int32_t> prompt, const SamplingParams& p) const;
  std::string_view device() const { return backend_->name(); }

 private:
  // The reserved blocks WriteReservedKv may write, after its checks.
  absl::StatusOr<std::span<const int32_t>> ReservedBlocks(kv::SeqId id, int32_t first_block,
                                                          int32_t num_blocks,
                                                          int64_t payload_bytes) const;
  Engine() = default;
  // AdmitPrefilled (first_token set: the prompt's K/V are all in the blocks) and
  // PrefillReserved (none: the blocks past the shared ones are computed here).
  absl::Status AdmitReserved(kv::SeqId id, std::vector<int32_t> prompt,
                             std::optional<int32_t> first_token, const SamplingParams& params);
  // Whether `seq`, whose last output token was just appended, is done.
  FinishReason CheckFinish(const Sequence& seq) const;
  void Finish(Sequence* seq, FinishReason reason, std::vector<TokenEvent>* events);
  // Takes `seq` out of the scheduler before its end (a cancel, an error): finished, its
  // blocks freed; or, if prefill-only, held until Release (a transport may still read
  // its blocks).
  void StopEarly(Sequence* seq);
  // Ends `seq` with an error event (StopEarly's rule).
  void EndWithError(Sequence* seq, const absl::Status& error, std::vector<TokenEvent>* events);
  // The constraint `p.grammar` puts on a sequence whose output so far is `output`
  // (null without a grammar). InvalidArgument names the field.
  absl::StatusOr<std::shared_ptr<grammar::Constraint>> MakeConstraint(
      const SamplingParams& p, std::span<const int32_t> output);
  // The step's forward pass or sampling failed: end its sequences with `error`.
  void FailStep(const ScheduledStep& step, const absl::Status& error,
                std::vector<TokenEvent>* events);
  // Forgets every kFinished sequence, and the draft K/V of every sequence not running.
  void EraseFinished();
  // Sets each sequence's draft for the coming step (cleared where it may not speculate).
  void ProposeDrafts();
  // Drops the draft model's K/V of sequences that no longer run.
  void ForgetEndedDrafts();
  EngineOptions::Speculative speculative_;

  const ModelWeights* weights_ = nullptr;
  std::unique_ptr<kernels::Backend> backend_;
  std::unique_ptr<DeviceWeights> device_weights_;
  std::unique_ptr<kernels::KvStorage> kv_;
  std::unique_ptr<kv::BlockManager> blocks_;
  std::unique_ptr<Scheduler> scheduler_;
  std::unique_ptr<ModelExecutor> executor_;
  std::unique_ptr<DraftModel> draft_model_;  // kDraftModel
  absl::flat_hash_map<kv::SeqId, std::unique_ptr<Sequence>> sequences_;
  // Ended between steps (cancelled, or finished by an admitted first token); Step
  // reports them.
  std::vector<std::pair<kv::SeqId, FinishReason>> ended_;
  kv::SeqId next_id_ = 1;
  uint64_t seed_counter_ = 0x5eed;
  EngineStats stats_;
  ForwardBatch batch_;
  std::shared_ptr<const grammar::TokenMasker> token_masker_;
  // Compiled grammars by source, reused by requests that send the same one, each with
  // the token masks its sequences share (bounded: cleared when full).
  struct CompiledGrammar {
    std::shared_ptr<const grammar::Grammar> grammar;
    std::shared_ptr<grammar::MaskCache> masks;
  };
  absl::flat_hash_map<std::string, CompiledGrammar> grammars_;
  static constexpr size_t kMaxCachedGrammars = 64;
};

}  // namespace tandem::engine

#endif  // TANDEM_COMMON_ENGINE_ENGINE_H_
