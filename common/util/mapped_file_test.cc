#include "common/util/mapped_file.h"

#include <cstdio>
#include <fstream>

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

TEST(MappedFile, MissingFileIsNotFound) {
  auto file = MappedFile::Open("/nonexistent/tandem/file.gguf");
  EXPECT_EQ(file.status().code(), absl::StatusCode::kNotFound);
}

TEST(MappedFile, DirectoryIsRejected) {
  auto file = MappedFile::Open("/tmp");
  EXPECT_EQ(file.status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tandem
