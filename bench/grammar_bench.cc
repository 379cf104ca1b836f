// grammar_bench: what a JSON-schema constraint costs per decoded token on a real
// vocabulary and model (issue #20's mask-cost figures).
//
//   build/bin/grammar_bench --model models/smollm2-135m-instruct-q4_1.gguf [--steps 400]
//       [--seed 1] [--schema FILE] [--engine] [--tokens 64] [--threads N]
//
// Compiles the schema (a nested default one when none is given) and reports the
// compile time; then walks a random output through the grammar, one token at a time
// (each step: the token mask, then a random allowed token), and reports the mask time
// per step: mean, p50, p99, and how many steps the state cache answered.
// --engine: also decodes with the CPU engine, at batch 1 and 16, the same prompts
// greedily with and without the schema, and reports the time per decode step (TPOT)
// of each and their ratio.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <random>
#include <set>
#include <sstream>
#include <string>

#include "common/engine/engine.h"
#include "common/engine/loaded_model.h"
#include "common/grammar/constraint.h"
#include "common/grammar/grammar.h"
#include "common/grammar/grammar_matcher.h"
#include "common/grammar/json_schema_grammar.h"
#include "common/grammar/token_masker.h"
#include "common/model/gguf_file.h"
#include "common/tokenizer/tokenizer.h"

namespace {

constexpr const char* kDefaultSchema = R"({
  "type": "object",
  "properties": {
    "name": {"type": "string", "maxLength": 40},
    "age": {"type": "integer", "minimum": 0, "maximum": 150},
    "email": {"type": "string", "format": "email"},
    "address": {"type": "object", "properties": {
        "street": {"type": "string"}, "city": {"type": "string"},
        "zip": {"type": "string", "pattern": "^[0-9]{5}$"}},
      "required": ["street", "city"]},
    "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 5},
    "scores": {"type": "array", "items": {"type": "number"}},
    "status": {"enum": ["active", "inactive", "banned"]},
    "friends": {"type": "array", "items": {"type": "object",
        "properties": {"name": {"type": "string"}, "since": {"type": "string", "format": "date"}},
        "required": ["name"]}}
  },
  "required": ["name", "age", "status"]
})";

double Ms(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double, std::milli>(d).count();
}

}  // namespace

