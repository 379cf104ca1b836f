#include "common/model/gguf_file.h"

#include <atomic>
#include <cstdlib>
#include <new>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/gguf_builder.h"

// Counts bytes requested from operator new, so tests can check that hostile sizes
// never turn into large allocations. (GCC cannot see that this new and delete pair.)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
static std::atomic<size_t> g_allocated{0};
void* operator new(size_t n) {
  g_allocated += n;
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }

namespace tandem::model {
namespace {

using ::tandem::testing::ByteWriter;
using ::tandem::testing::GgufBuilder;
using ::testing::HasSubstr;

std::span<const uint8_t> AsBytes(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

absl::Status ParseStatus(const std::string& bytes) {
  size_t before = g_allocated;
  auto f = GgufFile::Parse(AsBytes(bytes));
  size_t used = g_allocated - before;
  // Flat memory: parsing allocates at most a small multiple of the file size.
  EXPECT_LT(used, 64 * 1024 + 16 * bytes.size()) << "reader allocated " << used << " bytes";
  return f.status();
}

void ExpectRejected(const std::string& bytes, const std::string& message_part) {
  absl::Status st = ParseStatus(bytes);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_THAT(std::string(st.message()), HasSubstr(message_part));
}

GgufBuilder OneTensor(uint32_t type, std::vector<uint64_t> dims, size_t data_bytes) {
  GgufBuilder b;
  b.String("general.architecture", "llama");
  GgufBuilder::Tensor t;
  t.name = "w";
  t.type = type;
  t.dims = std::move(dims);
  t.data.assign(data_bytes, '\x01');
  b.AddTensor(t);
  return b;
}

TEST(GgufFile, ParsesEveryValueTypeAndTensors) {
  GgufBuilder b;
  b.String("general.architecture", "llama")
      .Uint32("a.u32", 7)
      .Int32("a.i32", -3)
      .Float32("a.f32", 1.5f)
      .Bool("a.bool", true)
      .RawKv("a.u8", 0, ByteWriter().U8(200).str())
      .RawKv("a.i8", 1, ByteWriter().U8(0xFF).str())
      .RawKv("a.u16", 2, ByteWriter().Raw("\x34\x12", 2).str())
      .RawKv("a.i16", 3, ByteWriter().Raw("\xFE\xFF", 2).str())
      .RawKv("a.u64", 10, ByteWriter().U64(1ull << 40).str())
      .RawKv("a.i64", 11, ByteWriter().U64(static_cast<uint64_t>(-5)).str())
      .RawKv("a.f64", 12, ByteWriter().Raw("\0\0\0\0\0\0\xF0\x3F", 8).str())
      .StringArray("a.strs", {"x", "", "yz"})
      .Int32Array("a.ints", {1, -2, 3})
      .F32Tensor("t0", {4, 2}, {0, 1, 2, 3, 4, 5, 6, 7})
      .F32Tensor("t1", {3}, {9, 8, 7});
  std::string bytes = b.Build();
  auto f = GgufFile::Parse(AsBytes(bytes));
  ASSERT_TRUE(f.ok()) << f.status();
  const GgufFile& g = **f;
  EXPECT_EQ(g.version(), 3u);
  EXPECT_EQ(g.metadata().size(), 14u);
  EXPECT_EQ(*g.GetString("general.architecture"), "llama");
  EXPECT_EQ(*g.GetUint("a.u32"), 7u);
  EXPECT_EQ(*g.GetInt("a.i32"), -3);
  EXPECT_EQ(*g.GetFloat("a.f32"), 1.5);
  EXPECT_EQ(*g.GetBool("a.bool"), true);
  EXPECT_EQ(*g.GetUint("a.u8"), 200u);
  EXPECT_EQ(*g.GetInt("a.i8"), -1);
  EXPECT_EQ(*g.GetUint("a.u16"), 0x1234u);
  EXPECT_EQ(*g.GetInt("a.i16"), -2);
  EXPECT_EQ(*g.GetUint("a.u64"), 1ull << 40);
  EXPECT_EQ(*g.GetInt("a.i64"), -5);
  EXPECT_EQ(*g.GetFloat("a.f64"), 1.0);
  auto strs = g.GetArray("a.strs", GgufValueType::kString);
  ASSERT_TRUE(strs.ok());
  EXPECT_THAT((*strs)->strings, ::testing::ElementsAre("x", "", "yz"));
  auto ints = g.GetArray("a.ints", GgufValueType::kInt32);
  ASSERT_TRUE(ints.ok());
  EXPECT_EQ(ArrayElement<int32_t>(**ints, 1), -2);

  ASSERT_EQ(g.tensors().size(), 2u);
  const GgufTensorInfo* t0 = g.FindTensor("t0");
  ASSERT_NE(t0, nullptr);
  EXPECT_EQ(t0->type, GgmlType::kF32);
  EXPECT_EQ(t0->n_dims, 2);
  EXPECT_EQ(t0->ne[0], 4);
  EXPECT_EQ(t0->ne[1], 2);
  EXPECT_EQ(t0->n_bytes, 32u);
  float v5;
  std::memcpy(&v5, t0->data.data() + 5 * 4, 4);
  EXPECT_EQ(v5, 5.0f);
  EXPECT_EQ(g.data_offset() % 32, 0u);
  EXPECT_EQ(g.FindTensor("t1")->offset, 32u);
}

TEST(GgufFile, TypedAccessorsReportMissingAndWrongTypes) {
  std::string bytes = GgufBuilder().String("k.s", "v").Int32("k.neg", -1).Build();
  auto f = GgufFile::Parse(AsBytes(bytes));
  ASSERT_TRUE(f.ok());
  EXPECT_EQ((*f)->GetString("nope").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ((*f)->GetUint("k.s").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string((*f)->GetUint("k.neg").status().message()), HasSubstr("negative"));
  EXPECT_THAT(std::string((*f)->GetArray("k.s", GgufValueType::kString).status().message()),
              HasSubstr("array of STRING"));
}

TEST(GgufFile, AcceptsVersion2AndVocabOnlyFiles) {
  std::string bytes = GgufBuilder().Version(2).String("general.architecture", "llama").Build();
  auto f = GgufFile::Parse(AsBytes(bytes));
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ((*f)->version(), 2u);
  EXPECT_TRUE((*f)->tensors().empty());
}

// ---- One malformed file per rule ---------------------------------------------------

TEST(GgufMalformed, EmptyFile) { ExpectRejected("", "magic"); }

TEST(GgufMalformed, BadMagic) { ExpectRejected("GGML\x03\0\0\0", "bad magic"); }

TEST(GgufMalformed, TruncatedHeader) {
  ExpectRejected(std::string("GGUF\x03\0\0\0\x01\0", 10), "tensor count");
}

TEST(GgufMalformed, UnsupportedVersions) {
  ExpectRejected(GgufBuilder().Version(1).Build(), "version 1");
  ExpectRejected(GgufBuilder().Version(4).Build(), "unsupported GGUF version 4");
  ExpectRejected(GgufBuilder().Version(0x03000000).Build(), "big-endian");
}

TEST(GgufMalformed, StringLengthOf2To63) {
  GgufBuilder b;
  b.RawKv("general.name", 8, ByteWriter().U64(1ull << 63).Bytes("abc").str());
  ExpectRejected(b.Build(), "declares 9223372036854775808 bytes");
}

TEST(GgufMalformed, KeyLengthPastEof) {
  std::string bytes = GgufBuilder().OverrideCounts(0, 1).Build();
  bytes += ByteWriter().U64(1000).Bytes("a key far shorter than declared").str();
  ExpectRejected(bytes, "metadata key #0");
}

TEST(GgufMalformed, HugeMetadataCount) {
  ExpectRejected(GgufBuilder().OverrideCounts(0, 1ull << 60).Build(), "metadata count");
}

TEST(GgufMalformed, HugeTensorCount) {
  ExpectRejected(GgufBuilder().OverrideCounts(1ull << 62, 0).Build(), "tensor count");
}

TEST(GgufMalformed, UnknownValueType) {
  ExpectRejected(GgufBuilder().RawKv("a.b", 13, "xxxx").Build(), "unknown value type 13");
}

TEST(GgufMalformed, HugeArrayLength) {
  ExpectRejected(GgufBuilder().RawKv("a.arr", 9, ByteWriter().U32(4).U64(1ull << 61).str()).Build(),
                 "cannot fit");
  ExpectRejected(GgufBuilder().RawKv("a.arr", 9, ByteWriter().U32(8).U64(~0ull).str()).Build(),
                 "strings cannot fit");
}

TEST(GgufMalformed, UnknownArrayElementType) {
  ExpectRejected(GgufBuilder().RawKv("a.arr", 9, ByteWriter().U32(99).U64(1).str()).Build(),
                 "unknown array element type 99");
}

TEST(GgufMalformed, NestedArray) {
  ExpectRejected(GgufBuilder().RawKv("a.arr", 9, ByteWriter().U32(9).U64(1).str()).Build(),
                 "nested arrays");
}

TEST(GgufMalformed, ArrayDeclaredUint8HoldingStrings) {
  // The token list must be an array of strings; declared UINT8, the string bytes
  // would be read as numbers. The schema check names the key and both types.
  ByteWriter w;
  w.U32(0).U64(3).Bytes("abc");
  ExpectRejected(GgufBuilder().RawKv("tokenizer.ggml.tokens", 9, w.str()).Build(),
                 "'tokenizer.ggml.tokens' must be array of STRING, found array of UINT8");
}

TEST(GgufMalformed, WrongScalarTypeForKnownKey) {
  ExpectRejected(GgufBuilder().Uint32("general.architecture", 5).Build(),
                 "'general.architecture' must be STRING, found UINT32");
}

TEST(GgufMalformed, BoolOutOfRange) {
  ExpectRejected(GgufBuilder().RawKv("a.flag", 7, ByteWriter().U8(2).str()).Build(), "not 0 or 1");
}

TEST(GgufMalformed, DuplicateKey) {
  ExpectRejected(GgufBuilder().String("general.name", "a").String("general.name", "b").Build(),
                 "duplicate metadata key 'general.name'");
}

TEST(GgufMalformed, EmptyKey) { ExpectRejected(GgufBuilder().String("", "a").Build(), "is empty"); }

TEST(GgufMalformed, AlignmentNotPowerOfTwo) {
  ExpectRejected(GgufBuilder().Uint32("general.alignment", 13).Build(), "13 is not a power of two");
  ExpectRejected(GgufBuilder().Uint32("general.alignment", 0).Build(), "0 is not a power of two");
}

TEST(GgufMalformed, AlignmentOfWrongType) {
  ExpectRejected(GgufBuilder().String("general.alignment", "32").Build(),
                 "'general.alignment' must be UINT32");
}

TEST(GgufMalformed, TooManyDimensions) {
  ExpectRejected(OneTensor(0, {1, 1, 1, 1, 1}, 4).Build(), "5 dimensions");
  ExpectRejected(OneTensor(0, {}, 4).Build(), "0 dimensions");
}

TEST(GgufMalformed, DimensionTooLargeOrZero) {
  ExpectRejected(OneTensor(0, {1ull << 63}, 4).Build(), "must be positive and fit in int64");
  ExpectRejected(OneTensor(0, {4, 0}, 16).Build(), "dimension 1 is 0");
}

TEST(GgufMalformed, ElementCountOverflow) {
  ExpectRejected(OneTensor(0, {(1ull << 42) + 1, 1ull << 22}, 4).Build(),
                 "element count overflows");
}

TEST(GgufMalformed, ByteSizeOverflow) {
  // 2^61 F32 elements = 2^63 bytes: the element count fits, the byte count does not.
  ExpectRejected(OneTensor(0, {1ull << 61}, 4).Build(), "byte size overflows");
}

TEST(GgufMalformed, HugeTensorPastEof) {
  ExpectRejected(OneTensor(0, {(1ull << 42) + 1}, 4).Build(), "outside the");
}

TEST(GgufMalformed, UnknownTensorType) {
  ExpectRejected(OneTensor(77, {32}, 4).Build(), "unknown ggml type 77");
}

TEST(GgufMalformed, RowNotMultipleOfBlockSize) {
  ExpectRejected(OneTensor(2 /* Q4_0 */, {33}, 36).Build(),
                 "not a multiple of the Q4_0 block size 32");
}

TEST(GgufMalformed, MisalignedOffset) {
  GgufBuilder b = OneTensor(0, {4}, 16);
  GgufBuilder::Tensor t{"w2", 0, {4}, std::string(16, '\0'), 8};
  b.AddTensor(t);
  ExpectRejected(b.Build(), "offset 8 is not a multiple of the alignment 32");
}

TEST(GgufMalformed, OffsetPastEof) {
  GgufBuilder b;
  GgufBuilder::Tensor t{"w", 0, {4}, "", 1ull << 40};
  b.AddTensor(t);
  std::string bytes = b.Build();
  ExpectRejected(bytes.substr(0, bytes.size()), "outside the");
}

TEST(GgufMalformed, OverlappingTensors) {
  GgufBuilder b;
  b.AddTensor({"a", 0, {16}, std::string(64, '\0'), 0});
  b.AddTensor({"b", 0, {16}, std::string(64, '\0'), 32});
  ExpectRejected(b.Build(), "overlap");
}

TEST(GgufMalformed, DuplicateTensorName) {
  GgufBuilder b;
  b.F32Tensor("w", {1}, {1.0f}).F32Tensor("w", {1}, {2.0f});
  ExpectRejected(b.Build(), "duplicate tensor name 'w'");
}

TEST(GgufMalformed, TensorNameTooLong) {
  GgufBuilder b;
  b.F32Tensor(std::string(64, 'n'), {1}, {1.0f});
  ExpectRejected(b.Build(), "name has 64 bytes");
}

TEST(GgufMalformed, TruncatedTensorData) {
  std::string bytes = OneTensor(0, {64}, 256).Build();
  ExpectRejected(bytes.substr(0, bytes.size() - 1), "outside the");
}

TEST(GgufMalformed, EveryTruncationOfAValidFileIsRejectedCleanly) {
  std::string bytes =
      ::tandem::testing::TinyGpt2Vocab().F32Tensor("t", {8}, std::vector<float>(8, 1.0f)).Build();
  for (size_t n = 0; n < bytes.size(); ++n) {
    absl::Status st = ParseStatus(bytes.substr(0, n));
    EXPECT_FALSE(st.ok()) << "prefix of " << n << " bytes parsed";
  }
  EXPECT_TRUE(ParseStatus(bytes).ok());
}

TEST(GgufFile, OpenReportsMissingFileWithPath) {
  auto f = GgufFile::Open("/nonexistent/model.gguf");
  EXPECT_EQ(f.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(f.status().message()), HasSubstr("/nonexistent/model.gguf"));
}

}  // namespace
}  // namespace tandem::model
