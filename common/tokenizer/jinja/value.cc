#include "common/tokenizer/jinja/value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>

#include "common/tokenizer/jinja/py_string.h"
#include "common/util/status_macros.h"
#include "common/util/strings.h"

namespace tandem::tokenizer::jinja {

Value Value::Undefined(std::string hint) {
  return Value(UndefinedTag{std::make_shared<const std::string>(std::move(hint))});
}

Value Value::String(std::string s) {
  return Value(std::make_shared<const StrBox>(StrBox{std::move(s), false}));
}

Value Value::Markup(std::string s) {
  return Value(std::make_shared<const StrBox>(StrBox{std::move(s), true}));
}

std::string HtmlEscape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (const char c : s) {
    const char* entity = c == '&'    ? "&amp;"
                         : c == '<'  ? "&lt;"
                         : c == '>'  ? "&gt;"
                         : c == '"'  ? "&#34;"
                         : c == '\'' ? "&#39;"
                                     : nullptr;
    if (entity != nullptr) {
      out += entity;
    } else {
      out.push_back(c);
    }
  }
  return out;
}

Value Value::List(ValueList items, bool tuple) {
  int depth = 0;
  for (const Value& v : items) depth = std::max(depth, v.depth());
  return Value(
      std::make_shared<const Box<ValueList>>(Box<ValueList>{std::move(items), depth + 1, tuple}));
}

Value Value::Generator(ValueList items) {
  const Value list = List(std::move(items));
  return Value(GenPtr{std::get<ListPtr>(list.v_)});
}

Value Value::Dict(ValueDict items) {
  int depth = 0;
  for (const auto& [k, v] : items) depth = std::max(depth, v.depth());
  return Value(std::make_shared<const Box<ValueDict>>(Box<ValueDict>{std::move(items), depth + 1}));
}

Value Value::NewNamespace(ValueDict attrs) {
  return Value(std::make_shared<Namespace>(Namespace{std::move(attrs)}));
}

Value Value::Function(std::string name, const Stmt* macro) {
  return Value(std::make_shared<const Callable>(Callable{std::move(name), macro}));
}

int64_t Value::int_value() const {
  return kind() == Kind::kBool ? static_cast<int64_t>(bool_value()) : std::get<int64_t>(v_);
}

double Value::number() const {
  return kind() == Kind::kFloat ? std::get<double>(v_) : static_cast<double>(int_value());
}

std::string Value::undefined_hint() const {
  const auto& hint = std::get<UndefinedTag>(v_).hint;
  return hint ? *hint : "value is undefined";
}

int Value::depth() const {
  if (kind() == Kind::kList) return std::get<ListPtr>(v_)->depth;
  if (kind() == Kind::kGenerator) return std::get<GenPtr>(v_).items->depth;
  if (kind() == Kind::kDict) return std::get<DictPtr>(v_)->depth;
  return 0;
}

const Value* Value::Find(std::string_view key) const {
  const ValueDict* items = kind() == Kind::kDict        ? &dict()
                           : kind() == Kind::kNamespace ? &ns().attrs
                                                        : nullptr;
  if (items == nullptr) return nullptr;
  for (const auto& [k, v] : *items) {
    if (k == key) return &v;
  }
  return nullptr;
}

bool Truthy(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone:
      return false;
    case Value::Kind::kBool:
      return v.bool_value();
    case Value::Kind::kInt:
      return v.int_value() != 0;
    case Value::Kind::kFloat:
      return v.number() != 0;
    case Value::Kind::kString:
      return !v.str().empty();
    case Value::Kind::kList:
      return !v.list().empty();
    case Value::Kind::kDict:
      return !v.dict().empty();
    default:
      return true;
  }
}

std::string TypeName(const Value& v) {
  static constexpr const char* kNames[] = {"Undefined", "NoneType", "bool",     "int",
                                           "float",     "str",      "list",     "dict",
                                           "Namespace", "function", "generator"};
  return kNames[static_cast<int>(v.kind())];
}

std::string FormatFloat(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d < 0 ? "-inf" : "inf";
  // Shortest round-trip digits, then laid out the way Python's repr() does.
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
  std::string_view sci(buf, static_cast<size_t>(r.ptr - buf));
  std::string out;
  if (sci.front() == '-') {
    out.push_back('-');
    sci.remove_prefix(1);
  }
  const size_t e = sci.find('e');
  const int exp = std::atoi(std::string(sci.substr(e + 1)).c_str());
  std::string digits;
  for (const char c : sci.substr(0, e)) {
    if (c != '.') digits.push_back(c);
  }
  if (exp < -4 || exp >= 16) {
    out += digits.substr(0, 1);
    if (digits.size() > 1) out += StrCat(".", digits.substr(1));
    out += StrCat(exp < 0 ? "e-" : "e+", std::abs(exp) < 10 ? "0" : "", std::abs(exp));
  } else if (exp < 0) {
    out += StrCat("0.", std::string(static_cast<size_t>(-exp - 1), '0'), digits);
  } else {
    const auto int_len = static_cast<size_t>(exp + 1);
    if (digits.size() < int_len) digits.append(int_len - digits.size(), '0');
    out += digits.substr(0, int_len);
    out += StrCat(".", digits.size() > int_len ? digits.substr(int_len) : "0");
  }
  return out;
}

