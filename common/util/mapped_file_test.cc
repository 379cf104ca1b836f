#include "common/util/mapped_file.h"

#include <cstdio>
#include <fstream>
#include <random>
#include <string>

#include "gtest/gtest.h"

namespace tandem {
namespace {

TEST(MappedFile, MapsContents) {
  std::string path = ::testing::TempDir() + "/mapped_file_test.bin";
  { std::ofstream(path, std::ios::binary) << "hello"; }
  auto file = MappedFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  auto bytes = (*file)->bytes();
  EXPECT_EQ(std::string(bytes.begin(), bytes.end()), "hello");
  std::remove(path.c_str());
}

// A copy in huge-page memory holds exactly the file's bytes (a size that is not a
// multiple of the page, large enough for several huge pages), at a 2 MiB boundary,
// read-only; an empty file is empty either way.
TEST(MappedFile, AHugePageCopyHoldsTheFilesBytesReadOnly) {
  const std::string path = ::testing::TempDir() + "/mapped_file_huge.bin";
  std::string content(size_t{5} << 20, '\0');
  std::mt19937 rng(7);
  for (char& c : content) c = static_cast<char>(rng());
  content.resize(content.size() - 12345);
  { std::ofstream(path, std::ios::binary) << content; }
  for (FileResidence r : {FileResidence::kMapped, FileResidence::kHugePages}) {
    auto file = MappedFile::Open(path, r);
    ASSERT_TRUE(file.ok()) << file.status();
    const auto bytes = (*file)->bytes();
    ASSERT_EQ(bytes.size(), content.size());
    EXPECT_EQ(std::string(bytes.begin(), bytes.end()), content);
    EXPECT_EQ((*file)->huge_pages(), r == FileResidence::kHugePages);
    if (r == FileResidence::kHugePages) {
      EXPECT_EQ(reinterpret_cast<uintptr_t>(bytes.data()) % (size_t{2} << 20), 0u);
      // Read-only: a write faults (checked in a child, which dies of it).
      EXPECT_DEATH(const_cast<uint8_t*>(bytes.data())[100] = 1, "");
    }
  }
  // Below kHugePageMinBytes, kAuto maps.
  auto small = MappedFile::Open(path, FileResidence::kAuto);
  ASSERT_TRUE(small.ok());
  EXPECT_FALSE((*small)->huge_pages());
  { std::ofstream(path, std::ios::binary | std::ios::trunc); }
  auto empty = MappedFile::Open(path, FileResidence::kHugePages);
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_TRUE((*empty)->bytes().empty());
  std::remove(path.c_str());
}

TEST(MappedFile, MissingFileIsNotFound) {
  auto file = MappedFile::Open("/nonexistent/tandem/file.gguf");
  EXPECT_EQ(file.status().code(), absl::StatusCode::kNotFound);
}

TEST(MappedFile, DirectoryIsRejected) {
  for (FileResidence r :
       {FileResidence::kMapped, FileResidence::kHugePages, FileResidence::kAuto}) {
    auto file = MappedFile::Open("/tmp", r);
    EXPECT_EQ(file.status().code(), absl::StatusCode::kInvalidArgument);
  }
}

}  // namespace
}  // namespace tandem
