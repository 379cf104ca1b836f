#include "common/model/safetensors_file.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "absl/container/flat_hash_set.h"
#include "common/util/status_macros.h"
#include "common/util/strings.h"
#include "nlohmann/json.hpp"

namespace tandem::model {

namespace {

struct DtypeInfo {
  SafetensorsDtype dtype;
  std::string_view name;
  int64_t size;
};

constexpr DtypeInfo kDtypes[] = {
    {SafetensorsDtype::kBool, "BOOL", 1},      {SafetensorsDtype::kU8, "U8", 1},
    {SafetensorsDtype::kI8, "I8", 1},          {SafetensorsDtype::kF8E4M3, "F8_E4M3", 1},
    {SafetensorsDtype::kF8E5M2, "F8_E5M2", 1}, {SafetensorsDtype::kI16, "I16", 2},
    {SafetensorsDtype::kU16, "U16", 2},        {SafetensorsDtype::kF16, "F16", 2},
    {SafetensorsDtype::kBF16, "BF16", 2},      {SafetensorsDtype::kI32, "I32", 4},
    {SafetensorsDtype::kU32, "U32", 4},        {SafetensorsDtype::kF32, "F32", 4},
    {SafetensorsDtype::kI64, "I64", 8},        {SafetensorsDtype::kU64, "U64", 8},
    {SafetensorsDtype::kF64, "F64", 8},
};

const DtypeInfo& Info(SafetensorsDtype d) {
  for (const DtypeInfo& i : kDtypes) {
    if (i.dtype == d) return i;
  }
  return kDtypes[0];  // unreachable: every enumerator is in the table
}

absl::Status Invalid(std::string_view what) {
  return absl::InvalidArgumentError(StrCat("safetensors: ", what));
}

// One header entry as read, before the checks that need all of them.
struct Entry {
  std::string name;
  std::string dtype;
  bool has_dtype = false, has_shape = false, has_offsets = false;
  std::vector<uint64_t> shape;
  std::vector<uint64_t> offsets;
};

// A streaming reader of the header that accepts exactly the format's shape:
//   { name: {"dtype": str, "shape": [uint...], "data_offsets": [uint, uint]}, ...,
//     "__metadata__": {str: str, ...} }
// Anything else stops the parse with the reason in `error`.
class HeaderReader : public nlohmann::json_sax<nlohmann::json> {
 public:
  std::vector<Entry> entries;
  std::vector<std::pair<std::string, std::string>> metadata;
  std::string error;

  bool null() override { return Fail("null is not a valid value here"); }
  bool boolean(bool) override { return Fail("a boolean is not a valid value here"); }
  bool number_integer(number_integer_t v) override {
    if (v >= 0) return number_unsigned(static_cast<number_unsigned_t>(v));
    return Fail(StrCat("negative number ", v, InField()));
  }
  bool number_unsigned(number_unsigned_t v) override {
    if (state_ == State::kShape) {
      if (entries.back().shape.size() == SafetensorsFile::kMaxRank) {
        return Fail(
            StrCat("shape has more than ", SafetensorsFile::kMaxRank, " dimensions", InField()));
      }
      entries.back().shape.push_back(v);
      return true;
    }
    if (state_ == State::kOffsets) {
      if (entries.back().offsets.size() == 2)
        return Fail(StrCat("more than 2 data_offsets", InField()));
      entries.back().offsets.push_back(v);
      return true;
    }
    return Fail(StrCat("unexpected number", InField()));
  }
  bool number_float(number_float_t, const string_t& s) override {
    return Fail(
        StrCat("number ", s.substr(0, 40), " is not a non-negative integer below 2^64", InField()));
  }
  bool string(string_t& s) override {
    if (state_ == State::kMetadata) {
      metadata.emplace_back(std::move(key_), std::move(s));
      return true;
    }
    if (state_ == State::kTensor && field_ == "dtype") {
      entries.back().dtype = std::move(s);
      entries.back().has_dtype = true;
      return true;
    }
    return Fail(StrCat("unexpected string", InField()));
  }
  bool binary(binary_t&) override { return Fail("unexpected binary value"); }