namespace {

absl::Status CheckSize(const std::string* out, size_t max_bytes) {
  if (out->size() <= max_bytes) return absl::OkStatus();
  return absl::ResourceExhaustedError(StrCat("a value grew past ", max_bytes, " bytes"));
}

absl::Status AppendValue(const Value& v, bool repr, std::string* out, size_t max_bytes) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      if (repr) *out += "Undefined";  // str() of an undefined is "", repr() is not
      break;
    case Value::Kind::kNone:
      *out += "None";
      break;
    case Value::Kind::kBool:
      *out += v.bool_value() ? "True" : "False";
      break;
    case Value::Kind::kInt:
      *out += StrCat(v.int_value());
      break;
    case Value::Kind::kFloat:
      *out += FormatFloat(v.number());
      break;
    case Value::Kind::kString:
      *out += repr ? py::Repr(v.str()) : v.str();
      break;
    case Value::Kind::kList: {
      out->push_back(v.is_tuple() ? '(' : '[');
      for (size_t i = 0; i < v.list().size(); ++i) {
        if (i > 0) *out += ", ";
        RETURN_IF_ERROR(AppendValue(v.list()[i], true, out, max_bytes));
      }
      if (v.is_tuple() && v.list().size() == 1) out->push_back(',');
      out->push_back(v.is_tuple() ? ')' : ']');
      break;
    }
    case Value::Kind::kDict:
    case Value::Kind::kNamespace: {
      const bool is_ns = v.kind() == Value::Kind::kNamespace;
      *out += is_ns ? "<Namespace {" : "{";
      bool first = true;
      for (const auto& [k, item] : is_ns ? v.ns().attrs : v.dict()) {
        *out += first ? "" : ", ";
        RETURN_IF_ERROR(AppendValue(KeyValue(k), true, out, max_bytes));
        *out += ": ";
        first = false;
        RETURN_IF_ERROR(AppendValue(item, true, out, max_bytes));
      }
      *out += is_ns ? "}>" : "}";
      break;
    }
    case Value::Kind::kCallable:
      *out += StrCat("<function ", v.callable().name, ">");
      break;
    case Value::Kind::kGenerator:
      *out += "<generator object>";  // jinja2 adds the function's name and an address
      break;
  }
  return CheckSize(out, max_bytes);
}

void Newline(int indent, int level, std::string* out) {
  out->push_back('\n');
  out->append(static_cast<size_t>(indent) * static_cast<size_t>(level), ' ');
}

absl::Status AppendJsonAt(const Value& v, int indent, int level, std::string* out, size_t max_bytes,
                          bool ascii) {
  // json.dumps separators: ", " and ": " without indent, "," and ": " with it.
  const char* item_sep = indent < 0 ? ", " : ",";
  switch (v.kind()) {
    case Value::Kind::kNone:
      *out += "null";
      break;
    case Value::Kind::kBool:
      *out += v.bool_value() ? "true" : "false";
      break;
    case Value::Kind::kInt:
      *out += StrCat(v.int_value());
      break;
    case Value::Kind::kFloat: {
      const double d = v.number();
      *out += std::isnan(d)   ? "NaN"
              : std::isinf(d) ? (d < 0 ? "-Infinity" : "Infinity")
                              : FormatFloat(d);
      break;
    }
    case Value::Kind::kString:
      py::AppendJsonString(v.str(), out, ascii);
      break;
    case Value::Kind::kList: {
      out->push_back('[');
      const ValueList& items = v.list();
      for (size_t i = 0; i < items.size(); ++i) {
        if (i > 0) *out += item_sep;
        if (indent >= 0) Newline(indent, level + 1, out);
        RETURN_IF_ERROR(AppendJsonAt(items[i], indent, level + 1, out, max_bytes, ascii));
      }
      if (indent >= 0 && !items.empty()) Newline(indent, level, out);
      out->push_back(']');
      break;
    }
    case Value::Kind::kDict: {
      out->push_back('{');
      const ValueDict& items = v.dict();
      for (size_t i = 0; i < items.size(); ++i) {
        if (i > 0) *out += item_sep;
        if (indent >= 0) Newline(indent, level + 1, out);
        if (const Value key = KeyValue(items[i].first); key.is_string()) {
          py::AppendJsonString(items[i].first, out, ascii);
        } else {  // json.dumps: {0: 1} → {"0": 1}, {None: 1} → {"null": 1}
          std::string text;
          RETURN_IF_ERROR(AppendJsonAt(key, -1, 0, &text, max_bytes, ascii));
          py::AppendJsonString(text, out, ascii);
        }
        *out += ": ";
        RETURN_IF_ERROR(AppendJsonAt(items[i].second, indent, level + 1, out, max_bytes, ascii));
      }
      if (indent >= 0 && !items.empty()) Newline(indent, level, out);
      out->push_back('}');
      break;
    }
    default:
      return absl::InvalidArgumentError(
          StrCat("Object of type ", TypeName(v), " is not JSON serializable"));
  }
  return CheckSize(out, max_bytes);
}

}  // namespace

