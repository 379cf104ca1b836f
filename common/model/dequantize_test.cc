#include "common/model/dequantize.h"

#include <bit>
#include <cmath>
#include <cstring>
#include <string>

#include "common/util/half.h"
#include "gtest/gtest.h"
#include "tests/test_paths.h"

namespace tandem::model {
namespace {

using ::tandem::testing::DefaultModelPath;
using ::tandem::testing::TestDataPath;

// Golden values come from the `gguf` Python package's numpy dequantizer
// (tests/reference/make_dequant_golden.py), an implementation independent of ours.
class DequantGolden : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto f = GgufFile::Open(TestDataPath("dequant_golden.gguf"));
    ASSERT_TRUE(f.ok()) << f.status();
    golden_ = f->release();
  }
  static void TearDownTestSuite() { delete golden_; }
  static std::vector<float> Floats(const GgufTensorInfo& t) {
    EXPECT_EQ(t.type, GgmlType::kF32);
    std::vector<float> v(t.n_elements);
    std::memcpy(v.data(), t.data.data(), t.n_bytes);
    return v;
  }
  static GgufFile* golden_;
};
GgufFile* DequantGolden::golden_ = nullptr;

// Bit for bit: −0 is not +0, and a NaN's payload counts.
bool SameFloat(float a, float b) {
  return std::bit_cast<uint32_t>(a) == std::bit_cast<uint32_t>(b);
}

TEST_F(DequantGolden, SyntheticBlocksMatchReferenceBitForBit) {
  int checked = 0;
  for (const char* type : {"F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q4_K", "Q6_K", "Q5_0",
                           "Q5_1", "IQ4_NL", "Q2_K", "Q3_K", "Q5_K", "IQ4_XS", "MXFP4"}) {
    SCOPED_TRACE(type);
    const GgufTensorInfo* q = golden_->FindTensor(std::string("synthetic.") + type);
    const GgufTensorInfo* e = golden_->FindTensor(std::string("expected.synthetic.") + type);
    ASSERT_NE(q, nullptr);
    ASSERT_NE(e, nullptr);
    EXPECT_EQ(GgmlTypeName(q->type), type);
    auto got = DequantizeTensor(*q);
    ASSERT_TRUE(got.ok()) << got.status();
    std::vector<float> want = Floats(*e);
    ASSERT_EQ(got->size(), want.size());
    int bad = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      if (!SameFloat((*got)[i], want[i]) && bad++ < 5) {
        ADD_FAILURE() << "element " << i << ": got " << (*got)[i] << " want " << want[i];
      }
    }
    EXPECT_EQ(bad, 0);
    ++checked;
  }
  EXPECT_EQ(checked, 16);
}

TEST_F(DequantGolden, RealModelTensorsMatchReference) {
  auto model = GgufFile::Open(DefaultModelPath());
  ASSERT_TRUE(model.ok()) << model.status() << " (run scripts/fetch-model.sh)";
  int checked = 0;
  for (const auto& e : golden_->tensors()) {
    std::string_view name = e.name;
    if (!name.starts_with("expected.real.")) continue;
    name.remove_prefix(std::string_view("expected.real.").size());
    SCOPED_TRACE(std::string(name));
    const GgufTensorInfo* t = (*model)->FindTensor(name);
    ASSERT_NE(t, nullptr);
    auto got = DequantizeTensor(*t);
    ASSERT_TRUE(got.ok()) << got.status();
    std::vector<float> want = Floats(e);
    ASSERT_LE(want.size(), got->size());
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_TRUE(SameFloat((*got)[i], want[i]))
          << "element " << i << ": got " << (*got)[i] << " want " << want[i];
    }
    double sum = 0, sumsq = 0;
    for (float x : *got) {
      sum += x;
      sumsq += static_cast<double>(x) * x;
    }
    std::string key(name);
    auto want_sum = golden_->GetFloat("real." + key + ".sum");
    auto want_sumsq = golden_->GetFloat("real." + key + ".sumsq");
    ASSERT_TRUE(want_sum.ok() && want_sumsq.ok());
    EXPECT_NEAR(sum, *want_sum, 1e-9 * std::max(1.0, *want_sumsq));
    EXPECT_NEAR(sumsq, *want_sumsq, 1e-9 * *want_sumsq);
    ++checked;
  }
  EXPECT_GE(checked, 4);
}

TEST(Dequantize, RejectsSizeMismatchAndUnsupportedTypes) {
  std::vector<uint8_t> src(20);
  std::vector<float> dst(32);
  EXPECT_TRUE(Dequantize(GgmlType::kQ4_1, src, dst).ok());
  EXPECT_EQ(Dequantize(GgmlType::kQ4_1, std::span(src).first(19), dst).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Dequantize(GgmlType::kQ4_1, src, std::span(dst).first(31)).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Dequantize(GgmlType::kIQ2_XXS, src, dst).code(), absl::StatusCode::kUnimplemented);
  EXPECT_EQ(Dequantize(GgmlType::kTQ1_0, src, dst).code(), absl::StatusCode::kUnimplemented);
}

TEST(Half, ConvertsSpecialValuesExactly) {
  EXPECT_EQ(HalfToFloat(0x3C00), 1.0f);
  EXPECT_EQ(HalfToFloat(0xC000), -2.0f);
  EXPECT_EQ(HalfToFloat(0x7BFF), 65504.0f);
  EXPECT_EQ(HalfToFloat(0x0001), std::ldexp(1.0f, -24));
  EXPECT_TRUE(std::isinf(HalfToFloat(0x7C00)));
  EXPECT_TRUE(std::isnan(HalfToFloat(0x7E00)));
  EXPECT_TRUE(std::signbit(HalfToFloat(0x8000)));
  // Every finite half survives a round trip through float.
  for (uint32_t h = 0; h < 0x10000; ++h) {
    if ((h & 0x7C00) == 0x7C00) continue;
    ASSERT_EQ(FloatToHalf(HalfToFloat(static_cast<uint16_t>(h))), h) << std::hex << h;
  }
  EXPECT_EQ(Bf16ToFloat(FloatToBf16(1.5f)), 1.5f);
  EXPECT_EQ(FloatToBf16(1.00390625f), 0x3F80);  // ties to even
}

}  // namespace
}  // namespace tandem::model
