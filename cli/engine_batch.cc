#include "cli/engine_batch.h"

#include <algorithm>
#include <chrono>

#include "cli/bench_prompts.h"

namespace tandem::cli {

BatchRun RunBatch(engine::Engine& e, int n, int32_t prompt_len, int32_t gen, int32_t vocab,
                  uint32_t salt) {
  using Clock = std::chrono::steady_clock;
  engine::SamplingParams p;
  p.temperature = 0;
  p.max_tokens = gen;
  p.ignore_eos = true;
  for (int i = 0; i < n; ++i) (void)e.AddRequest(BenchPrompt(prompt_len, vocab, salt + i), p);
  BatchRun r;
  const int64_t preempted_before = e.Stats().preemptions;
  const auto t0 = Clock::now();
  int firsts = 0;
  Clock::time_point t_first = t0;
  while (e.HasWork()) {
    const auto events = e.Step();
    r.peak_used_blocks = std::max(r.peak_used_blocks, e.Stats().blocks.used_blocks);
    for (const auto& ev : events) {
      if (ev.token < 0) continue;
      ++r.generated;
      if (++firsts == n) t_first = Clock::now();
    }
    if (firsts < n) t_first = Clock::now();
  }
  const auto t1 = Clock::now();
  r.first_token_s = std::chrono::duration<double>(t_first - t0).count();
  r.decode_s = std::chrono::duration<double>(t1 - t_first).count();
  r.preemptions = e.Stats().preemptions - preempted_before;
  return r;
}

}  // namespace tandem::cli