  bool start_object(std::size_t) override {
    switch (state_) {
      case State::kStart:
        state_ = State::kTop;
        return true;
      case State::kTop:
        if (key_ == "__metadata__") {
          if (seen_metadata_) return Fail("two __metadata__ objects");
          seen_metadata_ = true;
          state_ = State::kMetadata;
        } else {
          entries.push_back({std::move(key_), {}, false, false, false, {}, {}});
          state_ = State::kTensor;
        }
        return true;
      default:
        return Fail(StrCat("unexpected object", InField()));
    }
  }
  bool key(string_t& k) override {
    if (state_ == State::kTensor) {
      Entry& e = entries.back();
      bool* seen = k == "dtype"          ? &e.has_dtype
                   : k == "shape"        ? &e.has_shape
                   : k == "data_offsets" ? &e.has_offsets
                                         : nullptr;
      if (seen == nullptr) {
        return Fail(StrCat("unknown field \"", k.substr(0, 40), "\" in tensor \"",
                           e.name.substr(0, 200), "\""));
      }
      if (*seen) {
        return Fail(StrCat("field \"", k, "\" twice in tensor \"", e.name.substr(0, 200), "\""));
      }
      *seen = true;
      field_ = k;
      return true;
    }
    key_ = std::move(k);
    if (state_ == State::kMetadata && !metadata_keys_.insert(key_).second) {
      return Fail(StrCat("__metadata__ key \"", key_.substr(0, 200), "\" twice"));
    }
    return true;
  }
  bool end_object() override {
    switch (state_) {
      case State::kTensor:
      case State::kMetadata:
        state_ = State::kTop;
        field_.clear();
        return true;
      case State::kTop:
        state_ = State::kDone;
        return true;
      default:
        return Fail("unbalanced object");
    }
  }
  bool start_array(std::size_t) override {
    if (state_ == State::kTensor && field_ == "shape") {
      state_ = State::kShape;
      return true;
    }
    if (state_ == State::kTensor && field_ == "data_offsets") {
      state_ = State::kOffsets;
      return true;
    }
    return Fail(StrCat("unexpected array", InField()));
  }
  bool end_array() override {
    if (state_ != State::kShape && state_ != State::kOffsets) return Fail("unbalanced array");
    state_ = State::kTensor;
    return true;
  }
  bool parse_error(std::size_t position, const std::string&,
                   const nlohmann::detail::exception& e) override {
    if (error.empty())
      error = StrCat("header is not valid JSON at byte ", position, ": ", e.what());
    return false;
  }
  bool done() const { return state_ == State::kDone; }

 private:
  enum class State { kStart, kTop, kTensor, kShape, kOffsets, kMetadata, kDone };

  bool Fail(std::string why) {
    if (error.empty()) error = std::move(why);
    return false;
  }
  std::string InField() const {
    if (state_ == State::kTensor || state_ == State::kShape || state_ == State::kOffsets) {
      return StrCat(" in tensor \"", entries.back().name.substr(0, 200), "\"",
                    field_.empty() ? "" : StrCat(" field \"", field_, "\""));
    }
    if (state_ == State::kMetadata) return " in __metadata__";
    return "";
  }

