// speculative_bench: what prompt-lookup speculation does to decode speed (issue #21).
//
// Decodes the same requests with the CPU engine twice — plain, and with prompt-lookup
// drafts of up to --k tokens — at batch 1 and 16, on two kinds of prompt: repetitive
// (copying a text back, editing code, quoting) where the output repeats the prompt, and
// open-ended ones where it does not. Prints, per kind and batch: TPOT (decode time per
// generated token of one sequence), the speed-up (medians of --repeat alternating
// pairs), the acceptance rate (kept ÷ proposed tokens) and tokens kept per draft.
// Greedy by default (the outputs are checked equal to plain decoding's), or
// --temperature T with a seed. The engine's defaults apply (adaptive k, no drafts while
// more than one sequence decodes) unless --disable-by-batch-size N says otherwise.
//
//   build/bin/speculative_bench --model models/smollm2-135m-instruct-q4_1.gguf
//       [--k 4] [--tokens 128] [--batches 1,16] [--repeat 3] [--temperature 0]
//       [--disable-by-batch-size N] [--threads 0]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "common/engine/engine.h"
#include "common/engine/loaded_model.h"

namespace {

using namespace tandem;

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

double Ms(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double, std::milli>(d).count();
}

std::string Chat(const std::string& user) {
  return "<|im_start|>user\n" + user + "<|im_end|>\n<|im_start|>assistant\n";
}

const std::vector<std::string> kRepetitive = {
    Chat("Copy this text exactly, word for word:\nThe committee met on Tuesday to review the "
         "budget. It agreed to fund the new library, to repair the bridge on Mill Street, and "
         "to hire two more teachers for the primary school. The next meeting is in March."),
    Chat("Rename the variable `total` to `sum` in this code and print the whole code:\n"
         "def average(values):\n    total = 0\n    for v in values:\n        total += v\n"
         "    return total / len(values)\n\nprint(average([1, 2, 3]))"),
    Chat("Quote the first sentence of this passage, then the last one:\n\"Water boils at 100 "
         "degrees Celsius at sea level. At higher altitudes it boils at lower temperatures, "
         "because the air pressure is lower. This is why cooking takes longer in the "
         "mountains.\""),
    Chat("Repeat the list below, one item per line:\napples, bread, cheese, dates, eggs, flour, "
         "grapes, honey, ice cream, jam, kale, lemons"),
};

const std::vector<std::string> kOpenEnded = {
    Chat("Write a short story about a lighthouse keeper."),
    Chat("What are three good habits for staying healthy?"),
    Chat("Explain why the sky is blue."),
    Chat("Give me ideas for a birthday party."),
};

struct Result {
  double tpot_ms = 0;
  double acceptance = 0;
  double kept_per_draft = 0;
  std::vector<std::vector<int32_t>> outputs;
};

Result Decode(const engine::ModelWeights& weights, const tokenizer::Tokenizer& tok,
              const std::vector<std::string>& texts, int batch, int k, int tokens,
              double temperature, int threads, int disable_batch) {
  engine::EngineOptions o;
  o.num_threads = threads;
  o.kv_cache_bytes = int64_t{512} << 20;
  o.speculative.ngram = k > 0;
  o.speculative.num_tokens = k;
  if (disable_batch > 0) o.speculative.disable_by_batch_size = disable_batch;
  auto eng = engine::Engine::Create(weights, o);
  if (!eng.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(eng.status().message()).c_str());
    std::exit(1);
  }
  engine::SamplingParams p;
  p.temperature = temperature;
  p.max_tokens = tokens;
  std::vector<kv::SeqId> ids;
  for (int i = 0; i < batch; ++i) {
    p.seed = 100 + i;
    ids.push_back(*(*eng)->AddRequest(*tok.Encode(texts[i % texts.size()]), p));
  }
  std::map<kv::SeqId, std::vector<int32_t>> out;
  // The clock starts once every request has its first token (prefill done).
  std::chrono::steady_clock::time_point t0;
  int64_t after = 0, steps_after = 0;
  bool started = false;
  while ((*eng)->HasWork()) {
    const auto events = (*eng)->Step();
    if (started) ++steps_after;
    for (const auto& ev : events) {
      if (ev.token < 0) continue;
      out[ev.id].push_back(ev.token);
      if (started) ++after;
    }
    if (!started && static_cast<int>(out.size()) == batch) {
      started = true;
      t0 = std::chrono::steady_clock::now();
    }
  }
  const double ms = Ms(std::chrono::steady_clock::now() - t0);
  Result r;
  // Per token of one sequence: the batch's time divided by its tokens per sequence.
  r.tpot_ms = after > 0 ? ms / (static_cast<double>(after) / batch) : 0;
  const engine::EngineStats s = (*eng)->Stats();
  r.acceptance = s.spec_draft_tokens > 0
                     ? static_cast<double>(s.spec_accepted_tokens) / s.spec_draft_tokens
                     : 0;
  r.kept_per_draft =
      s.spec_drafts > 0 ? static_cast<double>(s.spec_accepted_tokens) / s.spec_drafts : 0;
  (void)steps_after;
  for (kv::SeqId id : ids) r.outputs.push_back(out[id]);
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  std::string model;
  int k = 4, tokens = 128, threads = 0, disable_batch = 0, repeat = 3;
  std::vector<int> batches = {1, 16};
  double temperature = 0;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--model") {
      model = next();
    } else if (a == "--k") {
      k = std::stoi(next());
    } else if (a == "--tokens") {
      tokens = std::stoi(next());
    } else if (a == "--temperature") {
      temperature = std::stod(next());
    } else if (a == "--threads") {
      threads = std::stoi(next());
    } else if (a == "--batches") {
      batches.clear();
      std::string list = next();
      for (size_t at = 0; at < list.size();) {
        const size_t comma = std::min(list.find(',', at), list.size());
        batches.push_back(std::stoi(list.substr(at, comma - at)));
        at = comma + 1;
      }
    } else if (a == "--repeat") {
      repeat = std::max(1, std::stoi(next()));
    } else if (a == "--disable-by-batch-size") {
      disable_batch = std::stoi(next());
    } else {
      std::fprintf(stderr,
                   "usage: %s --model M [--k 4] [--tokens 128] [--batches 1,16] [--repeat 3] "
                   "[--temperature 0] [--disable-by-batch-size N] [--threads 0]\n",
                   argv[0]);
      return 2;
    }
  }
  auto loaded = engine::LoadModel(model);
  if (!loaded.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(loaded.status().message()).c_str());
    return 1;
  }
  const struct {
    const char* name;
    const std::vector<std::string>* texts;
  } kinds[] = {{"repetitive", &kRepetitive}, {"open-ended", &kOpenEnded}};
  for (const auto& kind : kinds) {
    for (int batch : batches) {
      // Plain and speculative runs alternate; the medians of `repeat` pairs are shown.
      std::vector<double> plain_ms, spec_ms, ratios, acceptance, kept;
      bool identical = true;
      for (int r = 0; r < repeat; ++r) {
        const Result plain = Decode(*loaded->weights, *loaded->tokenizer, *kind.texts, batch, 0,
                                    tokens, temperature, threads, disable_batch);
        const Result spec = Decode(*loaded->weights, *loaded->tokenizer, *kind.texts, batch, k,
                                   tokens, temperature, threads, disable_batch);
        plain_ms.push_back(plain.tpot_ms);
        spec_ms.push_back(spec.tpot_ms);
        ratios.push_back(plain.tpot_ms / spec.tpot_ms);
        acceptance.push_back(spec.acceptance);
        kept.push_back(spec.kept_per_draft);
        identical = identical && plain.outputs == spec.outputs;
      }
      std::printf(
          "%-10s batch %2d: TPOT plain %.2f ms, speculative (k<=%d) %.2f ms: %.2fx faster "
          "(median of %d; %.2f-%.2fx); acceptance %.0f%%, %.2f tokens kept per draft; outputs "
          "%s\n",
          kind.name, batch, Median(plain_ms), k, Median(spec_ms), Median(ratios), repeat,
          *std::min_element(ratios.begin(), ratios.end()),
          *std::max_element(ratios.begin(), ratios.end()), 100 * Median(acceptance), Median(kept),
          identical ? "identical" : "DIFFERENT");
    }
  }
  return 0;
}
