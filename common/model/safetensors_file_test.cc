#include "common/model/safetensors_file.h"

#include <cstring>
#include <string>
#include <vector>

#include "common/util/half.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/test_paths.h"

namespace tandem::model {
namespace {

using ::tandem::testing::TestDataPath;
using ::testing::HasSubstr;

template <typename T>
std::vector<T> Values(const SafetensorsTensor& t) {
  std::vector<T> v(t.data.size() / sizeof(T));
  std::memcpy(v.data(), t.data.data(), t.data.size());
  return v;
}

// The safetensors package wrote the file (tests/reference/make_safetensors_golden.py);
// the values are recomputed here from the formulas that made them.
TEST(SafetensorsFile, ReadsWhatTheSafetensorsPackageWrote) {
  auto f = SafetensorsFile::Open(TestDataPath("safetensors_golden.safetensors"));
  ASSERT_TRUE(f.ok()) << f.status();
  ASSERT_EQ((*f)->tensors().size(), 7u);

  const SafetensorsTensor* f32 = (*f)->Find("f32");
  ASSERT_NE(f32, nullptr);
  EXPECT_EQ(f32->dtype, SafetensorsDtype::kF32);
  EXPECT_EQ(f32->shape, (std::vector<int64_t>{2, 3, 4}));
  EXPECT_EQ(f32->n_elements(), 24);
  const std::vector<float> fv = Values<float>(*f32);
  ASSERT_EQ(fv.size(), 24u);
  for (int i = 0; i < 24; ++i) EXPECT_EQ(fv[i], i * 0.5f - 3) << i;

  const SafetensorsTensor* f16 = (*f)->Find("f16");
  ASSERT_NE(f16, nullptr);
  EXPECT_EQ(f16->dtype, SafetensorsDtype::kF16);
  const std::vector<uint16_t> hv = Values<uint16_t>(*f16);
  ASSERT_EQ(hv.size(), 8u);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(HalfToFloat(hv[i]), i - 2.5f) << i;

  const SafetensorsTensor* i64 = (*f)->Find("i64");
  ASSERT_NE(i64, nullptr);
  EXPECT_EQ(i64->shape, (std::vector<int64_t>{3, 2}));
  const std::vector<int64_t> iv = Values<int64_t>(*i64);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(iv[i], i * 1000 - 2) << i;

  const SafetensorsTensor* u8 = (*f)->Find("u8");
  ASSERT_NE(u8, nullptr);
  EXPECT_EQ(Values<uint8_t>(*u8), (std::vector<uint8_t>{250, 251, 252, 253, 254}));
  const SafetensorsTensor* flags = (*f)->Find("flags");
  ASSERT_NE(flags, nullptr);
  EXPECT_EQ(flags->dtype, SafetensorsDtype::kBool);
  EXPECT_EQ(Values<uint8_t>(*flags), (std::vector<uint8_t>{1, 0, 1, 1}));

  const SafetensorsTensor* scalar = (*f)->Find("scalar");
  ASSERT_NE(scalar, nullptr);
  EXPECT_TRUE(scalar->shape.empty());
  EXPECT_EQ(Values<float>(*scalar), (std::vector<float>{7.25f}));
  const SafetensorsTensor* empty = (*f)->Find("empty");
  ASSERT_NE(empty, nullptr);
  EXPECT_EQ(empty->shape, (std::vector<int64_t>{0, 4}));
  EXPECT_TRUE(empty->data.empty());

  EXPECT_EQ((*f)->Find("missing"), nullptr);
  ASSERT_EQ((*f)->metadata().size(), 2u);
  EXPECT_EQ((*f)->metadata()[0].first, "format");
  EXPECT_EQ((*f)->metadata()[0].second, "pt");
  // In the order of their offsets, each starting where the previous ends.
  const uint8_t* at = (*f)->tensors().front().data.data();
  for (const SafetensorsTensor& t : (*f)->tensors()) {
    EXPECT_EQ(t.data.data(), at) << t.name;
    at += t.data.size();
  }
}

TEST(SafetensorsFile, MapsTheFloatDtypesToGgmlTypes) {
  EXPECT_EQ(GgmlTypeOf(SafetensorsDtype::kBF16), GgmlType::kBF16);
  EXPECT_EQ(GgmlTypeOf(SafetensorsDtype::kF16), GgmlType::kF16);
  EXPECT_EQ(GgmlTypeOf(SafetensorsDtype::kF32), GgmlType::kF32);
  EXPECT_EQ(GgmlTypeOf(SafetensorsDtype::kF64), std::nullopt);
  EXPECT_EQ(GgmlTypeOf(SafetensorsDtype::kI64), std::nullopt);
  EXPECT_EQ(SafetensorsDtypeSize(SafetensorsDtype::kBF16), 2);
  EXPECT_EQ(SafetensorsDtypeName(SafetensorsDtype::kF8E4M3), "F8_E4M3");
}

// A file: the 8-byte header size (`declared`, or the header's real size), the header,
// then `data_bytes` bytes of data.
std::string File(const std::string& header, size_t data_bytes,
                 std::optional<uint64_t> declared = std::nullopt) {
  const uint64_t n = declared.value_or(header.size());
  std::string out(8, '\0');
  std::memcpy(out.data(), &n, 8);
  return out + header + std::string(data_bytes, '\x7f');
}

absl::Status ParseStatus(const std::string& bytes) {
  auto f = SafetensorsFile::Parse(
      std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()));
  return f.status();
}

TEST(SafetensorsFile, AcceptsBf16AndPaddingAndAnEmptyHeader) {
  EXPECT_TRUE(
      ParseStatus(File(R"({"w":{"dtype":"BF16","shape":[2,3],"data_offsets":[0,12]}}   )", 12))
          .ok());
  EXPECT_TRUE(ParseStatus(File("{}", 0)).ok());
  EXPECT_TRUE(ParseStatus(File(R"({"__metadata__":{}})", 0)).ok());
}

// Every way a header can lie, each refused with the reason — never a crash, never a view
// past the bytes.
TEST(SafetensorsFile, RefusesHostileHeadersNamingTheReason) {
  const std::string ok_entry = R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";
  struct Case {
    std::string bytes;
    std::string reason;
  };
  const std::vector<Case> cases = {
      {"1234567", "shorter than its 8-byte header size"},
      {File("{}", 0, uint64_t{100'000'001}), "over the limit"},
      {File("{}", 0, uint64_t{3}), "runs past the end"},
      {File("{}", 0, ~uint64_t{0}), "over the limit"},
      {File("[]", 0), "unexpected array"},
      {File("{", 0), "not valid JSON"},
      {File("{} x", 0), "not valid JSON"},
      {File("\"a\"", 0), "unexpected string"},
      {File("{" + ok_entry + "," + ok_entry + "}", 16), "appears twice"},
      {File(R"({"a":{"dtype":"F32","dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 8),
       "field \"dtype\" twice"},
      {File(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"x":1}})", 8),
       "unknown field \"x\""},
      {File(R"({"a":{"dtype":"F32","shape":[2]}})", 0), "lacks data_offsets"},
      {File(R"({"a":{"dtype":"F33","shape":[2],"data_offsets":[0,8]}})", 8), "unknown dtype"},
      {File(R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", 8), "negative number"},
      {File(R"({"a":{"dtype":"F32","shape":[2.5],"data_offsets":[0,8]}})", 8),
       "not a non-negative integer"},
      {File(R"({"a":{"dtype":"F32","shape":[18446744073709551616],"data_offsets":[0,8]}})", 8),
       "not a non-negative integer"},
      {File(R"({"a":{"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,8]}})", 8),
       "overflows"},
      {File(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", 8), "begin 8 > end 0"},
      {File(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8,9]}})", 8),
       "more than 2 data_offsets"},
      {File(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0]}})", 8), "must be [begin, end]"},
      {File(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8),
       "needs 12 bytes, data_offsets hold 8"},
      {File(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", 12), "gap"},
      {File(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
            R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
            12),
       "overlap"},
      {File("{" + ok_entry + "}", 9), "the data section has 9 bytes"},
      {File("{" + ok_entry + "}", 4), "the data section has 4 bytes"},
      {File(R"({"__metadata__":{"a":1}})", 0), "unexpected number in __metadata__"},
      {File(R"({"__metadata__":{"a":"x","a":"y"}})", 0), "key \"a\" twice"},
      {File(R"({"__metadata__":{},"__metadata__":{}})", 0), "two __metadata__"},
      {File(R"({"a":{"dtype":"F32","shape":[[2]],"data_offsets":[0,8]}})", 8), "unexpected array"},
      {File(R"({"a":{"dtype":{"x":1},"shape":[2],"data_offsets":[0,8]}})", 8), "unexpected object"},
      {File(R"({"a":null})", 0), "null"},
      {File(R"({"a":{"dtype":"F32","shape":[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1],)"
            R"("data_offsets":[0,4]}})",
            4),
       "more than 16 dimensions"},
      {File(R"({"a":"x"})", 0), "unexpected string"},
  };
  for (const Case& c : cases) {
    const absl::Status st = ParseStatus(c.bytes);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << c.reason << ": " << st;
    EXPECT_THAT(st.message(), HasSubstr(c.reason)) << st;
  }
}

// A refusal quotes a bounded piece of a hostile name, not the name.
TEST(SafetensorsFile, ErrorsQuoteAtMost200BytesOfAName) {
  const std::string name(1 << 20, 'n');
  for (const std::string& header :
       {"{\"" + name + R"(":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"x":1}})",
        "{\"" + name + R"(":{"dtype":"F32","dtype":"F32"}})",
        "{\"" + name + R"(":{"dtype":"F32","shape":[-1]}})",
        "{\"" + name + R"(":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})"}) {
    const absl::Status st = ParseStatus(File(header, 8));
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_LT(st.message().size(), 400u) << st.message().substr(0, 100);
  }
}

TEST(SafetensorsFile, OpenNamesTheFileInItsErrors) {
  auto missing = SafetensorsFile::Open("/nonexistent.safetensors");
  EXPECT_FALSE(missing.ok());
  EXPECT_THAT(missing.status().message(), HasSubstr("/nonexistent.safetensors"));
  auto not_safetensors = SafetensorsFile::Open(TestDataPath("engine_golden.json"));
  EXPECT_EQ(not_safetensors.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(not_safetensors.status().message(), HasSubstr("engine_golden.json"));
}

}  // namespace
}  // namespace tandem::model
