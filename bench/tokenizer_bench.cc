// tokenizer_bench: encoding speed of tandem's tokenizer on one text file.
//
//   build/bin/tokenizer_bench --model models/smollm2-135m-instruct-q4_1.gguf
//       --text corpus.txt [--repeat 5] [--json] [--dump-ids ids.txt]
//
// Encodes the whole file as one string (no BOS), `repeat` times on one thread, and
// reports the first (cold word cache) and best wall times in MB/s (10^6 bytes/s).
// bench/tokenizer_compare.sh runs it beside Hugging Face tokenizers on the same text.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#include "common/model/gguf_file.h"
#include "common/tokenizer/tokenizer.h"
#include "nlohmann/json.hpp"

int main(int argc, char** argv) {
  std::string model, text_path, dump_path;
  int repeat = 5;
  bool json = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--model")
      model = next();
    else if (a == "--text")
      text_path = next();
    else if (a == "--repeat")
      repeat = std::stoi(next());
    else if (a == "--dump-ids")
      dump_path = next();
    else if (a == "--json")
      json = true;
    else {
      std::fprintf(stderr, "usage: %s --model M --text FILE [--repeat N] [--json] [--dump-ids F]\n",
                   argv[0]);
      return 2;
    }
  }
  std::ifstream in(text_path, std::ios::binary);
  if (model.empty() || !in) {
    std::fprintf(stderr, "error: need --model and a readable --text file\n");
    return 2;
  }
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();

  auto file = tandem::model::GgufFile::Open(model);
  if (!file.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(file.status().message()).c_str());
    return 1;
  }
  auto tok = tandem::tokenizer::Tokenizer::FromGguf(**file);
  if (!tok.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(tok.status().message()).c_str());
    return 1;
  }
  tandem::tokenizer::EncodeOptions opts;
  opts.add_special = false;
  double first_s = 0, best_s = 1e30;
  std::vector<int32_t> ids;
  for (int r = 0; r < repeat; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    auto out = (*tok)->Encode(text, opts);
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!out.ok()) {
      std::fprintf(stderr, "error: %s\n", std::string(out.status().message()).c_str());
      return 1;
    }
    ids = std::move(*out);
    if (r == 0) first_s = s;
    best_s = std::min(best_s, s);
  }
  if (!dump_path.empty()) {
    std::ofstream d(dump_path);
    for (int32_t id : ids) d << id << '\n';
  }
  const double mb = text.size() / 1e6;
  if (json) {
    nlohmann::json j = {{"impl", "tandem"},       {"bytes", text.size()},
                        {"tokens", ids.size()},   {"first_s", first_s},
                        {"best_s", best_s},       {"first_mb_per_s", mb / first_s},
                        {"mb_per_s", mb / best_s}};
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("tandem: %zu bytes -> %zu tokens; first %.1f MB/s, best of %d %.1f MB/s\n",
                text.size(), ids.size(), mb / first_s, repeat, mb / best_s);
  }
  return 0;
}
