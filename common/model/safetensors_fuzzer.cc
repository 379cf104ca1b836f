// libFuzzer target: SafetensorsFile::Parse on arbitrary bytes (scripts/fuzz.sh, seeds
// tests/data/*.safetensors). Beyond "no crash": a file that parses holds tensors that
// tile its data section exactly, each of its shape's byte count, each name once.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <string>

#include "common/model/safetensors_file.h"

namespace {
[[noreturn]] void Fail(const std::string& what) {
  std::fprintf(stderr, "safetensors_fuzzer: %s\n", what.c_str());
  std::abort();
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using tandem::model::SafetensorsFile;
  auto file = SafetensorsFile::Parse({data, size});
  if (!file.ok()) {
    if (file.status().code() != absl::StatusCode::kInvalidArgument) {
      Fail("refused with " + file.status().ToString());
    }
    return 0;
  }
  uint64_t n;
  std::memcpy(&n, data, 8);
  const uint8_t* at = data + 8 + n;
  std::set<std::string> names;
  for (const auto& t : (*file)->tensors()) {
    if (t.data.data() != at) Fail("tensor " + t.name + " is not where the previous one ends");
    if (static_cast<int64_t>(t.data.size()) !=
        t.n_elements() * tandem::model::SafetensorsDtypeSize(t.dtype)) {
      Fail("tensor " + t.name + " holds a byte count its shape does not");
    }
    if (!names.insert(t.name).second) Fail("tensor " + t.name + " twice");
    if ((*file)->Find(t.name) != &t) Fail("Find does not find " + t.name);
    at += t.data.size();
  }
  if (at != data + size) Fail("the tensors do not end at the end of the file");
  return 0;
}
