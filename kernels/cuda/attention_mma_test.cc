// The tensor-core prefill attention (attention_kernels.cu, PrefillKernel) emulated on
// the CPU, warp by warp and lane by lane, with the kernel's own index math
// (mma_fragment.h: ElemA / ElemB / ElemC, PFromS, TileOf, Visible; attention_tile.h:
// Locate, KvGeometry, OnlineSoftmax). An mma.sync is emulated by gathering the full A
// and B from the lanes' fragments, multiplying, and scattering D back.
//   - without rounding the emulation must equal PagedAttentionReference to 1e-5: any
//     slip in a fragment index, the P-from-S reuse, the causal mask or the tiling
//     shows up here, on every CI machine;
//   - with the kernel's bf16 rounding of Q·scale, K, V and P it stays within 2e-2 (the
//     tolerance attention_gpu_test holds the GPU kernel to).
#include <cmath>
#include <functional>
#include <random>
#include <set>
#include <vector>

#include "common/util/half.h"
#include "gtest/gtest.h"
#include "kernels/cpu/attention.h"
#include "kernels/cuda/attention_tile.h"
#include "kernels/cuda/mma_fragment.h"
#include "kernels/testing/paged_attention_fixture.h"

namespace tandem::kernels {
namespace {

using ::tandem::kernels::testing::Fixture;
using Round = float (*)(float);

float Exact(float x) { return x; }
float ToBf16(float x) { return Bf16ToFloat(FloatToBf16(x)); }

// One lane's registers of an m16n8k16 operand, as floats.
struct LaneA {
  float v[8];
};
struct LaneB {
  float v[4];
};
struct LaneC {
  float v[4];
};

// D = A · B + C across the 32 lanes of a warp.
void Mma(LaneC* d, const LaneA* a, const LaneB* b) {
  float A[16][16], B[16][8], D[16][8];
  for (int lane = 0; lane < 32; ++lane) {
    for (int i = 0; i < 8; ++i) {
      const mma::Index x = mma::ElemA(lane, i);
      A[x.row][x.col] = a[lane].v[i];
    }
    for (int i = 0; i < 4; ++i) {
      const mma::Index x = mma::ElemB(lane, i);
      B[x.row][x.col] = b[lane].v[i];
    }
    for (int i = 0; i < 4; ++i) {
      const mma::Index x = mma::ElemC(lane, i);
      D[x.row][x.col] = d[lane].v[i];
    }
  }
  for (int r = 0; r < 16; ++r)
    for (int c = 0; c < 8; ++c)
      for (int k = 0; k < 16; ++k) D[r][c] += A[r][k] * B[k][c];
  for (int lane = 0; lane < 32; ++lane) {
    for (int i = 0; i < 4; ++i) {
      const mma::Index x = mma::ElemC(lane, i);
      d[lane].v[i] = D[x.row][x.col];
    }
  }
}

// Every (row, col) of each operand is held by exactly one (lane, register).
TEST(MmaFragment, EachElementHasOneOwner) {
  std::set<std::pair<int, int>> a, b, c;
  for (int lane = 0; lane < 32; ++lane) {
    for (int i = 0; i < 8; ++i) a.insert({mma::ElemA(lane, i).row, mma::ElemA(lane, i).col});
    for (int i = 0; i < 4; ++i) b.insert({mma::ElemB(lane, i).row, mma::ElemB(lane, i).col});
    for (int i = 0; i < 4; ++i) c.insert({mma::ElemC(lane, i).row, mma::ElemC(lane, i).col});
  }
  EXPECT_EQ(a.size(), 256u);
  EXPECT_EQ(b.size(), 128u);
  EXPECT_EQ(c.size(), 128u);
  // P from S: the C fragments of columns 16j..+7 and 16j+8..+15 are the A fragment.
  for (int lane = 0; lane < 32; ++lane) {
    for (int i = 0; i < 8; ++i) {
      const mma::Index want = mma::ElemA(lane, i);
      const mma::Index got = mma::ElemC(lane, i % 4);
      EXPECT_EQ(got.row, want.row);
      EXPECT_EQ(got.col + (i < 4 ? 0 : 8), want.col);
    }
  }
}

TEST(MmaFragment, TilesCoverEveryRowOnce) {
  const std::vector<int32_t> q_indptr = {0, 1, 1, 65, 200, 201};
  std::vector<int> seen(201, 0);
  const int32_t seqs = 5, grid = 201 / mma::kQRows + seqs + 1;
  for (int32_t t = 0; t < grid; ++t) {
    int32_t seq, row0;
    if (!mma::TileOf(q_indptr.data(), seqs, t, &seq, &row0)) continue;
    for (int32_t r = row0; r < std::min(row0 + mma::kQRows, q_indptr[seq + 1]); ++r) {
      EXPECT_GE(r, q_indptr[seq]);
      ++seen[r];
    }
  }
  for (int r = 0; r < 201; ++r) EXPECT_EQ(seen[r], 1) << r;
}

// PrefillKernel's algorithm for one (tile, head), lane by lane.
void EmulateTile(const Fixture& f, int32_t layer, int32_t seq, int32_t row0, int32_t h,
                 const std::vector<int32_t>& positions, Round round, std::vector<float>* out) {
  const int32_t D = f.shape.head_dim, kKs = D / 16, kSt = mma::kKeys / 8, kOt = D / 8;
  const kv::KvLayout& L = f.layout;
  const tile::KvGeometry geo{L.BlockElements(), L.LayerStride(), L.PartStride(),
                             L.block_size,      L.n_kv_heads,    L.head_dim};
  const int32_t kvh = tile::KvHeadOf(h, f.shape.n_heads, f.shape.n_kv_heads);
  const int32_t row_end = f.q_indptr[seq + 1];
  const int32_t* table = f.block_ids.data() + f.block_indptr[seq];
  const int32_t keys = positions[std::min(row0 + mma::kQRows, row_end) - 1] + 1;
  auto cache = [&](int64_t i) {
    return L.dtype == kv::KvDtype::kF32    ? f.cache->Block<float>(0)[i]
           : L.dtype == kv::KvDtype::kBF16 ? Bf16ToFloat(f.cache->Block<uint16_t>(0)[i])
                                           : HalfToFloat(f.cache->Block<uint16_t>(0)[i]);
  };
  std::vector<float> ks(mma::kKeys * D), vs(mma::kKeys * D);
  for (int32_t warp = 0; warp < mma::kWarps; ++warp) {
    std::vector<std::vector<LaneA>> qf(kKs, std::vector<LaneA>(32));
    std::vector<std::vector<LaneC>> o(kOt, std::vector<LaneC>(32, LaneC{{0, 0, 0, 0}}));
    std::vector<tile::OnlineSoftmax> lo(32), hi(32);
    std::vector<int32_t> pos_lo(32), pos_hi(32);
    for (int lane = 0; lane < 32; ++lane) {
      const int32_t r_lo = row0 + 16 * warp + lane / 4, r_hi = r_lo + 8;
      pos_lo[lane] = r_lo < row_end ? positions[r_lo] : -1;
      pos_hi[lane] = r_hi < row_end ? positions[r_hi] : -1;
      for (int k = 0; k < kKs; ++k) {
        for (int i = 0; i < 8; ++i) {
          const mma::Index x = mma::ElemA(lane, i);
          const int32_t row = row0 + 16 * warp + x.row;
          qf[k][lane].v[i] =
              row < row_end ? round(f.q[(int64_t{row} * f.shape.n_heads + h) * D + 16 * k + x.col] *
                                    f.shape.scale)
                            : 0.f;
        }
      }
    }
    for (int32_t k0 = 0; k0 < keys; k0 += mma::kKeys) {
      for (int32_t kk = 0; kk < mma::kKeys; ++kk) {
        for (int32_t d = 0; d < D; ++d) {
          float kv = 0, vv = 0;
          if (k0 + kk < keys) {
            int32_t block, slot;
            tile::Locate(table, k0 + kk, geo.block_size, &block, &slot);
            kv = cache(geo.K(block, layer, kvh, d, slot));
            vv = cache(geo.V(block, layer, kvh, d, slot));
          }
          ks[kk * D + d] = round(kv);
          vs[kk * D + d] = round(vv);
        }
      }
      std::vector<std::vector<LaneC>> s(kSt, std::vector<LaneC>(32, LaneC{{0, 0, 0, 0}}));
      for (int nt = 0; nt < kSt; ++nt) {
        for (int k = 0; k < kKs; ++k) {
          std::vector<LaneB> b(32);
          for (int lane = 0; lane < 32; ++lane) {
            for (int i = 0; i < 4; ++i) {
              const mma::Index x = mma::ElemB(lane, i);  // (d, key)
              b[lane].v[i] = ks[(8 * nt + x.col) * D + 16 * k + x.row];
            }
          }
          Mma(s[nt].data(), qf[k].data(), b.data());
        }
      }
      std::vector<float> mx_lo(32, -INFINITY), mx_hi(32, -INFINITY);
      for (int lane = 0; lane < 32; ++lane) {
        for (int nt = 0; nt < kSt; ++nt) {
          for (int i = 0; i < 4; ++i) {
            const mma::Index x = mma::ElemC(lane, i);
            const int32_t key = k0 + 8 * nt + x.col;
            if (key >= keys || !mma::Visible(key, i < 2 ? pos_lo[lane] : pos_hi[lane])) {
              s[nt][lane].v[i] = -INFINITY;
            }
            float& m = i < 2 ? mx_lo[lane] : mx_hi[lane];
            m = std::max(m, s[nt][lane].v[i]);
          }
        }
      }
      for (int lane = 0; lane < 32; ++lane) {  // the quad reduction (lanes ^1, ^2)
        float q_lo = -INFINITY, q_hi = -INFINITY;
        for (int other = lane & ~3; other < (lane & ~3) + 4; ++other) {
          q_lo = std::max(q_lo, mx_lo[other]);
          q_hi = std::max(q_hi, mx_hi[other]);
        }
        const float f_lo = lo[lane].Rescale(q_lo), f_hi = hi[lane].Rescale(q_hi);
        for (int nt = 0; nt < kSt; ++nt) {
          for (int i = 0; i < 4; ++i) {
            tile::OnlineSoftmax& sm = i < 2 ? lo[lane] : hi[lane];
            s[nt][lane].v[i] = sm.Weight(s[nt][lane].v[i]);
            sm.Add(s[nt][lane].v[i]);
          }
        }
        for (int t = 0; t < kOt; ++t) {
          o[t][lane].v[0] *= f_lo;
          o[t][lane].v[1] *= f_lo;
          o[t][lane].v[2] *= f_hi;
          o[t][lane].v[3] *= f_hi;
        }
      }
      for (int j = 0; j < mma::kKeys / 16; ++j) {
        std::vector<LaneA> p(32);
        for (int lane = 0; lane < 32; ++lane) {
          for (int i = 0; i < 8; ++i) {
            p[lane].v[i] = round(mma::PFromS(s[2 * j][lane].v, s[2 * j + 1][lane].v, i));
          }
        }
        for (int t = 0; t < kOt; ++t) {
          std::vector<LaneB> b(32);
          for (int lane = 0; lane < 32; ++lane) {
            for (int i = 0; i < 4; ++i) {
              const mma::Index x = mma::ElemB(lane, i);  // (key, d)
              b[lane].v[i] = vs[(16 * j + x.row) * D + 8 * t + x.col];
            }
          }
          Mma(o[t].data(), p.data(), b.data());
        }
      }
    }
    for (int lane = 0; lane < 32; ++lane) {
      float l_lo = 0, l_hi = 0;
      for (int other = lane & ~3; other < (lane & ~3) + 4; ++other) {
        l_lo += lo[other].l;
        l_hi += hi[other].l;
      }
      for (int t = 0; t < kOt; ++t) {
        for (int i = 0; i < 4; ++i) {
          const mma::Index x = mma::ElemC(lane, i);
          const int32_t row = row0 + 16 * warp + x.row;
          if (row >= row_end) continue;
          const float l = i < 2 ? l_lo : l_hi;
          (*out)[(int64_t{row} * f.shape.n_heads + h) * D + 8 * t + x.col] =
              l > 0 ? o[t][lane].v[i] / l : 0.f;
        }
      }
    }
  }
}

double MaxError(const Fixture& f, int32_t layer, Round round) {
  std::vector<float> want(f.q.size()), got(f.q.size(), NAN);
  PagedAttentionReference(f.q.data(), f.batch(), f.shape, layer, *f.cache, want.data());
  std::vector<int32_t> positions;
  for (int32_t s = 0; s < f.batch().num_seqs(); ++s) {
    const int32_t n = f.q_indptr[s + 1] - f.q_indptr[s];
    for (int32_t t = 0; t < n; ++t) positions.push_back(f.kv_len[s] - n + t);
  }
  const int32_t seqs = f.batch().num_seqs();
  const int32_t grid = (f.q_indptr.back() + mma::kQRows - 1) / mma::kQRows + seqs;
  for (int32_t t = 0; t < grid; ++t) {
    int32_t seq, row0;
    if (!mma::TileOf(f.q_indptr.data(), seqs, t, &seq, &row0)) continue;
    for (int32_t h = 0; h < f.shape.n_heads; ++h)
      EmulateTile(f, layer, seq, row0, h, positions, round, &got);
  }
  return testing::MaxAbsError(got, want);
}

TEST(PrefillMmaEmulation, MatchesTheReference) {
  std::mt19937 rng(31);
  for (int32_t head_dim : {64, 128}) {
    for (int32_t block_size : {1, 16}) {
      // Prompts (some over a cached prefix), a decode row, a row count past one tile.
      Fixture f(4, 2, head_dim, block_size, {{1, 1}, {15, 15}, {17, 17}, {130, 70}, {300, 3}}, rng);
      SCOPED_TRACE(::testing::Message() << "head_dim " << head_dim << " block " << block_size);
      EXPECT_LT(MaxError(f, 1, Exact), 1e-5);
      EXPECT_LT(MaxError(f, 1, ToBf16), 2e-2);
    }
  }
}

TEST(PrefillMmaEmulation, ReadsBf16AndF16Caches) {
  std::mt19937 rng(32);
  for (kv::KvDtype dtype : {kv::KvDtype::kBF16, kv::KvDtype::kF16}) {
    Fixture f(8, 2, 64, 16, {{33, 33}, {80, 20}}, rng, dtype);
    SCOPED_TRACE(kv::KvDtypeName(dtype));
    EXPECT_LT(MaxError(f, 0, Exact), 1e-5);
  }
}

}  // namespace
}  // namespace tandem::kernels
