// matmul_bench: the CPU matmul per weight type, on random weights: the float32 path
// (kernels/cpu/matmul.h, `--cpu-math exact`) or the integer one (kernels/cpu/matmul_q8.h,
// `--cpu-math fast`, the activations' quantization included in the time).
//
//   build/bin/matmul_bench [--types q4_0,q4_k,...] [--m 1,16,512] [--n 2048] [--k 2048]
//                          [--threads 1] [--reps 5] [--math exact|fast]
//
// For each type and batch height m: the best of `reps` timed calls of x[m][k] · W[n][k]ᵀ,
// as µs per call, weight bytes read per second (what bounds decode, m = 1) and GFLOP/s
// (2·m·n·k per call; what bounds prefill). Weights are random blocks with finite scales
// (tests/quant_blocks.h): the kernels' speed does not depend on the values.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "common/model/ggml_type.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/matmul_q8.h"
#include "kernels/cpu/thread_pool.h"
#include "tests/quant_blocks.h"

namespace {

using tandem::model::GgmlType;

std::vector<std::string> Split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');) out.push_back(item);
  return out;
}

bool TypeByName(std::string name, GgmlType* type) {
  std::transform(name.begin(), name.end(), name.begin(), ::toupper);
  for (uint32_t id = 0; id < 64; ++id) {
    const tandem::model::GgmlTypeTraits* t = tandem::model::FindGgmlType(id);
    if (t != nullptr && t->name == name) {
      *type = t->type;
      return tandem::kernels::MatMulSupports(t->type);
    }
  }
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  std::string types = "f32,q8_0,q4_0,q4_1,q5_0,q5_1,iq4_nl,mxfp4,q2_k,q3_k,q4_k,q5_k,q6_k,iq4_xs";
  std::string ms = "1,16,512";
  int64_t n = 2048, k = 2048;
  int threads = 1, reps = 5;
  bool fast = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--types") {
      types = next();
    } else if (a == "--m") {
      ms = next();
    } else if (a == "--n") {
      n = std::stoll(next());
    } else if (a == "--k") {
      k = std::stoll(next());
    } else if (a == "--threads") {
      threads = std::stoi(next());
    } else if (a == "--reps") {
      reps = std::stoi(next());
    } else if (a == "--math" && (i + 1 < argc) &&
               (std::string(argv[i + 1]) == "exact" || std::string(argv[i + 1]) == "fast")) {
      fast = next() == "fast";
    } else {
      std::fprintf(stderr,
                   "usage: %s [--types q4_0,q4_k,...] [--m 1,16,512] [--n N] [--k K] "
                   "[--threads T] [--reps R] [--math exact|fast]\n",
                   argv[0]);
      return 2;
    }
  }
  if (k % 256 != 0) {
    std::fprintf(stderr, "--k must be a multiple of 256 (every type's block)\n");
    return 2;
  }
  tandem::kernels::ThreadPool pool(threads);
  std::mt19937 rng(1);
  std::printf("%s math, isa %s, n %lld, k %lld, %d thread(s), best of %d\n",
              fast ? "fast" : "exact",
              fast ? tandem::kernels::MatMulQ8Isa() : tandem::kernels::MatMulIsa(),
              static_cast<long long>(n), static_cast<long long>(k), threads, reps);
  std::printf("%-7s %5s %12s %12s %10s\n", "type", "m", "us/call", "weight GB/s", "GFLOP/s");
  for (const std::string& name : Split(types)) {
    GgmlType type;
    if (!TypeByName(name, &type)) {
      std::fprintf(stderr, "unknown or unsupported type '%s'\n", name.c_str());
      return 2;
    }
    if (fast && !tandem::kernels::Q8Supports(type)) {
      std::printf("%-7s (no integer path)\n", name.c_str());
      continue;
    }
    std::vector<uint8_t> w;
    if (type == GgmlType::kF32) {
      std::vector<float> f(static_cast<size_t>(n * k));
      std::normal_distribution<float> g(0.0f, 0.02f);
      for (float& v : f) v = g(rng);
      w.assign(reinterpret_cast<uint8_t*>(f.data()),
               reinterpret_cast<uint8_t*>(f.data() + f.size()));
    } else {
      w = tandem::testing::RandomQuantRows(
          type, n, k, tandem::model::Traits(type).block_size == 256 ? 1e-3f : 0.01f, rng);
    }
    const tandem::kernels::WeightMatrix matrix{type, n, k, w.data()};
    for (const std::string& m_str : Split(ms)) {
      const int64_t m = std::stoll(m_str);
      std::vector<float> x(static_cast<size_t>(m * k)), out(static_cast<size_t>(m * n));
      std::normal_distribution<float> g(0.0f, 1.0f);
      for (float& v : x) v = g(rng);
      double best = 1e30;
      for (int r = 0; r < reps + 1; ++r) {  // the first call warms caches and page tables
        const auto t0 = std::chrono::steady_clock::now();
        if (fast) {
          float* o = out.data();
          tandem::kernels::MatMulQ8Group(x.data(), m, {&matrix}, {&o}, &pool);
        } else {
          tandem::kernels::MatMul(x.data(), m, matrix, out.data(), &pool);
        }
        const double s =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (r > 0) best = std::min(best, s);
      }
      std::printf("%-7s %5lld %12.1f %12.2f %10.1f\n", name.c_str(), static_cast<long long>(m),
                  best * 1e6, static_cast<double>(w.size()) / best / 1e9,
                  2.0 * static_cast<double>(m * n * k) / best / 1e9);
    }
  }
  return 0;
}
