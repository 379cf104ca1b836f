// Mixture-of-experts routing and the CPU backend's MoeFfn, against plain restatements:
// picks and weights from a double-precision sort of every expert, and the FFN from
// each (token, slot) computed alone with MatMul and summed in slot order.
#include "kernels/cpu/moe.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>

#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/ops.h"
#include "tests/quant_blocks.h"

namespace tandem::kernels {
namespace {

// The picks and weights of one row, straight from the definitions in double.
void Expected(const std::vector<float>& logits, const std::vector<float>& bias, const MoeRouting& r,
              std::vector<int32_t>* ids, std::vector<double>* weights) {
  const int n = r.experts;
  std::vector<double> value(n), key(n);
  double top = *std::max_element(logits.begin(), logits.end()), z = 0;
  for (int e = 0; e < n; ++e) z += std::exp(static_cast<double>(logits[e]) - top);
  for (int e = 0; e < n; ++e) {
    switch (r.gating) {
      case MoeGating::kSoftmax:
        value[e] = std::exp(logits[e] - top) / z;
        key[e] = value[e];
        break;
      case MoeGating::kSigmoid:
        value[e] = 1 / (1 + std::exp(-static_cast<double>(logits[e])));
        key[e] = value[e] + (bias.empty() ? 0.0 : bias[e]);
        break;
      case MoeGating::kSoftmaxWeight:
        value[e] = key[e] = logits[e];
        break;
    }
  }
  std::vector<int32_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return key[a] > key[b]; });
  ids->assign(order.begin(), order.begin() + r.used);
  weights->clear();
  for (int32_t e : *ids) weights->push_back(value[e]);
  if (r.gating == MoeGating::kSoftmaxWeight) {
    double zk = 0;
    for (double& w : *weights) zk += std::exp(w - (*weights)[0]);
    for (double& w : *weights) w = std::exp(w - value[(*ids)[0]]) / zk;
  }
  double sum = 0;
  for (double w : *weights) sum += w;
  for (double& w : *weights) w = (r.normalize ? w / sum : w) * r.scale;
}

TEST(RouteExperts, PicksTheLargestAndWeighsThemAsEachGatingSays) {
  std::mt19937 gen(7);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  for (MoeGating gating : {MoeGating::kSoftmax, MoeGating::kSigmoid, MoeGating::kSoftmaxWeight}) {
    for (bool normalize : {false, true}) {
      const MoeRouting r{.experts = 13,
                         .used = 5,
                         .gating = gating,
                         .normalize = normalize,
                         .scale = normalize ? 2.5f : 1.0f};
      SCOPED_TRACE(static_cast<int>(gating) * 2 + normalize);
      constexpr int kRows = 40;
      std::vector<float> logits(kRows * r.experts), bias(r.experts);
      for (float& v : logits) v = normal(gen);
      for (float& v : bias) v = 0.3f * normal(gen);
      const std::vector<float> no_bias;
      const std::vector<float>& used_bias = gating == MoeGating::kSigmoid ? bias : no_bias;
      std::vector<int32_t> ids(kRows * r.used);
      std::vector<float> weights(kRows * r.used);
      RouteExperts(logits.data(), used_bias.empty() ? nullptr : used_bias.data(), kRows, r,
                   ids.data(), weights.data());
      for (int t = 0; t < kRows; ++t) {
        std::vector<int32_t> want_ids;
        std::vector<double> want_w;
        Expected({logits.begin() + t * r.experts, logits.begin() + (t + 1) * r.experts}, used_bias,
                 r, &want_ids, &want_w);
        for (int s = 0; s < r.used; ++s) {
          ASSERT_EQ(ids[t * r.used + s], want_ids[s]) << "row " << t << " slot " << s;
          EXPECT_NEAR(weights[t * r.used + s], want_w[s], 1e-6 * std::max(1.0, want_w[s]))
              << "row " << t << " slot " << s;
        }
      }
    }
  }
}

