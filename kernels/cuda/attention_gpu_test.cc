// CudaBackend::Attention against PagedAttentionReference (double) at awkward sizes:
// batch 1/7/17, cache lengths 1/15/17/1000/4097, block sizes 1 and 16, head dims 64
// and 128, GQA, float32 / bf16 / f16 caches — both kernels: the float32 split-K one
// (split-K on and off; batch-invariant mode forces it) within 1e-4, and the
// tensor-core prefill one (bf16 operands) within 2e-2. Outputs start poisoned (NaN) so
// an unwritten row fails. Skips where no CUDA device is present.
#include <cmath>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_device.h"
#include "kernels/kv_storage.h"
#include "kernels/testing/paged_attention_fixture.h"

namespace tandem::kernels::cuda {
namespace {

using ::tandem::kernels::testing::Fixture;

// Runs the fixture's batch through a CudaBackend with `tuning` and returns max |Δ|
// against the reference.
// `tensor_cores`: let the backend take the prefill kernel (batch-invariant mode keeps
// it on the split-K kernel).
double MaxError(const Fixture& f, int32_t layer, int32_t keys_per_split, int32_t max_splits,
                bool tensor_cores = false) {
  std::vector<float> want(f.q.size());
  PagedAttentionReference(f.q.data(), f.batch(), f.shape, layer, *f.cache, want.data());
  auto made = CudaBackend::Create({.keys_per_split = keys_per_split,
                                   .max_splits = max_splits,
                                   .batch_invariant = !tensor_cores});
  EXPECT_TRUE(made.ok()) << made.status();
  if (!made.ok()) return INFINITY;
  CudaBackend& b = **made;
  const int64_t rows = f.q_indptr.back();
  const int64_t q_cols = int64_t{f.shape.n_heads} * f.shape.head_dim;
  EXPECT_TRUE(b.ReserveScratch({rows, q_cols, f.shape.n_heads * (f.shape.head_dim + 2LL)}).ok());
  auto kv = KvStorage::Create(&b, f.layout, int64_t{f.cache->num_blocks} * f.layout.BlockBytes());
  EXPECT_TRUE(kv.ok()) << kv.status();
  if (!kv.ok()) return INFINITY;
  b.CopyToDevice(f.cache->data, (*kv)->buffer(), 0, (*kv)->bytes());

  // The step plan: positions, q_indptr, kv_len, block_indptr, block_ids.
  std::vector<int32_t> positions;
  for (int32_t s = 0; s < f.batch().num_seqs(); ++s) {
    const int32_t n = f.q_indptr[s + 1] - f.q_indptr[s];
    for (int32_t t = 0; t < n; ++t) positions.push_back(f.kv_len[s] - n + t);
  }
  std::vector<int32_t> plan;
  auto put = [&](const std::vector<int32_t>& v) {
    const int64_t at = static_cast<int64_t>(plan.size());
    plan.insert(plan.end(), v.begin(), v.end());
    return std::pair<int64_t, int64_t>{at, static_cast<int64_t>(v.size())};
  };
  const auto pos = put(positions), qi = put(f.q_indptr), kl = put(f.kv_len),
             bi = put(f.block_indptr), ids = put(f.block_ids);
  auto ints = *b.Allocate(MemoryKind::kActivations, static_cast<int64_t>(plan.size()) * 4);
  b.CopyToDevice(plan.data(), *ints, 0, static_cast<int64_t>(plan.size()) * 4);
  auto view = [&](std::pair<int64_t, int64_t> r) {
    return Tensor{ints.get(), r.first * 4, model::GgmlType::kI32, 1, r.second};
  };
  StepView step;
  step.positions = view(pos);
  step.q_indptr = view(qi);
  step.kv_len = view(kl);
  step.block_indptr = view(bi);
  step.block_ids = view(ids);
  for (int32_t s = 0; s < f.batch().num_seqs(); ++s) {
    step.max_new_tokens = std::max(step.max_new_tokens, f.q_indptr[s + 1] - f.q_indptr[s]);
  }

  const int64_t q_bytes = static_cast<int64_t>(f.q.size()) * 4;
  auto io = *b.Allocate(MemoryKind::kActivations, 2 * q_bytes);
  const std::vector<float> poison(f.q.size(), NAN);
  b.CopyToDevice(f.q.data(), *io, 0, q_bytes);
  b.CopyToDevice(poison.data(), *io, q_bytes, q_bytes);
  const Tensor q{io.get(), 0, model::GgmlType::kF32, rows, q_cols};
  const Tensor out{io.get(), q_bytes, model::GgmlType::kF32, rows, q_cols};
  b.Attention(q, step, f.shape, layer, **kv, out);
  std::vector<float> got(f.q.size());
  b.CopyToHost(*io, q_bytes, q_bytes, got.data());
  absl::Status st = b.Synchronize();
  EXPECT_TRUE(st.ok()) << st;
  return testing::MaxAbsError(got, want);
}

TEST(AttentionGpu, MatchesReferenceAtAwkwardSizes) {
  auto n = DeviceCount();
  if (!n.ok()) GTEST_SKIP() << "no CUDA device: " << n.status();
  std::mt19937 rng(21);
  for (kv::KvDtype dtype : {kv::KvDtype::kF32, kv::KvDtype::kBF16, kv::KvDtype::kF16}) {
    for (int32_t head_dim : {64, 128}) {
      for (int32_t block_size : {1, 16}) {
        Fixture f(8, 2, head_dim, block_size, {{1, 1}, {15, 15}, {17, 17}, {1000, 7}, {4097, 1}},
                  rng, dtype);
        for (auto [per, max] : {std::pair{512, 1}, std::pair{256, 32}, std::pair{15, 64}}) {
          SCOPED_TRACE(::testing::Message()
                       << kv::KvDtypeName(dtype) << " head_dim " << head_dim << " block "
                       << block_size << " split " << per << "/" << max);
          // The reference reads the same rounded cache, so only summation order differs.
          EXPECT_LT(MaxError(f, 1, per, max), 1e-4);
        }
        SCOPED_TRACE(::testing::Message() << kv::KvDtypeName(dtype) << " head_dim " << head_dim
                                          << " block " << block_size << " tensor cores");
        EXPECT_LT(MaxError(f, 1, 512, 32, /*tensor_cores=*/true), 2e-2);
      }
    }
  }
}

// Sliding windows and soft-capping on both kernels (split-K and tensor cores).
TEST(AttentionGpu, WindowsAndSoftCappingMatchReference) {
  auto n = DeviceCount();
  if (!n.ok()) GTEST_SKIP() << "no CUDA device: " << n.status();
  std::mt19937 rng(23);
  for (int32_t block_size : {1, 16}) {
    Fixture f(8, 2, 128, block_size, {{1, 1}, {40, 40}, {300, 100}, {1000, 7}, {4097, 1}}, rng);
    for (int32_t window : {1, 37, 64, 200}) {
      for (float softcap : {0.0f, 0.5f}) {
        SCOPED_TRACE(::testing::Message()
                     << "block " << block_size << " window " << window << " softcap " << softcap);
        f.shape.window = window;
        f.shape.softcap = softcap;
        EXPECT_LT(MaxError(f, 1, 256, 32), 1e-4);
        EXPECT_LT(MaxError(f, 1, 512, 32, /*tensor_cores=*/true), 2e-2);
      }
    }
  }
}

// A small prompt pass on the tensor-core kernel, sized for compute-sanitizer's
// racecheck and memcheck (tests/gpu/run.sh): one full 64-row tile and a partial one,
// a sequence shorter than a tile, head dims 64 and 128, GQA 4:1.
TEST(AttentionGpu, SmallPrefillOnTensorCores) {
  auto n = DeviceCount();
  if (!n.ok()) GTEST_SKIP() << "no CUDA device: " << n.status();
  std::mt19937 rng(24);
  for (int32_t head_dim : {64, 128}) {
    Fixture f(8, 2, head_dim, 16, {{70, 70}, {15, 15}, {100, 30}}, rng, kv::KvDtype::kBF16);
    SCOPED_TRACE(::testing::Message() << "head_dim " << head_dim);
    EXPECT_LT(MaxError(f, 1, 512, 32, /*tensor_cores=*/true), 2e-2);
  }
}

TEST(AttentionGpu, DecodeBatches1_7_17) {
  auto n = DeviceCount();
  if (!n.ok()) GTEST_SKIP() << "no CUDA device: " << n.status();
  std::mt19937 rng(22);
  for (int32_t batch : {1, 7, 17}) {
    std::vector<std::pair<int32_t, int32_t>> seqs;
    for (int32_t i = 0; i < batch; ++i) seqs.push_back({1 + (i * 613 + 17) % 4097, 1});
    Fixture f(32, 8, 128, 16, seqs, rng);
    SCOPED_TRACE(::testing::Message() << "batch " << batch);
    EXPECT_LT(MaxError(f, 0, 512, 32), 1e-4);
  }
}

}  // namespace
}  // namespace tandem::kernels::cuda
