#include "cli/speculative_bench_command.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "cli/exit_status.h"
#include "common/engine/loaded_model.h"
#include "common/util/status_macros.h"
#include "common/util/strings.h"

namespace tandem::cli {

namespace {

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
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

struct Run {
  double tpot_ms = 0;
  engine::EngineStats stats;
  std::vector<std::vector<int32_t>> outputs;
};

// Decodes `batch` requests (the prompts in turn) to the end; the clock starts once every
// request has its first token (prefill done).
absl::StatusOr<Run> Decode(const engine::ModelWeights& weights, const tokenizer::Tokenizer& tok,
                           const std::vector<std::string>& texts, int batch,
                           const engine::EngineOptions& options, const SpeculativeBenchOptions& o) {
  ASSIGN_OR_RETURN(std::unique_ptr<engine::Engine> e, engine::Engine::Create(weights, options));
  engine::SamplingParams p;
  p.temperature = o.temperature;
  p.max_tokens = o.tokens;
  std::vector<kv::SeqId> ids;
  for (int i = 0; i < batch; ++i) {
    p.seed = 100 + i;
    ASSIGN_OR_RETURN(std::vector<int32_t> prompt, tok.Encode(texts[i % texts.size()]));
    ASSIGN_OR_RETURN(kv::SeqId id, e->AddRequest(std::move(prompt), p));
    ids.push_back(id);
  }
  std::map<kv::SeqId, std::vector<int32_t>> out;
  std::chrono::steady_clock::time_point t0;
  int64_t after = 0;
  bool started = false;
  while (e->HasWork()) {
    for (const engine::TokenEvent& ev : e->Step()) {
      if (!ev.error.ok()) return ev.error;
      if (ev.token < 0) continue;
      out[ev.id].push_back(ev.token);
      if (started) ++after;
    }
    if (!started && static_cast<int>(out.size()) == batch) {
      started = true;
      t0 = std::chrono::steady_clock::now();
    }
  }
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  Run r;
  // Per token of one sequence: the batch's time divided by its tokens per sequence.
  r.tpot_ms = after > 0 ? ms / (static_cast<double>(after) / batch) : 0;
  r.stats = e->Stats();
  for (kv::SeqId id : ids) r.outputs.push_back(out[id]);
  return r;
}

}  // namespace

CLI::App* AddSpeculativeBenchCommand(CLI::App* bench, SpeculativeBenchOptions* o) {
  CLI::App* cmd = bench->add_subcommand(
      "speculative",
      "Speculative decoding against plain decode: TPOT, speed-up, acceptance, same outputs");
  o->engine.kv_cache_bytes = int64_t{512} << 20;
  cmd->add_option("--model,-m", o->model, "GGUF model (the target)")->required();
  rpc::AddSpeculativeFlags(*cmd, &o->speculative, &o->engine.speculative);
  rpc::AddDeviceFlags(*cmd, &o->engine.device, &o->engine.gpu, &o->engine.batch_invariant,
                      &o->engine.kv_dtype, &o->engine.cpu_math);
  cmd->add_option("--threads,-t", o->engine.num_threads, "Compute threads (0: all cores)")
      ->capture_default_str();
  cmd->add_option("--kv-cache-bytes", o->engine.kv_cache_bytes)->capture_default_str();
  cmd->add_option("--batches", o->batches)->delimiter(',')->capture_default_str();
  cmd->add_option("--tokens", o->tokens, "Tokens generated per request")
      ->check(CLI::Range(2, 100000))
      ->capture_default_str();
  cmd->add_option("--repeat", o->repeat, "Alternating plain/speculative pairs per row")
      ->check(CLI::Range(1, 100))
      ->capture_default_str();
  cmd->add_option("--temperature", o->temperature,
                  "0: greedy; otherwise seeded sampling (outputs still identical)")
      ->check(CLI::Range(0.0, 2.0))
      ->capture_default_str();
  cmd->add_option("--result-json", o->result_json, "Also write the results here");
  cmd->add_flag("--json", o->json, "Print JSON instead of the table");
  return cmd;
}

int RunSpeculativeBench(const SpeculativeBenchOptions& o) {
  auto loaded = engine::LoadModel(o.model);
  if (!loaded.ok()) return Fail(loaded.status());
  engine::EngineOptions spec = o.engine;
  spec.scheduler.max_running =
      std::max(spec.scheduler.max_running, *std::max_element(o.batches.begin(), o.batches.end()));
  engine::LoadedModel draft;
  if (auto st = rpc::ApplySpeculativeFlags(o.speculative, *loaded, &draft, &spec.speculative);
      !st.ok()) {
    return Fail(st);
  }
  if (spec.speculative.method == engine::EngineOptions::Speculative::Method::kOff) {
    return Fail(absl::InvalidArgumentError("--speculative: ngram or draft (off is the baseline)"));
  }
  engine::EngineOptions plain = spec;
  plain.speculative.method = engine::EngineOptions::Speculative::Method::kOff;
  const struct {
    const char* name;
    const std::vector<std::string>* texts;
  } kinds[] = {{"repetitive", &kRepetitive}, {"open-ended", &kOpenEnded}};
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& kind : kinds) {
    for (int batch : o.batches) {
      // Plain and speculative runs alternate; the medians of `repeat` pairs are shown.
      std::vector<double> plain_ms, spec_ms, ratios, acceptance, kept;
      bool identical = true;
      for (int r = 0; r < o.repeat; ++r) {
        auto a = Decode(*loaded->weights, *loaded->tokenizer, *kind.texts, batch, plain, o);
        if (!a.ok()) return Fail(a.status());
        auto b = Decode(*loaded->weights, *loaded->tokenizer, *kind.texts, batch, spec, o);
        if (!b.ok()) return Fail(b.status());
        plain_ms.push_back(a->tpot_ms);
        spec_ms.push_back(b->tpot_ms);
        ratios.push_back(a->tpot_ms / b->tpot_ms);
        const engine::EngineStats& s = b->stats;
        acceptance.push_back(s.spec_draft_tokens > 0
                                 ? static_cast<double>(s.spec_accepted_tokens) / s.spec_draft_tokens
                                 : 0);
        kept.push_back(
            s.spec_drafts > 0 ? static_cast<double>(s.spec_accepted_tokens) / s.spec_drafts : 0);
        identical = identical && a->outputs == b->outputs;
      }
      rows.push_back({{"kind", kind.name},
                      {"batch", batch},
                      {"tpot_plain_ms", Median(plain_ms)},
                      {"tpot_speculative_ms", Median(spec_ms)},
                      {"speedup", Median(ratios)},
                      {"speedup_min", *std::min_element(ratios.begin(), ratios.end())},
                      {"speedup_max", *std::max_element(ratios.begin(), ratios.end())},
                      {"acceptance", Median(acceptance)},
                      {"tokens_kept_per_draft", Median(kept)},
                      {"outputs_identical", identical}});
      if (!o.json) {
        std::fprintf(stderr, "  %s batch %d done\n", kind.name, batch);
      }
    }
  }
  nlohmann::json j = {
      {"model", o.model},
      {"speculative", spec.speculative.method == engine::EngineOptions::Speculative::Method::kNgram
                          ? "ngram"
                          : "draft"},
      {"draft_model", o.speculative.draft_model},
      {"num_speculative_tokens", spec.speculative.num_tokens},
      {"disable_by_batch_size", spec.speculative.disable_by_batch_size},
      {"tokens", o.tokens},
      {"temperature", o.temperature},
      {"repeat", o.repeat},
      {"rows", rows}};
  if (!o.result_json.empty()) std::ofstream(o.result_json) << j.dump(1) << "\n";
  if (o.json) {
    std::printf("%s\n", j.dump(1).c_str());
  } else {
    const std::string drafter = o.speculative.draft_model.empty()
                                    ? std::string("ngram")
                                    : StrCat("draft ", o.speculative.draft_model);
    std::printf("speculative decoding (%s, k <= %d) vs plain: %s, %d tokens, T = %g\n",
                drafter.c_str(), spec.speculative.num_tokens, o.model.c_str(), o.tokens,
                o.temperature);
    for (const auto& r : rows) {
      std::printf(
          "  %-10s batch %2d: TPOT plain %.2f ms, speculative %.2f ms: %.2fx faster (median of "
          "%d; %.2f-%.2fx); acceptance %.0f%%, %.2f tokens kept per draft; outputs %s\n",
          r["kind"].get<std::string>().c_str(), r["batch"].get<int>(),
          r["tpot_plain_ms"].get<double>(), r["tpot_speculative_ms"].get<double>(),
          r["speedup"].get<double>(), o.repeat, r["speedup_min"].get<double>(),
          r["speedup_max"].get<double>(), 100 * r["acceptance"].get<double>(),
          r["tokens_kept_per_draft"].get<double>(),
          r["outputs_identical"].get<bool>() ? "identical" : "DIFFERENT");
    }
  }
  for (const auto& r : rows) {
    if (!r["outputs_identical"].get<bool>()) return 1;  // a correctness failure, not a figure
  }
  return 0;
}

}  // namespace tandem::cli