// Equal logits: the lower id first, whichever order they come in; the bias moves a pick
// under sigmoid gating but not the weight.
TEST(RouteExperts, BreaksTiesByTheLowerIdAndPicksWithTheBias) {
  const MoeRouting r{.experts = 6, .used = 3};
  const std::vector<float> logits = {0.5f, 2.0f, 1.0f, 2.0f, 1.0f, 2.0f};
  std::vector<int32_t> ids(3);
  std::vector<float> w(3);
  RouteExperts(logits.data(), nullptr, 1, r, ids.data(), w.data());
  EXPECT_EQ(ids, (std::vector<int32_t>{1, 3, 5}));
  EXPECT_EQ(w[0], w[1]);
  EXPECT_EQ(w[1], w[2]);

  const MoeRouting sig{.experts = 4, .used = 1, .gating = MoeGating::kSigmoid};
  const std::vector<float> l2 = {1.0f, 0.0f, 0.0f, 0.0f}, bias = {0.0f, 0.0f, 0.5f, 0.0f};
  RouteExperts(l2.data(), bias.data(), 1, sig, ids.data(), w.data());
  EXPECT_EQ(ids[0], 2);   // sigmoid(0) + 0.5 > sigmoid(1)
  EXPECT_EQ(w[0], 0.5f);  // the weight is sigmoid(0), without the bias
}

TEST(GroupByExpert, OrdersPairsByExpertThenTokenAndRejectsABadId) {
  const std::vector<int32_t> ids = {2, 0, 1, 2, 0, 3};  // 3 tokens, 2 slots
  ExpertGroups g;
  ASSERT_TRUE(GroupByExpert(ids.data(), 3, 2, 5, &g).ok());
  EXPECT_EQ(g.begin, (std::vector<int32_t>{0, 2, 3, 5, 6, 6}));
  EXPECT_EQ(g.pairs, (std::vector<int32_t>{1, 4, 2, 0, 3, 5}));
  const std::vector<int32_t> bad = {0, 5};
  const absl::Status st = GroupByExpert(bad.data(), 1, 2, 5, &g);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("expert id 5"), std::string_view::npos);
}

// MoeFfn on a batch equals every (token, slot) computed alone — one row through the
// expert with MatMul, weighted and summed in slot order, then the shared expert scaled
// by its sigmoid gate — bit for bit, in exact and in fast math (Q8_0 experts).
class MoeFfnTest : public ::testing::TestWithParam<CpuMath> {};

