// What the in-process worker tests share: a decode TokenSink that collects a stream,
// greedy parameters, one request through a prefill/decode pair, and the single-engine
// answer a pair must reproduce.
#ifndef TANDEM_TESTS_WORKER_TEST_UTIL_H_
#define TANDEM_TESTS_WORKER_TEST_UTIL_H_

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "common/engine/engine.h"
#include "decode_worker/decode_worker.h"
#include "gtest/gtest.h"
#include "prefill_worker/prefill_worker.h"

namespace tandem::testing {

// Gathers one sequence's tokens; Wait returns them or the error that ended the stream.
class CollectingSink : public decode::TokenSink {
 public:
  void OnToken(const engine::TokenEvent& ev) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (ev.token >= 0) tokens_.push_back(ev.token);
    done_ = ev.finished;
    cv_.notify_all();
  }
  void OnError(const absl::Status& st) override {
    std::lock_guard<std::mutex> lock(mu_);
    error_ = st;
    done_ = true;
    cv_.notify_all();
  }
  absl::StatusOr<std::vector<int32_t>> Wait(
      std::chrono::milliseconds timeout = std::chrono::seconds(120)) {
    std::unique_lock<std::mutex> lock(mu_);
    EXPECT_TRUE(cv_.wait_for(lock, timeout, [&] { return done_; })) << "the stream never ended";
    if (!error_.ok()) return error_;
    return tokens_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<int32_t> tokens_;
  absl::Status error_;
  bool done_ = false;
};

// Greedy, exactly `max_tokens` tokens.
inline engine::SamplingParams Greedy(int32_t max_tokens) {
  engine::SamplingParams p;
  p.temperature = 0;
  p.max_tokens = max_tokens;
  p.ignore_eos = true;
  return p;
}

// Reserve on `decode` → Prefill on `prefill` (its KV to `address`) → decode: the whole
// answer, or the first error. A reservation left by a failure is released, as the
// router releases it. `before_decode` runs between the prefill and the decode.
inline absl::StatusOr<std::vector<int32_t>> RunPair(
    decode::DecodeWorker& decode, prefill::PrefillWorker& prefill, const std::string& address,
    const std::vector<int32_t>& prompt, const engine::SamplingParams& p,
    const std::function<void()>& before_decode = {}) {
  auto r = decode.Reserve(static_cast<int64_t>(prompt.size()) + 1, std::chrono::seconds(60));
  if (!r.ok()) return r.status();
  auto first = prefill.Prefill(prompt, p, {address, r->lease_id, r->block_ids, 0, r->epoch});
  if (!first.ok()) {
    decode.Release(r->lease_id);
    return first.status();
  }
  if (before_decode) before_decode();
  auto sink = std::make_shared<CollectingSink>();
  if (absl::Status st = decode.StartDecode(r->lease_id, prompt, first->first.token, p, sink);
      !st.ok()) {
    decode.Release(r->lease_id);
    return st;
  }
  auto rest = sink->Wait();
  if (!rest.ok()) return rest.status();
  std::vector<int32_t> all = {first->first.token};
  all.insert(all.end(), rest->begin(), rest->end());
  return all;
}

// The tokens one engine (`options`) generates for `prompt`.
inline std::vector<int32_t> SingleEngineTokens(const engine::ModelWeights& weights,
                                               const engine::EngineOptions& options,
                                               const std::vector<int32_t>& prompt,
                                               const engine::SamplingParams& p) {
  auto e = engine::Engine::Create(weights, options);
  EXPECT_TRUE(e.ok()) << e.status();
  EXPECT_TRUE((*e)->AddRequest(prompt, p).ok());
  std::vector<int32_t> out;
  while ((*e)->HasWork())
    for (const auto& ev : (*e)->Step())
      if (ev.token >= 0) out.push_back(ev.token);
  return out;
}

}  // namespace tandem::testing

#endif  // TANDEM_TESTS_WORKER_TEST_UTIL_H_