namespace {
// What a non-string dict key starts with: a byte no UTF-8 text holds.
constexpr char kKeyTag = '\xFF';
std::string TaggedKey(char kind, std::string_view number) {
  return StrCat(std::string_view(&kKeyTag, 1), std::string_view(&kind, 1), number);
}
}  // namespace

absl::StatusOr<std::string> DictKey(const Value& key) {
  switch (key.kind()) {
    case Value::Kind::kString:
      return key.str();
    case Value::Kind::kNone:
      return TaggedKey('n', "");
    case Value::Kind::kBool:
      return TaggedKey('b', key.bool_value() ? "1" : "0");
    case Value::Kind::kInt:
      return TaggedKey('i', StrCat(key.int_value()));
    case Value::Kind::kFloat: {
      const double d = key.number();
      if (d == std::floor(d) && std::fabs(d) < 9.2e18) {
        return TaggedKey('i', StrCat(static_cast<int64_t>(d)));
      }
      return TaggedKey('f', FormatFloat(d));
    }
    default:
      return absl::InvalidArgumentError(key.is_tuple()
                                            ? std::string("a tuple as a dict key is not supported")
                                            : StrCat("unhashable type: '", TypeName(key), "'"));
  }
}

Value KeyValue(const std::string& key) {
  if (key.size() < 2 || key[0] != kKeyTag) return Value::String(key);
  const std::string number = key.substr(2);
  switch (key[1]) {
    case 'n':
      return Value::None();
    case 'b':
      return Value::Bool(number == "1");
    case 'i':
      return Value::Int(std::strtoll(number.c_str(), nullptr, 10));
    default:
      return Value::Float(std::strtod(number.c_str(), nullptr));
  }
}

absl::Status AppendStr(const Value& v, std::string* out, size_t max_bytes) {
  return AppendValue(v, false, out, max_bytes);
}

absl::Status AppendRepr(const Value& v, std::string* out, size_t max_bytes) {
  return AppendValue(v, true, out, max_bytes);
}

absl::Status AppendJson(const Value& v, int indent, std::string* out, size_t max_bytes,
                        bool ascii) {
  return AppendJsonAt(v, indent, 0, out, max_bytes, ascii);
}

bool Equals(const Value& a, const Value& b, int64_t* work) {
  if (--*work < 0) return false;
  using K = Value::Kind;
  if (a.is_number() && b.is_number()) {
    if (a.kind() == K::kFloat || b.kind() == K::kFloat) return a.number() == b.number();
    return a.int_value() == b.int_value();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case K::kUndefined:
    case K::kNone:
      return true;
    case K::kString:
      *work -= static_cast<int64_t>(std::min(a.str().size(), b.str().size()) / 256);
      return &a.str() == &b.str() || a.str() == b.str();
    case K::kList: {
      if (a.is_tuple() != b.is_tuple() || a.list().size() != b.list().size()) return false;
      for (size_t i = 0; i < a.list().size(); ++i) {
        if (!Equals(a.list()[i], b.list()[i], work)) return false;
      }
      return true;
    }
    case K::kDict: {
      if (a.dict().size() != b.dict().size()) return false;
      for (const auto& [k, v] : a.dict()) {
        const Value* other = b.Find(k);
        if (other == nullptr || !Equals(v, *other, work)) return false;
      }
      return true;
    }
    case K::kNamespace:
      return &a.ns() == &b.ns();
    case K::kCallable:
      return &a.callable() == &b.callable();
    default:
      return false;
  }
}

absl::StatusOr<int> Compare(const Value& a, const Value& b, int64_t* work) {
  if (--*work < 0) return 0;
  if (a.is_number() && b.is_number()) {
    if (a.kind() == Value::Kind::kFloat || b.kind() == Value::Kind::kFloat) {
      return a.number() < b.number() ? -1 : a.number() > b.number() ? 1 : 0;
    }
    return a.int_value() < b.int_value() ? -1 : a.int_value() > b.int_value() ? 1 : 0;
  }
  if (a.is_string() && b.is_string()) {
    *work -= static_cast<int64_t>(std::min(a.str().size(), b.str().size()) / 256);
    const int c = a.str().compare(b.str());  // UTF-8 byte order is code point order
    return c < 0 ? -1 : c > 0 ? 1 : 0;
  }
  if (a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple()) {
    const ValueList& x = a.list();
    const ValueList& y = b.list();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (Equals(x[i], y[i], work)) continue;
      return Compare(x[i], y[i], work);
    }
    return x.size() < y.size() ? -1 : x.size() > y.size() ? 1 : 0;
  }
  return absl::InvalidArgumentError(
      StrCat("'<' not supported between instances of '", TypeName(a), "' and '", TypeName(b), "'"));
}

}  // namespace tandem::tokenizer::jinja