  State state_ = State::kStart;
  std::string key_;    // the last key read outside a tensor entry
  std::string field_;  // the tensor field being read
  bool seen_metadata_ = false;
  absl::flat_hash_set<std::string> metadata_keys_;
};

// a × b, or nullopt on overflow of int64.
std::optional<int64_t> Mul(int64_t a, uint64_t b) {
  if (b > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
  int64_t r;
  if (__builtin_mul_overflow(a, static_cast<int64_t>(b), &r)) return std::nullopt;
  return r;
}

}  // namespace

std::string_view SafetensorsDtypeName(SafetensorsDtype dtype) { return Info(dtype).name; }
int64_t SafetensorsDtypeSize(SafetensorsDtype dtype) { return Info(dtype).size; }

std::optional<GgmlType> GgmlTypeOf(SafetensorsDtype dtype) {
  switch (dtype) {
    case SafetensorsDtype::kF32:
      return GgmlType::kF32;
    case SafetensorsDtype::kF16:
      return GgmlType::kF16;
    case SafetensorsDtype::kBF16:
      return GgmlType::kBF16;
    default:
      return std::nullopt;
  }
}

int64_t SafetensorsTensor::n_elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;  // checked against the byte count when parsed
  return n;
}

absl::StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Open(const std::string& path) {
  ASSIGN_OR_RETURN(auto mapping, MappedFile::Open(path));
  std::unique_ptr<SafetensorsFile> f(new SafetensorsFile());
  const std::span<const uint8_t> bytes = mapping->bytes();
  f->mapping_ = std::move(mapping);
  if (absl::Status st = f->ParseAll(bytes); !st.ok()) {
    return absl::Status(st.code(), StrCat(path, ": ", st.message()));
  }
  return f;
}

absl::StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Parse(
    std::span<const uint8_t> bytes) {
  std::unique_ptr<SafetensorsFile> f(new SafetensorsFile());
  RETURN_IF_ERROR(f->ParseAll(bytes));
  return f;
}

const SafetensorsTensor* SafetensorsFile::Find(std::string_view name) const {
  auto it = by_name_.find(std::string(name));
  return it == by_name_.end() ? nullptr : &tensors_[it->second];
}

absl::Status SafetensorsFile::ParseAll(std::span<const uint8_t> bytes) {
  if (bytes.size() < 8) {
    return Invalid(
        StrCat("file of ", bytes.size(), " bytes is shorter than its 8-byte header size"));
  }
  uint64_t n;
  std::memcpy(&n, bytes.data(), 8);
  if (n > kMaxHeaderBytes) {
    return Invalid(StrCat("header size ", n, " is over the limit of ", kMaxHeaderBytes, " bytes"));
  }
  if (n > bytes.size() - 8) {
    return Invalid(
        StrCat("header size ", n, " runs past the end of the ", bytes.size(), "-byte file"));
  }
  const std::string_view header(reinterpret_cast<const char*>(bytes.data() + 8), n);
  const std::span<const uint8_t> data = bytes.subspan(8 + n);

  HeaderReader reader;
  const bool parsed =
      nlohmann::json::sax_parse(header, &reader, nlohmann::json::input_format_t::json,
                                /*strict=*/true);
  if (!parsed || !reader.done()) {
    return Invalid(reader.error.empty() ? "header is not one JSON object" : reader.error);
  }
  metadata_ = std::move(reader.metadata);

  struct Placed {
    size_t entry;
    SafetensorsDtype dtype;
    uint64_t begin, end;
  };
  std::vector<Placed> placed;
  placed.reserve(reader.entries.size());
  absl::flat_hash_map<std::string, size_t> seen;
  for (size_t i = 0; i < reader.entries.size(); ++i) {
    const Entry& e = reader.entries[i];
    const std::string where = StrCat("tensor \"", e.name.substr(0, 200), "\"");
    if (!seen.emplace(e.name, i).second) return Invalid(StrCat(where, " appears twice"));
    if (!e.has_dtype || !e.has_shape || !e.has_offsets) {
      return Invalid(StrCat(where, " lacks ",
                            !e.has_dtype   ? "dtype"
                            : !e.has_shape ? "shape"
                                           : "data_offsets"));
    }
    const DtypeInfo* info = nullptr;
    for (const DtypeInfo& d : kDtypes) {
      if (d.name == e.dtype) info = &d;
    }
    if (info == nullptr)
      return Invalid(StrCat(where, ": unknown dtype \"", e.dtype.substr(0, 40), "\""));
    if (e.offsets.size() != 2) return Invalid(StrCat(where, ": data_offsets must be [begin, end]"));
    if (e.offsets[0] > e.offsets[1]) {
      return Invalid(StrCat(where, ": data_offsets begin ", e.offsets[0], " > end ", e.offsets[1]));
    }
    std::optional<int64_t> bytes_needed = info->size;
    for (uint64_t d : e.shape) {
      if (bytes_needed) bytes_needed = Mul(*bytes_needed, d);
    }
    if (!bytes_needed) return Invalid(StrCat(where, ": shape's byte count overflows"));
    if (static_cast<uint64_t>(*bytes_needed) != e.offsets[1] - e.offsets[0]) {
      return Invalid(StrCat(where, ": shape [", Join(e.shape, ", "), "] of ", e.dtype, " needs ",
                            *bytes_needed, " bytes, data_offsets hold ",
                            e.offsets[1] - e.offsets[0]));
    }
    placed.push_back({i, info->dtype, e.offsets[0], e.offsets[1]});
  }
  std::sort(placed.begin(), placed.end(), [](const Placed& a, const Placed& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t at = 0;
  for (const Placed& p : placed) {
    if (p.begin != at) {
      return Invalid(StrCat("tensor \"", reader.entries[p.entry].name.substr(0, 200),
                            "\" begins at ", p.begin, ", not where the previous one ends (", at,
                            "): the data section has a ", p.begin > at ? "gap" : "overlap"));
    }
    at = p.end;
  }
  if (at != data.size()) {
    return Invalid(StrCat("the tensors end at data byte ", at, ", the data section has ",
                          data.size(), " bytes"));
  }

  tensors_.reserve(placed.size());
  for (const Placed& p : placed) {
    Entry& e = reader.entries[p.entry];
    SafetensorsTensor t;
    t.name = std::move(e.name);
    t.dtype = p.dtype;
    t.shape.assign(e.shape.begin(), e.shape.end());  // each fits: the byte count did
    t.data = data.subspan(p.begin, p.end - p.begin);
    by_name_[t.name] = tensors_.size();
    tensors_.push_back(std::move(t));
  }
  return absl::OkStatus();
}

}  // namespace tandem::model
