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

// Q4_0, 32 elements in 18 bytes: f16 d | u8 qs[16].
// x[j] = (lo nibble of qs[j] - 8) * d, x[j + 16] = (hi nibble of qs[j] - 8) * d.
void DequantizeQ4_0(const uint8_t* b, float* y) {
  const float d = LoadHalf(b);
  const uint8_t* qs = b + 2;
  for (int j = 0; j < 16; ++j) {
    y[j] = static_cast<float>((qs[j] & 0x0F) - 8) * d;
    y[j + 16] = static_cast<float>((qs[j] >> 4) - 8) * d;
  }
}

// Q4_1, 32 elements in 20 bytes: f16 d | f16 m | u8 qs[16]; x = q * d + m.
void DequantizeQ4_1(const uint8_t* b, float* y) {
  const float d = LoadHalf(b);
  const float m = LoadHalf(b + 2);
  const uint8_t* qs = b + 4;
  for (int j = 0; j < 16; ++j) {
    y[j] = static_cast<float>(qs[j] & 0x0F) * d + m;
    y[j + 16] = static_cast<float>(qs[j] >> 4) * d + m;
  }
}

// Q8_0, 32 elements in 34 bytes: f16 d | i8 qs[32]; x = q * d.
void DequantizeQ8_0(const uint8_t* b, float* y) {
  const float d = LoadHalf(b);
  const int8_t* qs = reinterpret_cast<const int8_t*>(b + 2);
  for (int j = 0; j < 32; ++j) y[j] = static_cast<float>(qs[j]) * d;
}

// 6-bit scale and min of sub-block j (0..7) from the 12 packed bytes of Q4_K.
void ScaleMinK4(int j, const uint8_t* q, uint8_t* sc, uint8_t* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = (q[j + 4] & 0x0F) | ((q[j - 4] >> 6) << 4);
    *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

// Q4_K, 256 elements in 144 bytes: f16 d | f16 dmin | u8 scales[12] | u8 qs[128].
// Eight sub-blocks of 32 with 6-bit scale/min; x = q * d * sc - dmin * m. Each 32
// bytes of qs hold two sub-blocks: low nibbles first, then high nibbles.
void DequantizeQ4_K(const uint8_t* b, float* y) {
  const float d = LoadHalf(b);
  const float dmin = LoadHalf(b + 2);
  const uint8_t* scales = b + 4;
  const uint8_t* q = b + 16;
  int is = 0;
  for (int j = 0; j < 256; j += 64) {
    uint8_t sc, m;
    ScaleMinK4(is, scales, &sc, &m);
    const float d1 = d * sc, m1 = dmin * m;
    ScaleMinK4(is + 1, scales, &sc, &m);
    const float d2 = d * sc, m2 = dmin * m;
    for (int l = 0; l < 32; ++l) *y++ = d1 * static_cast<float>(q[l] & 0x0F) - m1;
    for (int l = 0; l < 32; ++l) *y++ = d2 * static_cast<float>(q[l] >> 4) - m2;
    q += 32;
    is += 2;
  }
}

// Q6_K, 256 elements in 210 bytes: u8 ql[128] | u8 qh[64] | i8 scales[16] | f16 d.
// 6-bit q = 4 low bits from ql + 2 high bits from qh, minus 32; x = d * scale * q,
// one scale per 16 elements. Two halves of 128 elements each.
void DequantizeQ6_K(const uint8_t* b, float* y) {
  const uint8_t* ql = b;
  const uint8_t* qh = b + 128;
  const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192);
  const float d = LoadHalf(b + 208);
  for (int n = 0; n < 256; n += 128) {
    for (int l = 0; l < 32; ++l) {
      const int is = l / 16;
      const int q1 = ((ql[l] & 0x0F) | (((qh[l] >> 0) & 3) << 4)) - 32;
      const int q2 = ((ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4)) - 32;
      const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
      const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
      y[l] = d * sc[is + 0] * static_cast<float>(q1);
      y[l + 32] = d * sc[is + 2] * static_cast<float>(q2);
      y[l + 64] = d * sc[is + 4] * static_cast<float>(q3);
      y[l + 96] = d * sc[is + 6] * static_cast<float>(q4);
    }
    y += 128;
    ql += 64;
    qh += 32;
    sc += 8;
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
  void (*block_fn)(const uint8_t*, float*) = nullptr;
  switch (type) {
    case GgmlType::kQ4_0:
      block_fn = DequantizeQ4_0;
      break;
    case GgmlType::kQ4_1:
      block_fn = DequantizeQ4_1;
      break;
    case GgmlType::kQ8_0:
      block_fn = DequantizeQ8_0;
      break;
    case GgmlType::kQ4_K:
      block_fn = DequantizeQ4_K;
      break;
    case GgmlType::kQ6_K:
      block_fn = DequantizeQ6_K;
      break;
    default:
      return absl::UnimplementedError(StrCat("dequantizing ", t.name, " is not supported"));
  }
  for (size_t b = 0; b < n_blocks; ++b) block_fn(s + b * t.type_size, y + b * t.block_size);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<float>> DequantizeTensor(const GgufTensorInfo& tensor) {
  std::vector<float> out(tensor.n_elements);  // [ne3][ne2][ne1][ne0]
  absl::Status st = Dequantize(tensor.type, tensor.data, out);
  if (!st.ok()) return absl::Status(st.code(), StrCat(tensor.name, ": ", st.message()));
  return out;
}

}  // namespace tandem::model
