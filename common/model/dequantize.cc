#include "common/model/dequantize.h"

#include <cstring>

#include "common/util/half.h"
#include "common/util/strings.h"

namespace tandem::model {

namespace {

uint16_t LoadU16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

float LoadHalf(const uint8_t* p) { return HalfToFloat(LoadU16(p)); }

// Every decoder below writes chunk `c` of one block: its 32 consecutive elements
// c·32 … c·32 + 31 (c is 0 for the 32-element types, 0…7 for the 256-element K and IQ
// types). Each spells out ggml's block layout and computes each value with the same
// float operations, in the same order, as the `gguf` package's numpy decoder, so the
// results agree bit for bit (dequantize_test).

// Q4_0, 32 elements in 18 bytes: f16 d | u8 qs[16].
// x[j] = (lo nibble of qs[j] - 8) * d, x[j + 16] = (hi nibble of qs[j] - 8) * d.
void ChunkQ4_0(const uint8_t* b, int, float* y) {
  const float d = LoadHalf(b);
  const uint8_t* qs = b + 2;
  for (int j = 0; j < 16; ++j) {
    y[j] = static_cast<float>((qs[j] & 0x0F) - 8) * d;
    y[j + 16] = static_cast<float>((qs[j] >> 4) - 8) * d;
  }
}

// Q4_1, 32 elements in 20 bytes: f16 d | f16 m | u8 qs[16]; x = q * d + m.
void ChunkQ4_1(const uint8_t* b, int, float* y) {
  const float d = LoadHalf(b);
  const float m = LoadHalf(b + 2);
  const uint8_t* qs = b + 4;
  for (int j = 0; j < 16; ++j) {
    y[j] = static_cast<float>(qs[j] & 0x0F) * d + m;
    y[j + 16] = static_cast<float>(qs[j] >> 4) * d + m;
  }
}

// The 5-bit values of Q5_0 / Q5_1: the nibbles as Q4_*, bit j of the little-endian
// u32 `qh` the fifth bit of element j.
void FiveBit(const uint8_t* qh_bytes, const uint8_t* qs, int* q) {
  uint32_t qh;
  std::memcpy(&qh, qh_bytes, 4);
  for (int j = 0; j < 16; ++j) {
    q[j] = (qs[j] & 0x0F) | static_cast<int>(((qh >> j) & 1) << 4);
    q[j + 16] = (qs[j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1) << 4);
  }
}

// Q5_0, 32 elements in 22 bytes: f16 d | u32 qh | u8 qs[16]; x = (q - 16) * d.
void ChunkQ5_0(const uint8_t* b, int, float* y) {
  const float d = LoadHalf(b);
  int q[32];
  FiveBit(b + 2, b + 6, q);
  for (int j = 0; j < 32; ++j) y[j] = d * static_cast<float>(q[j] - 16);
}

// Q5_1, 32 elements in 24 bytes: f16 d | f16 m | u32 qh | u8 qs[16]; x = q * d + m.
void ChunkQ5_1(const uint8_t* b, int, float* y) {
  const float d = LoadHalf(b);
  const float m = LoadHalf(b + 2);
  int q[32];
  FiveBit(b + 4, b + 8, q);
  for (int j = 0; j < 32; ++j) y[j] = d * static_cast<float>(q[j]) + m;
}

// Q8_0, 32 elements in 34 bytes: f16 d | i8 qs[32]; x = q * d.
void ChunkQ8_0(const uint8_t* b, int, float* y) {
  const float d = LoadHalf(b);
  const int8_t* qs = reinterpret_cast<const int8_t*>(b + 2);
  for (int j = 0; j < 32; ++j) y[j] = static_cast<float>(qs[j]) * d;
}

// IQ4_NL, 32 elements in 18 bytes: f16 d | u8 qs[16] (nibbles as Q4_0); x = d * level[q].
void ChunkIQ4_NL(const uint8_t* b, int, float* y) {
  const float d = LoadHalf(b);
  const uint8_t* qs = b + 2;
  for (int j = 0; j < 16; ++j) {
    y[j] = d * static_cast<float>(kIq4Levels[qs[j] & 0x0F]);
    y[j + 16] = d * static_cast<float>(kIq4Levels[qs[j] >> 4]);
  }
}

// MXFP4, 32 elements in 17 bytes: u8 e (E8M0) | u8 qs[16] (nibbles as Q4_0);
// x = E8m0Half(e) * level[q].
void ChunkMXFP4(const uint8_t* b, int, float* y) {
  const float d = E8m0Half(b[0]);
  const uint8_t* qs = b + 1;
  for (int j = 0; j < 16; ++j) {
    y[j] = d * static_cast<float>(kMxfp4Levels[qs[j] & 0x0F]);
    y[j + 16] = d * static_cast<float>(kMxfp4Levels[qs[j] >> 4]);
  }
}

// Q4_K, 256 elements in 144 bytes: f16 d | f16 dmin | u8 scales[12] | u8 qs[128].
// Eight sub-blocks of 32 (one chunk each) with 6-bit scale/min; x = (d * sc) * q -
// dmin * m. Each 32 bytes of qs hold two sub-blocks: low nibbles, then high nibbles.
void ChunkQ4_K(const uint8_t* b, int c, float* y) {
  uint8_t sc, m;
  KQuantScaleMin(b + 4, c, &sc, &m);
  const float d = LoadHalf(b) * sc, dm = LoadHalf(b + 2) * m;
  const uint8_t* q = b + 16 + 32 * (c / 2);
  const int shift = 4 * (c % 2);
  for (int l = 0; l < 32; ++l) y[l] = d * static_cast<float>((q[l] >> shift) & 0x0F) - dm;
}

// Q5_K, 256 elements in 176 bytes: f16 d | f16 dmin | u8 scales[12] | u8 qh[32] |
// u8 qs[128]. Q4_K with a fifth bit: bit c of qh[l] for element l of sub-block c.
void ChunkQ5_K(const uint8_t* b, int c, float* y) {
  uint8_t sc, m;
  KQuantScaleMin(b + 4, c, &sc, &m);
  const float d = LoadHalf(b) * sc, dm = LoadHalf(b + 2) * m;
  const uint8_t* qh = b + 16;
  const uint8_t* q = b + 48 + 32 * (c / 2);
  const int shift = 4 * (c % 2);
  for (int l = 0; l < 32; ++l) {
    const int v = ((q[l] >> shift) & 0x0F) | (((qh[l] >> c) & 1) << 4);
    y[l] = d * static_cast<float>(v) - dm;
  }
}

// Q6_K, 256 elements in 210 bytes: u8 ql[128] | u8 qh[64] | i8 scales[16] | f16 d.
// Two halves of 128; chunk c is quarter p = c % 4 of half n = c / 4: 4 low bits from
// ql (bytes 0–31 or 32–63 of the half's 64, low or high nibble), 2 high bits from
// qh[l] >> 2p, minus 32; x = (d * scale) * q, one scale per 16 elements.
void ChunkQ6_K(const uint8_t* b, int c, float* y) {
  const int n = c / 4, p = c % 4;
  const uint8_t* ql = b + 64 * n + 32 * (p % 2);
  const uint8_t* qh = b + 128 + 32 * n;
  const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192) + 8 * n + 2 * p;
  const float d = LoadHalf(b + 208);
  const int shift = 4 * (p / 2);
  for (int l = 0; l < 32; ++l) {
    const int q = (((ql[l] >> shift) & 0x0F) | (((qh[l] >> (2 * p)) & 3) << 4)) - 32;
    y[l] = d * static_cast<float>(sc[l / 16]) * static_cast<float>(q);
  }
}

// Q2_K, 256 elements in 84 bytes: u8 scales[16] | u8 qs[64] | f16 d | f16 dmin.
// Chunk c is shift j = c % 4 of half n = c / 4: q = (qs[32n + l] >> 2j) & 3. One byte of
// scales per 16 elements: 4-bit scale (low) and min (high); x = (d * sc) * q - dmin * m.
void ChunkQ2_K(const uint8_t* b, int c, float* y) {
  const int n = c / 4, j = c % 4;
  const uint8_t* qs = b + 16 + 32 * n;
  const float d = LoadHalf(b + 80), dmin = LoadHalf(b + 82);
  for (int h = 0; h < 2; ++h) {
    const uint8_t s = b[2 * c + h];
    const float dl = d * static_cast<float>(s & 0x0F), ml = dmin * static_cast<float>(s >> 4);
    for (int l = 16 * h; l < 16 * h + 16; ++l) {
      y[l] = dl * static_cast<float>((qs[l] >> (2 * j)) & 3) - ml;
    }
  }
}

// Q3_K, 256 elements in 110 bytes: u8 hmask[32] | u8 qs[64] | u8 scales[12] | f16 d.
// Chunk c is shift j = c % 4 of half n = c / 4: 2 low bits (qs[32n + l] >> 2j) & 3, and
// bit c of hmask[l], which subtracts 4 when it is clear. Sixteen 6-bit scales (minus
// 32), one per 16 elements: low 4 bits from the nibbles of bytes 0–7, high 2 bits from
// bytes 8–11; x = (d * scale) * q.
void ChunkQ3_K(const uint8_t* b, int c, float* y) {
  const int n = c / 4, j = c % 4;
  const uint8_t* hmask = b;
  const uint8_t* qs = b + 32 + 32 * n;
  const uint8_t* scales = b + 96;
  const float d = LoadHalf(b + 108);
  for (int h = 0; h < 2; ++h) {
    const int s = 2 * c + h;
    const int lo = (scales[s % 8] >> (4 * (s / 8))) & 0x0F;
    const int hi = (scales[8 + s % 4] >> (2 * (s / 4))) & 3;
    const float dl = d * static_cast<float>((lo | (hi << 4)) - 32);
    for (int l = 16 * h; l < 16 * h + 16; ++l) {
      const int q = ((qs[l] >> (2 * j)) & 3) - (((hmask[l] >> c) & 1) ? 0 : 4);
      y[l] = dl * static_cast<float>(q);
    }
  }
}

// IQ4_XS, 256 elements in 136 bytes: f16 d | u16 scales_h | u8 scales_l[4] | u8 qs[128].
// Eight sub-blocks of 32 (one chunk each) with a 6-bit scale (minus 32): low 4 bits a
// nibble of scales_l, high 2 bits from scales_h; 16 bytes of qs each (nibbles as
// IQ4_NL); x = (d * scale) * level[q].
void ChunkIQ4_XS(const uint8_t* b, int c, float* y) {
  const uint16_t scales_h = LoadU16(b + 2);
  const int ls = ((b[4 + c / 2] >> (4 * (c % 2))) & 0x0F) | (((scales_h >> (2 * c)) & 3) << 4);
  const float dl = LoadHalf(b) * static_cast<float>(ls - 32);
  const uint8_t* qs = b + 8 + 16 * c;
  for (int l = 0; l < 16; ++l) {
    y[l] = dl * static_cast<float>(kIq4Levels[qs[l] & 0x0F]);
    y[l + 16] = dl * static_cast<float>(kIq4Levels[qs[l] >> 4]);
  }
}

// Decodes chunk `chunk` of the block at `block` — its 32 consecutive elements
// 32·chunk … 32·chunk + 31, chunk < block_size / 32 — into y[0, 32). Dequantize is this,
// chunk after chunk (the unit kernels/cpu/matmul.cc's vector decoders also work in).
using ChunkDecoder = void (*)(const uint8_t* block, int chunk, float* y);

// The decoder of a block-quantized type, or null (float types, unsupported types).
ChunkDecoder ChunkDecoderFor(GgmlType type) {
  switch (type) {
    case GgmlType::kQ4_0:
      return ChunkQ4_0;
    case GgmlType::kQ4_1:
      return ChunkQ4_1;
    case GgmlType::kQ5_0:
      return ChunkQ5_0;
    case GgmlType::kQ5_1:
      return ChunkQ5_1;
    case GgmlType::kQ8_0:
      return ChunkQ8_0;
    case GgmlType::kIQ4_NL:
      return ChunkIQ4_NL;
    case GgmlType::kQ2_K:
      return ChunkQ2_K;
    case GgmlType::kQ3_K:
      return ChunkQ3_K;
    case GgmlType::kQ4_K:
      return ChunkQ4_K;
    case GgmlType::kQ5_K:
      return ChunkQ5_K;
    case GgmlType::kQ6_K:
      return ChunkQ6_K;
    case GgmlType::kIQ4_XS:
      return ChunkIQ4_XS;
    case GgmlType::kMXFP4:
      return ChunkMXFP4;
    default:
      return nullptr;
  }
}

}  // namespace