int main(int argc, char** argv) {
  using namespace tandem;
  std::string model, schema_path;
  int steps = 400, tokens = 64, threads = 0;
  uint32_t seed = 1;
  bool run_engine = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--model") {
      model = next();
    } else if (a == "--schema") {
      schema_path = next();
    } else if (a == "--steps") {
      steps = std::stoi(next());
    } else if (a == "--seed") {
      seed = static_cast<uint32_t>(std::stoul(next()));
    } else if (a == "--engine") {
      run_engine = true;
    } else if (a == "--tokens") {
      tokens = std::stoi(next());
    } else if (a == "--threads") {
      threads = std::stoi(next());
    } else {
      std::fprintf(stderr, "usage: %s --model M [--schema FILE] [--steps N] [--seed S]\n", argv[0]);
      return 2;
    }
  }
  std::string schema = kDefaultSchema;
  if (!schema_path.empty()) {
    std::ifstream in(schema_path);
    std::stringstream ss;
    ss << in.rdbuf();
    schema = ss.str();
  }
  auto file = model::GgufFile::Open(model);
  if (!file.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(file.status().message()).c_str());
    return 1;
  }
  auto tok = tokenizer::Tokenizer::FromGguf(**file);
  if (!tok.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(tok.status().message()).c_str());
    return 1;
  }
  const tokenizer::Vocab& vocab = (*tok)->vocab();
  std::vector<std::string> bytes(vocab.size());
  for (int32_t id = 0; id < vocab.size(); ++id) {
    if (vocab.types[id] != tokenizer::TokenType::kControl) bytes[id] = (*tok)->TokenBytes(id);
  }
  auto t0 = std::chrono::steady_clock::now();
  auto masker =
      std::make_shared<const grammar::TokenMasker>(bytes, std::vector<int32_t>{vocab.eos_id});
  auto t1 = std::chrono::steady_clock::now();
  auto gbnf = grammar::JsonSchemaToGbnf(schema);
  if (!gbnf.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(gbnf.status().message()).c_str());
    return 1;
  }
  auto g = grammar::Grammar::Compile(*gbnf);
  if (!g.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(g.status().message()).c_str());
    return 1;
  }
  auto t2 = std::chrono::steady_clock::now();
  auto shared = std::make_shared<const grammar::Grammar>(*std::move(g));
  grammar::Constraint c(shared, masker);
  std::printf("vocabulary %d tokens: trie built in %.1f ms\n", vocab.size(), Ms(t1 - t0));
  std::printf("schema → grammar: %.2f ms (%zu grammar elements)\n", Ms(t2 - t1),
              shared->elements().size());

  std::mt19937 rng(seed);
  std::vector<double> times;
  std::string out;
  for (int step = 0; step < steps; ++step) {
    auto a = std::chrono::steady_clock::now();
    const grammar::TokenMask& mask = c.Allowed();
    times.push_back(Ms(std::chrono::steady_clock::now() - a));
    std::vector<int32_t> allowed;
    for (int32_t id = 0; id < vocab.size(); ++id) {
      if (grammar::Allowed(mask, id)) allowed.push_back(id);
    }
    if (allowed.empty()) break;
    const int32_t pick = allowed[rng() % allowed.size()];
    if (pick == vocab.eos_id) break;
    if (!c.Accept(pick).ok()) return 1;
    out += (*tok)->TokenBytes(pick);
  }
  std::vector<double> sorted = times;
  std::sort(sorted.begin(), sorted.end());
  double sum = 0;
  for (double t : times) sum += t;
  std::printf("%zu steps: mask mean %.3f ms, p50 %.3f ms, p99 %.3f ms, max %.3f ms\n", times.size(),
              sum / times.size(), sorted[sorted.size() / 2], sorted[sorted.size() * 99 / 100],
              sorted.back());
  std::printf("state cache: %lld of %lld masks\n", static_cast<long long>(c.stats().cache_hits),
              static_cast<long long>(c.stats().masks));
  std::printf("output (%zu bytes): %.300s\n", out.size(), out.c_str());
  if (!run_engine) return 0;

  auto loaded = engine::LoadModel(model);
  if (!loaded.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(loaded.status().message()).c_str());
    return 1;
  }
  engine::EngineOptions eo;
  eo.num_threads = threads;
  eo.kv_cache_bytes = int64_t{512} << 20;
  eo.token_masker = engine::MakeTokenMasker(*loaded->tokenizer);
  auto eng = engine::Engine::Create(*loaded->weights, eo);
  if (!eng.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(eng.status().message()).c_str());
    return 1;
  }
  // Prompts asking for the record the schema describes, each a little different.
  auto decode = [&](int batch, bool constrained, int* steps_out) {
    engine::SamplingParams p;
    p.temperature = 0;
    p.max_tokens = tokens;
    p.ignore_eos = !constrained;  // both run their full length (the schema's strings are long)
    // Each constrained run gets a grammar the engine has not seen (an unused rule makes
    // the source new), so no mask comes from an earlier run: the cost of a new schema,
    // with masks shared only among the batch's own sequences.
    static int variant = 0;
    if (constrained) p.grammar = StrCat(*gbnf, "unused-", ++variant, " ::= \"x\"\n");
    for (int i = 0; i < batch; ++i) {
      const std::string text = "<|im_start|>user\nDescribe person number " + std::to_string(i) +
                               " as JSON.<|im_end|>\n<|im_start|>assistant\n";
      auto id = (*eng)->AddRequest(*(*tok)->Encode(text), p);
      if (!id.ok()) std::fprintf(stderr, "error: %s\n", std::string(id.status().message()).c_str());
    }
    std::set<uint64_t> started;  // requests whose first token came
    int steps_after = 0;
    auto t_first = std::chrono::steady_clock::now();
    while ((*eng)->HasWork()) {
      const bool all_started = static_cast<int>(started.size()) == batch;
      const auto events = (*eng)->Step();
      if (all_started) ++steps_after;
      for (const auto& ev : events) {
        if (!ev.error.ok()) {
          std::fprintf(stderr, "error: %s\n", std::string(ev.error.message()).c_str());
        }
        if (ev.token >= 0 && started.insert(ev.id).second &&
            static_cast<int>(started.size()) == batch) {
          t_first = std::chrono::steady_clock::now();
        }
      }
    }
    *steps_out = steps_after;
    return Ms(std::chrono::steady_clock::now() - t_first) / std::max(1, steps_after);
  };
  int warm = 0;
  decode(2, true, &warm);
  for (int batch : {1, 16}) {
    int plain_steps = 0, constrained_steps = 0;
    const double plain = decode(batch, false, &plain_steps);
    const double constrained = decode(batch, true, &constrained_steps);
    std::printf(
        "engine batch %2d: TPOT plain %.2f ms (%d steps), with the schema %.2f ms (%d "
        "steps): %.3fx\n",
        batch, plain, plain_steps, constrained, constrained_steps, constrained / plain);
  }
  return 0;
}