TEST_P(MoeFfnTest, EqualsEachRowAloneBitForBit) {
  constexpr int64_t kT = 19, kH = 64, kF = 96, kE = 6, kK = 2, kShared = 32;
  CpuBackend backend(CpuBackendOptions{.num_threads = 2, .math = GetParam()});
  std::mt19937 gen(3);
  std::normal_distribution<float> normal(0.0f, 0.3f);
  auto host = [&](int64_t rows, int64_t cols, model::GgmlType type = model::GgmlType::kF32) {
    std::vector<float> v(rows * cols);
    for (float& x : v) x = normal(gen);
    std::vector<uint8_t> bytes;
    if (type == model::GgmlType::kF32) {
      bytes.resize(v.size() * 4);
      std::memcpy(bytes.data(), v.data(), bytes.size());
    } else {
      bytes = testing::RandomQuantRows(type, rows, cols, 0.01f, gen);
    }
    return bytes;
  };
  const model::GgmlType wt =
      GetParam() == CpuMath::kFast ? model::GgmlType::kQ8_0 : model::GgmlType::kF32;
  std::vector<std::vector<uint8_t>> store;
  std::vector<std::unique_ptr<Buffer>> buffers;
  auto tensor = [&](std::vector<uint8_t> bytes, int64_t rows, int64_t cols, model::GgmlType type) {
    store.push_back(std::move(bytes));
    buffers.push_back(*backend.BorrowHost(store.back().data(), store.back().size()));
    return Tensor{buffers.back().get(), 0, type, rows, cols};
  };
  std::vector<Tensor> gate, up, down;
  for (int e = 0; e < kE; ++e) {
    gate.push_back(tensor(host(kF, kH, wt), kF, kH, wt));
    up.push_back(tensor(host(kF, kH, wt), kF, kH, wt));
    down.push_back(tensor(host(kH, kF, wt), kH, kF, wt));
  }
  ExpertWeights experts;
  experts.gate = gate;
  experts.up = up;
  experts.down = down;
  experts.shared_gate = tensor(host(1, kH), 1, kH, model::GgmlType::kF32);
  experts.shared_w_gate = tensor(host(kShared, kH, wt), kShared, kH, wt);
  experts.shared_w_up = tensor(host(kShared, kH, wt), kShared, kH, wt);
  experts.shared_w_down = tensor(host(kH, kShared, wt), kH, kShared, wt);

  const Tensor x = tensor(host(kT, kH), kT, kH, model::GgmlType::kF32);
  std::vector<int32_t> id_values(kT * kK);
  std::vector<float> w_values(kT * kK);
  for (int64_t t = 0; t < kT; ++t) {  // two distinct experts per token, expert 4 never
    id_values[t * kK] = static_cast<int32_t>((t * 7) % 4);
    id_values[t * kK + 1] = static_cast<int32_t>(t % 3 == 0 ? 5 : ((t * 7) % 4 + 1) % 4);
    w_values[t * kK] = 0.25f + 0.01f * t;
    w_values[t * kK + 1] = 0.75f - 0.01f * t;
  }
  std::vector<uint8_t> id_bytes(id_values.size() * 4), w_bytes(w_values.size() * 4);
  std::memcpy(id_bytes.data(), id_values.data(), id_bytes.size());
  std::memcpy(w_bytes.data(), w_values.data(), w_bytes.size());
  const Tensor ids = tensor(id_bytes, kT, kK, model::GgmlType::kI32);
  const Tensor weights = tensor(w_bytes, kT, kK, model::GgmlType::kF32);
  auto out_buffer = *backend.Allocate(MemoryKind::kActivations, kT * kH * 4);
  const Tensor out{out_buffer.get(), 0, model::GgmlType::kF32, kT, kH};
  backend.MoeFfn(x, ids, weights, experts, GatedActivation::kSilu, out);
  ASSERT_TRUE(backend.Synchronize().ok());
  std::vector<float> got(kT * kH);
  backend.CopyToHost(*out.buffer, 0, out.bytes(), got.data());

  // Each row alone, through the backend's own one-row ops.
  auto scratch = *backend.Allocate(MemoryKind::kActivations, 4 * (kH + 3 * kF + kH));
  const Tensor row{scratch.get(), 0, model::GgmlType::kF32, 1, kH};
  auto ffn = [&](const Tensor& g, const Tensor& u, const Tensor& d) {
    const Tensor gv{scratch.get(), 4 * kH, model::GgmlType::kF32, 1, g.rows};
    const Tensor uv{scratch.get(), 4 * (kH + kF), model::GgmlType::kF32, 1, g.rows};
    const Tensor y{scratch.get(), 4 * (kH + 3 * kF), model::GgmlType::kF32, 1, kH};
    backend.MatMul2(row, g, gv, u, uv);
    backend.SwiGlu(gv, uv, gv);
    backend.MatMul(gv, d, y);
    std::vector<float> v(kH);
    backend.CopyToHost(*y.buffer, y.offset, y.bytes(), v.data());
    EXPECT_TRUE(backend.Synchronize().ok());
    return v;
  };
  const float* xs = reinterpret_cast<const float*>(store[store.size() - 3].data());
  const float* sg = reinterpret_cast<const float*>(store[kE * 3].data());
  for (int64_t t = 0; t < kT; ++t) {
    backend.CopyToDevice(xs + t * kH, *scratch, 0, kH * 4);
    std::vector<float> want(kH, 0.0f);
    for (int64_t s = 0; s < kK; ++s) {
      const int32_t e = id_values[t * kK + s];
      const std::vector<float> y = ffn(gate[e], up[e], down[e]);
      for (int64_t c = 0; c < kH; ++c) want[c] += w_values[t * kK + s] * y[c];
    }
    const std::vector<float> shared =
        ffn(experts.shared_w_gate, experts.shared_w_up, experts.shared_w_down);
    float dot = 0;
    for (int64_t c = 0; c < kH; ++c) dot += xs[t * kH + c] * sg[c];
    const float g = 1.0f / (1.0f + std::exp(-dot));
    for (int64_t c = 0; c < kH; ++c) want[c] += g * shared[c];
    for (int64_t c = 0; c < kH; ++c) {
      ASSERT_EQ(got[t * kH + c], want[c]) << "token " << t << " column " << c;
    }
  }

  // An id outside the experts fails the pass, naming it.
  id_values[3] = kE;
  std::memcpy(store[store.size() - 2].data(), id_values.data(), id_values.size() * 4);
  backend.MoeFfn(x, ids, weights, experts, GatedActivation::kSilu, out);
  const absl::Status st = backend.Synchronize();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("expert id 6"), std::string_view::npos) << st;
}

INSTANTIATE_TEST_SUITE_P(Math, MoeFfnTest, ::testing::Values(CpuMath::kExact, CpuMath::kFast),
                         [](const auto& info) {
                           return std::string(info.param == CpuMath::kFast ? "Fast" : "Exact");
                         });

}  // namespace
}  // namespace tandem::kernels
