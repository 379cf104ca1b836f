#include "common/engine/draft_model.h"

#include <algorithm>

#include "common/engine/sampler.h"
#include "common/util/check.h"
#include "common/util/status_macros.h"
#include "common/util/strings.h"

namespace tandem::engine {

namespace {

kv::KvLayout Layout(const model::ModelConfig& c, int32_t block_size, kv::KvDtype dtype) {
  return {static_cast<int32_t>(c.n_layers), static_cast<int32_t>(c.n_kv_heads),
          static_cast<int32_t>(c.head_dim), block_size, dtype};
}

// What one sequence does in this call.
struct Work {
  const DraftModel::Request* request;
  std::vector<int32_t>* held;  // the draft cache's tokens for it
  int64_t size;                // prompt + output
  int64_t start;               // first token computed now
  int64_t end;                 // one past the last (== size: the catch-up is complete)
};

}  // namespace

int64_t DraftModel::BlockBytes(const model::ModelConfig& config, int32_t block_size,
                               kv::KvDtype dtype) {
  return Layout(config, block_size, dtype).BlockBytes();
}

absl::StatusOr<std::unique_ptr<DraftModel>> DraftModel::Create(const ModelWeights& draft,
                                                               int64_t target_vocab_size,
                                                               kernels::Backend* backend) {
  const model::ModelConfig& c = draft.config();
  if (c.vocab_size != target_vocab_size) {
    return absl::InvalidArgumentError(StrCat("draft_model: a vocabulary of ", c.vocab_size,
                                             " tokens, the target's has ", target_vocab_size));
  }
  std::unique_ptr<DraftModel> d(new DraftModel());
  d->weights_ = &draft;
  d->backend_ = backend;
  ASSIGN_OR_RETURN(d->device_weights_, DeviceWeights::Prepare(draft, backend));
  return d;
}

absl::Status DraftModel::AllocateCache(const DraftModelOptions& options) {
  if (executor_ != nullptr) return absl::FailedPreconditionError("draft cache allocated already");
  const model::ModelConfig& c = weights_->config();
  ASSIGN_OR_RETURN(
      kv_, kernels::KvStorage::Create(backend_, Layout(c, options.block_size, options.kv_dtype),
                                      options.kv_bytes));
  blocks_ = std::make_unique<kv::BlockManager>(kv_->num_blocks(), options.block_size);
  ASSIGN_OR_RETURN(executor_,
                   ModelExecutor::Create(c, *device_weights_, backend_, kv_.get(), options.limits));
  max_pass_tokens_ = options.limits.max_tokens;
  return absl::OkStatus();
}

void DraftModel::Retain(const std::function<bool(kv::SeqId)>& keep) {
  absl::erase_if(held_, [&](const auto& entry) {
    if (keep(entry.first)) return false;
    blocks_->Free(entry.first);
    return true;
  });
}

void DraftModel::ForgetAll() {
  for (const auto& [id, tokens] : held_) blocks_->Free(id);
  held_.clear();
}

absl::Status DraftModel::Propose(std::span<const Request> requests) {
  for (const Request& r : requests) r.draft->clear();
  if (executor_ == nullptr) return absl::FailedPreconditionError("draft cache not allocated");
  const int64_t context = weights_->config().context_length;
  auto token_at = [](const Request& r, int64_t i) {
    return i < static_cast<int64_t>(r.prompt.size()) ? r.prompt[i] : r.output[i - r.prompt.size()];
  };
  // Each request's length and the first token its cached K/V does not hold: the cache
  // is valid up to the first token that differs, and the last token is always computed
  // (its logits give the first proposal).
  struct Candidate {
    const Request* request;
    int64_t size, start;
  };
  std::vector<Candidate> candidates;
  for (const Request& r : requests) {
    const int64_t size = static_cast<int64_t>(r.prompt.size() + r.output.size());
    if (r.k < 1 || size < 1 || size + r.k - 1 > context) continue;
    int64_t start = 0;
    if (auto it = held_.find(r.id); it != held_.end()) {
      const std::vector<int32_t>& held = it->second;
      const int64_t limit = std::min<int64_t>(static_cast<int64_t>(held.size()), size - 1);
      while (start < limit && held[start] == token_at(r, start)) ++start;
    }
    candidates.push_back({&r, size, start});
  }
  // Short catch-ups (a token or two after a draft) first; a long one — a prompt new to
  // the draft — takes what the pass has left, in chunks over several calls.
  std::stable_sort(
      candidates.begin(), candidates.end(),
      [](const Candidate& a, const Candidate& b) { return a.size - a.start < b.size - b.start; });
  std::vector<Work> work;
  int64_t budget = max_pass_tokens_ - static_cast<int64_t>(requests.size());
  for (const Candidate& c : candidates) {
    const Request& r = *c.request;
    const int64_t end = std::min(c.size, c.start + std::max<int64_t>(budget, 1));
    if (end - c.start > budget && !work.empty()) continue;  // no room in this pass
    // Room for the tokens and every draft token but the last (its K/V is never needed).
    const int64_t need = c.size + r.k - 1;
    auto [it, fresh] = held_.try_emplace(r.id);
    const bool fits = fresh ? blocks_->CanAllocate(need) : blocks_->CanAppend(r.id, need);
    if (!fits) {
      if (fresh) held_.erase(it);
      continue;
    }
    TANDEM_CHECK((fresh ? blocks_->Allocate(r.id, need) : blocks_->Append(r.id, need)).ok());
    std::vector<int32_t>& held = it->second;
    held.resize(c.start);
    budget -= end - c.start;
    for (int64_t i = c.start; i < end; ++i) held.push_back(token_at(r, i));
    work.push_back({&r, &held, c.size, c.start, end});
  }
  if (work.empty()) return absl::OkStatus();

  static const SamplingParams kGreedy = [] {
    SamplingParams p;
    p.temperature = 0;
    return p;
  }();
  // Pass 0 computes each catch-up; pass i > 0 the proposal i of those still drafting.
  for (int32_t pass = 0;; ++pass) {
    ForwardBatch batch;
    std::vector<size_t> in_pass;
    for (size_t w = 0; w < work.size(); ++w) {
      const Work& x = work[w];
      const std::vector<int32_t>& table = blocks_->BlockTable(x.request->id);
      if (pass == 0) {
        const bool complete = x.end == x.size;
        batch.AddSequence(std::span(*x.held).subspan(x.start, x.end - x.start),
                          static_cast<int32_t>(x.end), table, /*want_logits=*/complete);
        if (complete) in_pass.push_back(w);
      } else if (static_cast<int32_t>(x.request->draft->size()) == pass && pass < x.request->k) {
        const int32_t last = x.request->draft->back();
        x.held->push_back(last);
        batch.AddSequence(std::span(&last, 1), static_cast<int32_t>(x.size + pass), table, true);
        in_pass.push_back(w);
      }
    }
    if (batch.num_tokens() == 0) break;
    absl::StatusOr<kernels::Tensor> logits = executor_->Forward(batch);
    absl::Status st = logits.status();
    std::vector<SampleResult> sampled;
    if (st.ok() && !in_pass.empty()) {
      std::vector<SampleRow> rows(in_pass.size(), SampleRow{&kGreedy, 0, 0, {}, {}});
      absl::StatusOr<std::vector<SampleResult>> s =
          Sampler::SampleRows(*backend_, *logits, executor_->IdsScratch(), rows);
      if (s.ok()) sampled = *std::move(s);
      st = s.status();
    }
    if (!st.ok()) {
      for (const Request& r : requests) r.draft->clear();
      ForgetAll();
      return st;
    }
    if (in_pass.empty()) break;  // only partial catch-ups this call
    for (size_t i = 0; i < in_pass.size(); ++i) {
      work[in_pass[i]].request->draft->push_back(sampled[i].token);
    }
  }
  return absl::OkStatus();
}

}  // namespace tandem::engine