absl::Status Dequantize(GgmlType type, std::span<const uint8_t> src, std::span<float> dst) {
  const GgmlTypeTraits& t = Traits(type);
  if (!t.can_dequantize) {
    return absl::UnimplementedError(StrCat("dequantizing ", t.name, " is not supported"));
  }
  const size_t n = dst.size();
  if (n % t.block_size != 0) {
    return absl::InvalidArgumentError(
        StrCat(n, " elements is not a multiple of the ", t.name, " block size ", t.block_size));
  }
  const size_t n_blocks = n / t.block_size;
  if (src.size() != n_blocks * t.type_size) {
    return absl::InvalidArgumentError(StrCat(t.name, ": ", n, " elements need ",
                                             n_blocks * t.type_size, " bytes, got ", src.size()));
  }
  const uint8_t* s = src.data();
  float* y = dst.data();
  switch (type) {
    case GgmlType::kF32:
      std::memcpy(y, s, n * sizeof(float));
      return absl::OkStatus();
    case GgmlType::kF16:
      for (size_t i = 0; i < n; ++i) y[i] = HalfToFloat(LoadU16(s + 2 * i));
      return absl::OkStatus();
    case GgmlType::kBF16:
      for (size_t i = 0; i < n; ++i) y[i] = Bf16ToFloat(LoadU16(s + 2 * i));
      return absl::OkStatus();
    default:
      break;
  }
  const ChunkDecoder chunk = ChunkDecoderFor(type);
  if (chunk == nullptr) {
    return absl::UnimplementedError(StrCat("dequantizing ", t.name, " is not supported"));
  }
  const int chunks = static_cast<int>(t.block_size / 32);
  for (size_t b = 0; b < n_blocks; ++b) {
    for (int c = 0; c < chunks; ++c) chunk(s + b * t.type_size, c, y + b * t.block_size + 32 * c);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<float>> DequantizeTensor(const GgufTensorInfo& tensor) {
  std::vector<float> out(tensor.n_elements);  // [ne3][ne2][ne1][ne0]
  absl::Status st = Dequantize(tensor.type, tensor.data, out);
  if (!st.ok()) return absl::Status(st.code(), StrCat(tensor.name, ": ", st.message()));
  return out;
}

}  // namespace tandem::model
