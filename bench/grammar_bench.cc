// grammar_bench: what a JSON-schema constraint costs per decoded token on a real
// vocabulary (issue #20's mask-cost figure).
//
//   build/bin/grammar_bench --model models/smollm2-135m-instruct-q4_1.gguf [--steps 400]
//       [--seed 1] [--schema FILE]
//
// Compiles the schema (a nested default one when none is given) and reports the
// compile time; then walks a random output through the grammar, one token at a time
// (each step: the token mask, then a random allowed token), and reports the mask time
// per step: mean, p50, p99, and how many steps the state cache answered. The mask is
// what constrained decoding adds to a decode step; compare it with the model's TPOT.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <random>
#include <sstream>
#include <string>

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
  int steps = 400;
  uint32_t seed = 1;
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
  return 0;
}
