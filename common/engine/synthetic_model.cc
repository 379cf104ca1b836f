#include "common/engine/synthetic_model.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <thread>

#include "common/engine/model_weights.h"
#include "common/util/half.h"
#include "common/util/strings.h"
#include "kernels/cpu/thread_pool.h"

namespace tandem::engine {

namespace {

struct Shape {
  const char* name;
  int64_t layers, hidden, heads, kv_heads, ffn, vocab, context;
  double theta;
  int64_t experts = 0, used = 0;  // a mixture of experts, each `ffn` wide
};

constexpr Shape kShapes[] = {
    {"llama3-8b", 32, 4096, 32, 8, 14336, 128256, 8192, 500000.0},
    {"llama3-1b", 16, 2048, 32, 8, 8192, 128256, 8192, 500000.0},
    {"tiny", 4, 256, 8, 2, 640, 1024, 2048, 10000.0},
    {"tiny-moe", 4, 256, 8, 2, 128, 1024, 2048, 10000.0, 16, 4},
};

// A counter-based uniform draw in [-1, 1) (splitmix64 of seed and index): any element
// on any thread, in any order, gets the same value.
float Uniform(uint64_t seed, uint64_t i) {
  uint64_t z = seed + 0x9E3779B97F4A7C15ull * (i + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return static_cast<float>(static_cast<double>(z >> 11) * 0x1.0p-52 - 1.0);
}

}  // namespace

std::vector<std::string> SyntheticShapes() {
  std::vector<std::string> names;
  for (const Shape& s : kShapes) names.push_back(s.name);
  return names;
}

absl::StatusOr<model::ModelConfig> SyntheticConfig(std::string_view shape) {
  for (const Shape& s : kShapes) {
    if (shape != s.name) continue;
    model::ModelConfig c;
    c.architecture = "llama";
    c.name = StrCat("synthetic-", s.name);
    c.n_layers = s.layers;
    c.hidden_size = s.hidden;
    c.n_heads = s.heads;
    c.n_kv_heads = s.kv_heads;
    c.head_dim = s.hidden / s.heads;
    c.ffn_size = s.ffn;
    c.vocab_size = s.vocab;
    c.context_length = s.context;
    c.rope_dim = c.head_dim;
    c.rms_norm_eps = 1e-5;
    c.rope_theta = s.theta;
    c.moe.experts = s.experts;
    c.moe.used = s.used;
    c.moe.ffn_size = s.experts > 0 ? s.ffn : 0;
    c.moe.weights_norm = true;  // as Mixtral
    return c;
  }
  return absl::InvalidArgumentError(
      StrCat("synthetic model: '", shape, "' is not one of ", Join(SyntheticShapes(), ", ")));
}

absl::StatusOr<std::unique_ptr<ModelWeights>> ModelWeights::Random(const model::ModelConfig& c,
                                                                   model::GgmlType type,
                                                                   uint64_t seed) {
  if (type != model::GgmlType::kF32 && type != model::GgmlType::kQ8_0) {
    return absl::InvalidArgumentError("synthetic weights: type must be F32 or Q8_0");
  }
  std::unique_ptr<ModelWeights> w(new ModelWeights());
  w->config_ = c;
  kernels::ThreadPool pool(static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
  // body(row) for rows [0, n) on every core.
  auto parallel_rows = [&](int64_t n, const std::function<void(int64_t)>& body) {
    pool.ParallelFor(n, [&](int64_t begin, int64_t end, int) {
      for (int64_t r = begin; r < end; ++r) body(r);
    });
  };
  uint64_t tensor = 0;  // each tensor draws from its own stream
  auto matrix = [&](int64_t rows, int64_t cols) {
    const uint64_t s = seed ^ (0xD1B54A32D192ED03ull * ++tensor);
    // Uniform on [-a, a] has std a/√3: 0.02 × sqrt(1024 / fan_in).
    const float a = 0.02f * std::sqrt(3.0f * 1024.0f / static_cast<float>(cols));
    WeightMatrix m{type, rows, cols, nullptr};
    if (type == model::GgmlType::kF32) {
      std::vector<float> v(static_cast<size_t>(rows * cols));
      parallel_rows(rows, [&](int64_t r) {
        for (int64_t i = 0; i < cols; ++i) {
          const float x = a * Uniform(s, static_cast<uint64_t>(r * cols + i));
          v[r * cols + i] = Bf16ToFloat(FloatToBf16(x));
        }
      });
      w->owned_.push_back(std::move(v));
      m.data = reinterpret_cast<const uint8_t*>(w->owned_.back().data());
    } else {
      // Q8_0 blocks: f16 scale, then 32 int8 quants.
      const int64_t blocks = cols / 32, row_bytes = blocks * 34;
      std::vector<uint8_t> v(static_cast<size_t>(rows * row_bytes));
      const uint16_t d = FloatToHalf(a / 127.0f);
      parallel_rows(rows, [&](int64_t r) {
        for (int64_t b = 0; b < blocks; ++b) {
          uint8_t* blk = v.data() + r * row_bytes + b * 34;
          blk[0] = static_cast<uint8_t>(d & 0xFF);
          blk[1] = static_cast<uint8_t>(d >> 8);
          for (int i = 0; i < 32; ++i) {
            const float u = Uniform(s, static_cast<uint64_t>(r * cols + b * 32 + i));
            blk[2 + i] = static_cast<uint8_t>(static_cast<int8_t>(std::lround(u * 127.0f)));
          }
        }
      });
      w->owned_bytes_.push_back(std::move(v));
      m.data = w->owned_bytes_.back().data();
    }
    w->weight_bytes_ += m.rows * (type == model::GgmlType::kF32 ? cols * 4 : cols / 32 * 34);
    return m;
  };
  auto ones = [&](int64_t n) {
    w->owned_.emplace_back(static_cast<size_t>(n), 1.0f);
    w->weight_bytes_ += n * 4;
    return w->owned_.back().data();
  };
  if (type == model::GgmlType::kQ8_0 &&
      (c.hidden_size % 32 != 0 || c.ffn_size % 32 != 0 || (c.n_heads * c.head_dim) % 32 != 0 ||
       c.moe.ffn_size % 32 != 0 || c.moe.shared_ffn_size % 32 != 0)) {
    return absl::InvalidArgumentError("synthetic weights: Q8_0 needs widths divisible by 32");
  }
  const int64_t h = c.hidden_size, q_dim = c.n_heads * c.head_dim,
                kv_dim = c.n_kv_heads * c.head_dim;
  w->token_embd_ = matrix(c.vocab_size, h);
  w->output_ = matrix(c.vocab_size, h);
  w->output_norm_ = ones(h);
  for (int64_t i = 0; i < c.n_layers; ++i) {
    LayerWeights L;
    L.attn_norm = ones(h);
    L.wq = matrix(q_dim, h);
    L.wk = matrix(kv_dim, h);
    L.wv = matrix(kv_dim, h);
    L.wo = matrix(h, q_dim);
    L.ffn_norm = ones(h);
    const bool moe = c.LayerIsMoe(i);
    const int64_t dense = moe ? c.moe.shared_ffn_size : c.ffn_size;
    if (dense > 0) {
      L.w_gate = matrix(dense, h);
      L.w_up = matrix(dense, h);
      L.w_down = matrix(h, dense);
    }
    if (moe) {
      L.router = matrix(c.moe.experts, h);
      for (int64_t e = 0; e < c.moe.experts; ++e) {
        L.expert_gate.push_back(matrix(c.moe.ffn_size, h));
        L.expert_up.push_back(matrix(c.moe.ffn_size, h));
        L.expert_down.push_back(matrix(h, c.moe.ffn_size));
      }
      if (c.moe.shared_ffn_size > 0) L.shared_gate = ones(h);
    }
    w->layers_.push_back(std::move(L));
  }
  return w;
}

}  // namespace tandem::engine
