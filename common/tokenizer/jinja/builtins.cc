// Filters: abs, capitalize, count, d, default, e, escape, first, float, int, items, join, last,
//   length, list, lower, map, max, min, reject, rejectattr, replace, safe, select,
//   selectattr, string, title, tojson (ensure_ascii too), trim, upper. map, select,
//   reject, selectattr, rejectattr and items give a generator, as in jinja2.
// Tests: boolean, callable, defined, divisibleby, eq/equalto/==, even, false, float,
//   ge/>=, gt/>, in, integer, iterable, le/<=, lower, lt/<, mapping, ne/!=, none,
//   number, odd, sameas, sequence, string, true, undefined, upper.
// str methods: capitalize, count, endswith, find, format, join, lower, lstrip, replace,
//   rstrip, split, startswith, strip, title, upper. dict methods: get, items, keys, values.
//   list methods: count, index.
// Globals: dict, namespace, range (raise_exception lives in the interpreter).
// Dict keys may be numbers and None as well as strings (jinja::DictKey).
#include "common/tokenizer/jinja/builtins.h"

#include <charconv>
#include <cmath>
#include <cstdlib>

#include "absl/status/status.h"
#include "common/tokenizer/jinja/py_string.h"
#include "common/util/status_macros.h"
#include "common/util/strings.h"

namespace tandem::tokenizer::jinja {

const Value* CallArgs::Get(size_t index, std::string_view name) const {
  if (index < positional.size()) return &positional[index];
  for (const auto& [k, v] : keyword) {
    if (k == name) return &v;
  }
  return nullptr;
}

namespace {

absl::Status TypeError(std::string_view what) {
  return absl::InvalidArgumentError(std::string(what));
}

// jinja2 names an object in messages as "'str object'" (None as just "None").
std::string ObjectName(const Value& v) {
  return v.is_none() ? "None" : StrCat("'", TypeName(v), " object'");
}

absl::StatusOr<std::string> ToStr(const Value& v, Budget* budget) {
  if (v.is_string()) return v.str();
  std::string out;
  RETURN_IF_ERROR(AppendStr(v, &out, budget->limits().max_output_bytes));
  return out;
}

absl::StatusOr<const std::string*> StringArg(const CallArgs& args, size_t i, std::string_view name,
                                             bool required = true) {
  const Value* v = args.Get(i, name);
  if (v == nullptr || v->is_none()) {
    if (!required) return nullptr;
    return TypeError(StrCat("missing argument '", name, "'"));
  }
  if (!v->is_string()) return TypeError(StrCat("argument '", name, "' must be a string"));
  return &v->str();
}

absl::StatusOr<int64_t> IntArg(const CallArgs& args, size_t i, std::string_view name,
                               int64_t dflt) {
  const Value* v = args.Get(i, name);
  if (v == nullptr || v->is_none()) return dflt;
  if (!v->is_integer()) return TypeError(StrCat("argument '", name, "' must be an integer"));
  return v->int_value();
}

// str.replace(old, new, count): the size is checked before the string is built.
absl::StatusOr<Value> Replace(std::string_view s, std::string_view from, std::string_view to,
                              int64_t count, Budget* budget) {
  std::vector<size_t> at;  // where each replaced occurrence starts
  if (from.empty()) {
    at = py::CodePointOffsets(s);  // Python inserts `to` around every character
  } else {
    for (size_t i = s.find(from); i != std::string_view::npos; i = s.find(from, i + from.size())) {
      at.push_back(i);
    }
  }
  if (count >= 0 && static_cast<size_t>(count) < at.size()) at.resize(static_cast<size_t>(count));
  RETURN_IF_ERROR(budget->CheckSize(s.size() + at.size() * to.size()));
  RETURN_IF_ERROR(budget->SpendBytes(s.size() + at.size() * to.size()));
  std::string out;
  size_t prev = 0;
  for (size_t i : at) {
    out.append(s.substr(prev, i - prev)).append(to);
    prev = i + from.size();
  }
  out.append(s.substr(std::min(prev, s.size())));
  return Value::String(std::move(out));
}

absl::StatusOr<Value> Join(const ValueList& items, std::string_view sep, Budget* budget) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out.append(sep);
    RETURN_IF_ERROR(AppendStr(items[i], &out, budget->limits().max_output_bytes));
  }
  RETURN_IF_ERROR(budget->SpendBytes(out.size()));
  return Value::String(std::move(out));
}

// A character of `s` by code point index (negative from the end), or undefined.
Value CharAt(std::string_view s, int64_t index) {
  const std::vector<size_t> offsets = py::CodePointOffsets(s);
  const auto n = static_cast<int64_t>(offsets.size()) - 1;
  if (index < 0) index += n;
  if (index < 0 || index >= n) return Value::Undefined("string index out of range");
  const auto i = static_cast<size_t>(index);
  return Value::String(std::string(s.substr(offsets[i], offsets[i + 1] - offsets[i])));
}

// Python's int(str) and float(str), surrounding whitespace allowed.
bool ParseInt(std::string_view s, int64_t* out) {
  s = py::Strip(s, true, true);
  std::string digits(s);
  std::erase(digits, '_');
  const char* b = digits.data();
  if (!digits.empty() && digits[0] == '+') ++b;
  const char* e = digits.data() + digits.size();
  return b != e && std::from_chars(b, e, *out).ptr == e;
}
bool ParseFloat(std::string_view s, double* out) {
  const std::string t(py::Strip(s, true, true));
  char* end = nullptr;
  *out = std::strtod(t.c_str(), &end);
  return !t.empty() && end == t.c_str() + t.size();
}

// Follows a dotted path ("function.name", "0") as jinja2's attribute filters do.
Value GetPath(const Value& item, std::string_view path) {
  Value v = item;
  for (const std::string& part : py::Split(path, ".", -1)) {
    int64_t index = 0;
    if (v.is_list() && ParseInt(part, &index)) {
      v = index >= 0 && index < static_cast<int64_t>(v.list().size())
              ? v.list()[static_cast<size_t>(index)]
              : Value();
    } else if (!v.is_undefined()) {
      v = GetAttribute(v, part);
    }
  }
  return v;
}

// select / reject / selectattr / rejectattr: items whose (attribute's) test result
// is `keep`; with no test named, their truthiness.
absl::StatusOr<Value> FilterItems(const Value& seq, const CallArgs& args, bool by_attribute,
                                  bool keep, Budget* budget) {
  if (!Truthy(seq)) return Value::Generator({});  // jinja2 iterates only a true value
  ASSIGN_OR_RETURN(ValueList items, Iterate(seq, budget));
  CallArgs test_args;
  size_t first = 0;
  std::string attribute;
  if (by_attribute) {
    ASSIGN_OR_RETURN(const std::string* a, StringArg(args, 0, "attribute"));
    attribute = *a;
    first = 1;
  }
  std::string test;
  if (args.positional.size() > first) {
    if (!args.positional[first].is_string()) return TypeError("the test name must be a string");
    test = args.positional[first].str();
    test_args.positional.assign(args.positional.begin() + static_cast<long>(first) + 1,
                                args.positional.end());
  }
  ValueList out;
  for (const Value& item : items) {
    const Value subject = by_attribute ? GetPath(item, attribute) : item;
    bool pass = Truthy(subject);
    if (!test.empty()) {
      ASSIGN_OR_RETURN(pass, ApplyTest(test, subject, test_args, budget));
    }
    if (pass == keep) out.push_back(item);
  }
  return Value::Generator(std::move(out));
}

absl::StatusOr<Value> Map(const Value& seq, const CallArgs& args, Budget* budget) {
  if (!Truthy(seq)) return Value::Generator({});  // as select: jinja2 maps only a true value
  ASSIGN_OR_RETURN(ValueList items, Iterate(seq, budget));
  ValueList out;
  if (const Value* attr = args.Get(99, "attribute"); attr != nullptr) {
    if (!attr->is_string()) return TypeError("map: attribute must be a string");
    const Value* dflt = args.Get(99, "default");
    for (const Value& item : items) {
      Value v = GetPath(item, attr->str());
      out.push_back(v.is_undefined() && dflt != nullptr ? *dflt : v);
    }
    return Value::Generator(std::move(out));
  }
  ASSIGN_OR_RETURN(const std::string* filter, StringArg(args, 0, "filter"));
  CallArgs rest;
  rest.positional.assign(args.positional.begin() + 1, args.positional.end());
  for (const Value& item : items) {
    ASSIGN_OR_RETURN(Value v, ApplyFilter(*filter, item, rest, budget));
    out.push_back(std::move(v));
  }
  return Value::Generator(std::move(out));
}

absl::StatusOr<Value> Length(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return Value::Int(0);
    case Value::Kind::kString:
      return Value::Int(static_cast<int64_t>(py::Length(v.str())));
    case Value::Kind::kList:
      return Value::Int(static_cast<int64_t>(v.list().size()));
    case Value::Kind::kDict:
      return Value::Int(static_cast<int64_t>(v.dict().size()));
    default:
      return TypeError(StrCat("object of type '", TypeName(v), "' has no len()"));
  }
}

// str.format: "{}" and "{0}" take the positional arguments, "{name}" the keyword ones,
// each as str() gives it; "{{" and "}}" are braces. Conversions (!r) and format specs
// (:>8) are refused, not guessed.
absl::StatusOr<Value> Format(const std::string& s, const CallArgs& args, Budget* budget) {
  const size_t max_bytes = budget->limits().max_output_bytes;
  std::string out;
  size_t next_auto = 0;
  bool manual = false;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if ((c == '{' || c == '}') && i + 1 < s.size() && s[i + 1] == c) {
      out.push_back(c);
      ++i;
      continue;
    }
    if (c == '}') return absl::InvalidArgumentError("Single '}' encountered in format string");
    if (c != '{') {
      out.push_back(c);
      continue;
    }
    const size_t close = s.find('}', i + 1);
    if (close == std::string::npos) {
      return absl::InvalidArgumentError("Single '{' encountered in format string");
    }
    const std::string field = s.substr(i + 1, close - i - 1);
    if (field.find_first_of("!:[.{") != std::string::npos) {
      return TypeError(StrCat("format: the field '{", field, "}' is not supported"));
    }
    const Value* arg = nullptr;
    int64_t index = 0;
    if ((field.empty() && manual) ||
        (!field.empty() && field[0] >= '0' && field[0] <= '9' && next_auto > 0)) {
      return absl::InvalidArgumentError(
          "cannot switch between automatic field numbering and manual field specification");
    }
    if (field.empty()) {
      arg = next_auto < args.positional.size() ? &args.positional[next_auto] : nullptr;
      if (arg == nullptr) {
        return absl::InvalidArgumentError(
            StrCat("Replacement index ", next_auto, " out of range for positional args tuple"));
      }
      ++next_auto;
    } else if (ParseInt(field, &index)) {
      manual = true;
      if (index < 0 || static_cast<size_t>(index) >= args.positional.size()) {
        return absl::InvalidArgumentError(
            StrCat("Replacement index ", index, " out of range for positional args tuple"));
      }
      arg = &args.positional[static_cast<size_t>(index)];
    } else {
      for (const auto& [k, v] : args.keyword) {
        if (k == field) arg = &v;
      }
      if (arg == nullptr) return absl::InvalidArgumentError(StrCat("'", field, "'"));
    }
    RETURN_IF_ERROR(AppendStr(*arg, &out, max_bytes));
    i = close;
  }
  RETURN_IF_ERROR(budget->SpendBytes(out.size()));
  return Value::String(std::move(out));
}

// jinja2's `title` filter (not str.title()): a word starts after whitespace or one of -({[<.
std::string TitleFilter(std::string_view s) {
  std::string out;
  bool word_start = true;
  size_t len = 0;
  for (size_t i = 0; i < s.size(); i += len) {
    const uint32_t cp = py::DecodeAt(s, i, &len);
    const std::string_view c = s.substr(i, len);
    out += word_start ? py::Upper(c) : py::Lower(c);
    word_start = py::IsSpace(cp) ||
                 (cp < 0x80 &&
                  std::string_view("-({[<").find(static_cast<char>(cp)) != std::string_view::npos);
  }
  return out;
}

Value Items(const ValueDict& dict) {
  ValueList pairs;
  for (const auto& [k, v] : dict) {
    pairs.push_back(Value::List({KeyValue(k), v}, /*tuple=*/true));
  }
  return Value::List(std::move(pairs));
}

// jinja2's indent(width=4, first=False, blank=False): lines after the first (and the
// first too with `first`) get `width` spaces, or the string `width`; blank lines stay
// blank unless `blank`. Lines end where Python's str.splitlines() ends them.
absl::StatusOr<Value> Indent(const std::string& s, const CallArgs& args, Budget* budget) {
  std::string pad = "    ";
  if (const Value* w = args.Get(0, "width"); w != nullptr) {
    if (w->is_string()) {
      pad = w->str();
    } else if (w->is_integer()) {
      pad.assign(static_cast<size_t>(std::clamp<int64_t>(w->int_value(), 0, 256)), ' ');
    } else {
      return TypeError("indent: width must be an int or a string");
    }
  }
  const Value* first = args.Get(1, "first");
  const Value* blank = args.Get(2, "blank");
  // str.splitlines() on s + "\n" (jinja2 appends one so a trailing newline is kept).
  std::vector<std::string> lines;
  const std::string t = s + "\n";
  size_t start = 0;
  for (size_t i = 0; i < t.size();) {
    size_t len = 0;  // the line break at i, in bytes
    const unsigned char c = t[i];
    if (c == '\r') {
      len = i + 1 < t.size() && t[i + 1] == '\n' ? 2 : 1;
    } else if (c == '\n' || c == 0x0b || c == 0x0c || c == 0x1c || c == 0x1d || c == 0x1e) {
      len = 1;
    } else if (c == 0xc2 && i + 1 < t.size() && static_cast<unsigned char>(t[i + 1]) == 0x85) {
      len = 2;
    } else if (c == 0xe2 && i + 2 < t.size() && static_cast<unsigned char>(t[i + 1]) == 0x80 &&
               (static_cast<unsigned char>(t[i + 2]) == 0xa8 ||
                static_cast<unsigned char>(t[i + 2]) == 0xa9)) {
      len = 3;
    }
    if (len == 0) {
      ++i;
      continue;
    }
    lines.push_back(t.substr(start, i - start));
    i += len;
    start = i;
  }
  if (start < t.size()) lines.push_back(t.substr(start));
  std::string out;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i > 0) out += '\n';
    if (i > 0 && (!lines[i].empty() || (blank != nullptr && Truthy(*blank)))) out += pad;
    out += lines[i];
  }
  if (first != nullptr && Truthy(*first)) out = pad + out;
  RETURN_IF_ERROR(budget->SpendBytes(out.size()));
  return Value::String(std::move(out));
}

}  // namespace

Value GetAttribute(const Value& obj, std::string_view name) {
  if (const Value* v = obj.Find(name)) return *v;
  return Value::Undefined(StrCat(ObjectName(obj), " has no attribute '", name, "'"));
}

absl::StatusOr<ValueList> Iterate(const Value& v, Budget* budget) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return ValueList{};
    case Value::Kind::kList:
      return v.list();
    case Value::Kind::kGenerator:
      return v.generated();
    case Value::Kind::kDict: {
      ValueList keys;
      for (const auto& [k, item] : v.dict()) keys.push_back(KeyValue(k));
      return keys;
    }
    case Value::Kind::kString: {
      RETURN_IF_ERROR(budget->Spend(static_cast<int64_t>(v.str().size())));
      const std::vector<size_t> offsets = py::CodePointOffsets(v.str());
      ValueList chars;
      for (size_t i = 0; i + 1 < offsets.size(); ++i) {
        chars.push_back(Value::String(v.str().substr(offsets[i], offsets[i + 1] - offsets[i])));
      }
      return chars;
    }
    default:
      return TypeError(StrCat("'", TypeName(v), "' object is not iterable"));
  }
}

absl::StatusOr<Value> ApplyFilter(std::string_view name, const Value& v, const CallArgs& args,
                                  Budget* budget) {
  const size_t max_bytes = budget->limits().max_output_bytes;
  if (name == "safe" || name == "escape" || name == "e") {
    // Markup(str(v)), or markupsafe.escape(v): a Markup stays as it is.
    if (v.is_markup()) return v;
    std::string text;
    RETURN_IF_ERROR(AppendStr(v, &text, max_bytes));
    RETURN_IF_ERROR(budget->SpendBytes(text.size()));
    return Value::Markup(name == "safe" ? text : HtmlEscape(text));
  }
  if (name == "default" || name == "d") {
    const Value* dflt = args.Get(0, "default_value");
    const Value* boolean = args.Get(1, "boolean");
    const bool use_default =
        v.is_undefined() || (boolean != nullptr && Truthy(*boolean) && !Truthy(v));
    return use_default ? (dflt != nullptr ? *dflt : Value::String("")) : v;
  }
  if (name == "length" || name == "count") return Length(v);
  if (name == "tojson") {
    for (const auto& [k, unused] : args.keyword) {
      if (k != "indent" && k != "ensure_ascii") {
        return TypeError(StrCat("tojson: '", k, "' is not supported"));
      }
    }
    const Value* ascii = args.Get(99, "ensure_ascii");
    ASSIGN_OR_RETURN(const int64_t indent, IntArg(args, 0, "indent", -1));
    std::string out;
    RETURN_IF_ERROR(AppendJson(v, static_cast<int>(std::min<int64_t>(indent, 1 << 16)), &out,
                               max_bytes, ascii != nullptr && Truthy(*ascii)));
    RETURN_IF_ERROR(budget->SpendBytes(out.size()));
    return Value::String(std::move(out));
  }
  if (name == "items") {  // a generator in jinja2, as map and select
    if (v.is_undefined()) return Value::Generator({});
    if (!v.is_dict()) return TypeError("Can only get item pairs from a mapping.");
    return Value::Generator(Items(v.dict()).list());
  }
  if (name == "dictsort") {
    // jinja2's dictsort(case_sensitive=False, by='key', reverse=False): the (key, value)
    // pairs, sorted stably by key or value, strings compared lowercased unless
    // case_sensitive.
    if (!v.is_dict()) return TypeError("dictsort: can only sort a mapping");
    const Value* cs = args.Get(0, "case_sensitive");
    const bool case_sensitive = cs != nullptr && Truthy(*cs);
    ASSIGN_OR_RETURN(const std::string* by, StringArg(args, 1, "by", false));
    if (by != nullptr && *by != "key" && *by != "value") {
      return TypeError("You can only sort by either 'key' or 'value'");
    }
    const size_t at = by != nullptr && *by == "value" ? 1 : 0;
    const Value* rev = args.Get(2, "reverse");
    const bool reverse = rev != nullptr && Truthy(*rev);
    ValueList pairs = Items(v.dict()).list();
    auto key = [&](const Value& pair) {
      const Value& k = pair.list()[at];
      return !case_sensitive && k.is_string() ? Value::String(py::Lower(k.str())) : k;
    };
    absl::Status error;
    std::stable_sort(pairs.begin(), pairs.end(), [&](const Value& a, const Value& b) {
      if (!error.ok()) return false;
      absl::StatusOr<int> c = Compare(key(a), key(b), budget->steps_left());
      if (!c.ok()) {
        error = c.status();
        return false;
      }
      return reverse ? *c > 0 : *c < 0;
    });
    RETURN_IF_ERROR(error);
    RETURN_IF_ERROR(budget->Check());
    return Value::List(std::move(pairs));
  }
  if (name == "list") {
    ASSIGN_OR_RETURN(ValueList items, Iterate(v, budget));
    return Value::List(std::move(items));
  }
  if (name == "min" || name == "max") {
    // jinja2's min/max(case_sensitive=False, attribute=None): the first least (greatest)
    // item, strings compared lowercased unless case_sensitive.
    ASSIGN_OR_RETURN(ValueList items, Iterate(v, budget));
    if (items.empty()) return Value::Undefined("No aggregated item, sequence was empty.");
    const Value* cs = args.Get(0, "case_sensitive");
    const bool case_sensitive = cs != nullptr && Truthy(*cs);
    ASSIGN_OR_RETURN(const std::string* attribute, StringArg(args, 1, "attribute", false));
    auto key = [&](const Value& item) {
      Value k = attribute != nullptr ? GetPath(item, *attribute) : item;
      return !case_sensitive && k.is_string() ? Value::String(py::Lower(k.str())) : k;
    };
    size_t best = 0;
    for (size_t i = 1; i < items.size(); ++i) {
      ASSIGN_OR_RETURN(const int c, Compare(key(items[i]), key(items[best]), budget->steps_left()));
      if (name == "min" ? c < 0 : c > 0) best = i;
    }
    RETURN_IF_ERROR(budget->Check());
    return items[best];
  }
  if (name == "first" || name == "last") {
    if (v.is_list() || v.is_string()) {
      const int64_t index = name == "first" ? 0 : -1;
      if (v.is_string()) return CharAt(v.str(), index);
      if (!v.list().empty()) return index == 0 ? v.list().front() : v.list().back();
      return Value::Undefined(StrCat("No ", name, " item, sequence was empty."));
    }
    if (name == "last" && v.kind() == Value::Kind::kGenerator) {
      return TypeError("'generator' object is not reversible");
    }
    ASSIGN_OR_RETURN(ValueList items, Iterate(v, budget));
    if (items.empty()) return Value::Undefined(StrCat("No ", name, " item, sequence was empty."));
    return name == "first" ? items.front() : items.back();
  }
  if (name == "join") {
    ASSIGN_OR_RETURN(ValueList items, Iterate(v, budget));
    if (const Value* attr = args.Get(1, "attribute"); attr != nullptr && !attr->is_none()) {
      if (!attr->is_string()) return TypeError("join: attribute must be a string");
      for (Value& item : items) item = GetPath(item, attr->str());
    }
    ASSIGN_OR_RETURN(const std::string* sep, StringArg(args, 0, "d", false));
    return Join(items, sep == nullptr ? "" : *sep, budget);
  }
  if (name == "map") return Map(v, args, budget);
  if (name == "select" || name == "reject") {
    return FilterItems(v, args, false, name == "select", budget);
  }
  if (name == "selectattr" || name == "rejectattr") {
    return FilterItems(v, args, true, name == "selectattr", budget);
  }
  if ((name == "int" || name == "float") && v.is_undefined()) {
    return TypeError(v.undefined_hint());  // int() / float() of an undefined raise in jinja2
  }
  if (name == "int") {
    const Value* dflt = args.Get(0, "default");
    int64_t i = 0;
    double d = 0;
    if (v.is_integer()) return Value::Int(v.int_value());
    if (v.kind() == Value::Kind::kFloat) d = v.number();
    if (v.is_string() && ParseInt(v.str(), &i)) return Value::Int(i);
    if ((v.kind() == Value::Kind::kFloat || (v.is_string() && ParseFloat(v.str(), &d))) &&
        std::isfinite(d) && std::abs(d) < 9.2e18) {
      return Value::Int(static_cast<int64_t>(d));
    }
    return dflt != nullptr ? *dflt : Value::Int(0);
  }
  if (name == "float") {
    double d = 0;
    if (v.is_number()) return Value::Float(v.number());
    if (v.is_string() && ParseFloat(v.str(), &d)) return Value::Float(d);
    const Value* dflt = args.Get(0, "default");
    return dflt != nullptr ? *dflt : Value::Float(0);
  }
  if (name == "abs") {
    if (v.kind() == Value::Kind::kFloat) return Value::Float(std::abs(v.number()));
    if (v.is_integer() && v.int_value() != INT64_MIN) return Value::Int(std::abs(v.int_value()));
    return TypeError(StrCat("bad operand type for abs(): '", TypeName(v), "'"));
  }
  // The rest work on str(v).
  if (name == "string" || name == "trim" || name == "upper" || name == "lower" ||
      name == "capitalize" || name == "title" || name == "replace" || name == "indent") {
    ASSIGN_OR_RETURN(const std::string s, ToStr(v, budget));
    RETURN_IF_ERROR(budget->SpendBytes(s.size()));
    if (name == "string") return Value::String(s);
    if (name == "indent") return Indent(s, args, budget);
    if (name == "upper") return Value::String(py::Upper(s));
    if (name == "lower") return Value::String(py::Lower(s));
    if (name == "capitalize") return Value::String(py::Capitalize(s));
    if (name == "title") return Value::String(TitleFilter(s));
    if (name == "trim") {
      ASSIGN_OR_RETURN(const std::string* chars, StringArg(args, 0, "chars", false));
      return Value::String(std::string(chars == nullptr ? py::Strip(s, true, true)
                                                        : py::StripChars(s, *chars, true, true)));
    }
    ASSIGN_OR_RETURN(const std::string* from, StringArg(args, 0, "old"));
    ASSIGN_OR_RETURN(const std::string* to, StringArg(args, 1, "new"));
    ASSIGN_OR_RETURN(const int64_t count, IntArg(args, 2, "count", -1));
    return Replace(s, *from, *to, count, budget);
  }
  return absl::NotFoundError(StrCat("no filter named '", name, "'"));
}

absl::StatusOr<bool> ApplyTest(std::string_view name, const Value& v, const CallArgs& args,
                               Budget* budget) {
  using K = Value::Kind;
  const Value* arg = args.Get(0, "other");
  auto need_arg = [&]() -> absl::Status {
    return arg != nullptr ? absl::OkStatus()
                          : TypeError(StrCat("the '", name, "' test needs an argument"));
  };
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "string") return v.is_string();
  if (name == "number") return v.is_number();
  if (name == "integer") return v.kind() == K::kInt;
  if (name == "float") return v.kind() == K::kFloat;
  if (name == "boolean") return v.kind() == K::kBool;
  if (name == "true") return v.kind() == K::kBool && v.bool_value();
  if (name == "false") return v.kind() == K::kBool && !v.bool_value();
  if (name == "mapping") return v.is_dict();
  // Like jinja2: undefined is iterable and a sequence (it has __iter__, __len__ and
  // __getitem__); a dict is both too.
  if (name == "iterable" || name == "sequence") {  // a generator iterates, once, unindexed
    return v.is_undefined() || v.is_string() || v.is_list() || v.is_dict() ||
           (name == "iterable" && v.kind() == K::kGenerator);
  }
  if (name == "callable") return v.kind() == K::kCallable;
  if (name == "lower" || name == "upper") {
    if (!v.is_string()) return false;
    return v.str() == (name == "lower" ? py::Lower(v.str()) : py::Upper(v.str()));
  }
  if (name == "odd" || name == "even" || name == "divisibleby") {
    // Python's value % n: `2.5 is odd` is false, not an error.
    const Value two = Value::Int(2);
    const Value* divisor = &two;
    if (name == "divisibleby") {
      RETURN_IF_ERROR(need_arg());
      divisor = arg;
    }
    if (!v.is_number() || !divisor->is_number()) {
      return TypeError(StrCat("the '", name, "' test needs numbers"));
    }
    if (divisor->number() == 0) return TypeError("integer modulo by zero");
    double r = std::fmod(v.number(), divisor->number());
    if (r != 0 && ((r < 0) != (divisor->number() < 0))) r += divisor->number();
    return name == "odd" ? r == 1 : r == 0;
  }
  if (name == "eq" || name == "equalto" || name == "==" || name == "ne" || name == "!=") {
    RETURN_IF_ERROR(need_arg());
    const bool eq = Equals(v, *arg, budget->steps_left());
    RETURN_IF_ERROR(budget->Check());
    return (name == "ne" || name == "!=") ? !eq : eq;
  }
  if (name == "lt" || name == "<" || name == "le" || name == "<=" || name == "gt" || name == ">" ||
      name == "ge" || name == ">=") {
    RETURN_IF_ERROR(need_arg());
    ASSIGN_OR_RETURN(const int c, Compare(v, *arg, budget->steps_left()));
    RETURN_IF_ERROR(budget->Check());
    if (name == "lt" || name == "<") return c < 0;
    if (name == "le" || name == "<=") return c <= 0;
    if (name == "gt" || name == ">") return c > 0;
    return c >= 0;
  }
  if (name == "sameas") {
    RETURN_IF_ERROR(need_arg());
    if (v.kind() != arg->kind()) return false;
    return v.is_none() || v.is_undefined() ||
           (v.kind() == K::kBool && v.bool_value() == arg->bool_value());
  }
  if (name == "in") {
    RETURN_IF_ERROR(need_arg());
    if (arg->is_string()) {
      if (!v.is_string()) return TypeError("'in <string>' requires string as left operand");
      return arg->str().find(v.str()) != std::string::npos;
    }
    if (arg->is_dict()) {
      absl::StatusOr<std::string> key = DictKey(v);
      return key.ok() && arg->Find(*key) != nullptr;
    }
    ASSIGN_OR_RETURN(const ValueList items, Iterate(*arg, budget));
    for (const Value& item : items) {
      if (Equals(v, item, budget->steps_left())) return true;
    }
    RETURN_IF_ERROR(budget->Check());
    return false;
  }
  return absl::NotFoundError(StrCat("no test named '", name, "'"));
}

absl::StatusOr<Value> CallMethod(const Value& self, std::string_view name, const CallArgs& args,
                                 Budget* budget) {
  if (self.is_dict()) {
    if (name == "items") return Items(self.dict());
    if (name == "keys" || name == "values") {
      ValueList out;
      for (const auto& [k, v] : self.dict()) out.push_back(name == "keys" ? KeyValue(k) : v);
      return Value::List(std::move(out));
    }
    if (name == "get") {
      const Value* key_arg = args.Get(0, "key");
      if (key_arg == nullptr) return TypeError("get() takes at least 1 argument");
      ASSIGN_OR_RETURN(const std::string key, DictKey(*key_arg));
      const Value* v = self.Find(key);
      const Value* dflt = args.Get(1, "default");
      return v != nullptr ? *v : dflt != nullptr ? *dflt : Value::None();
    }
  }
  if (self.is_list() && (name == "count" || name == "index")) {
    const Value* x = args.Get(0, "value");
    if (x == nullptr) return TypeError(StrCat(name, "() takes exactly one argument"));
    int64_t count = 0;
    for (size_t i = 0; i < self.list().size(); ++i) {
      if (!Equals(self.list()[i], *x, budget->steps_left())) continue;
      if (name == "index") return Value::Int(static_cast<int64_t>(i));
      ++count;
    }
    RETURN_IF_ERROR(budget->Check());
    if (name == "index") return TypeError("list.index(x): x not in list");
    return Value::Int(count);
  }
  if (self.is_list() || self.is_dict()) {
    for (std::string_view mutator : {"append", "extend", "insert", "pop", "remove", "clear", "sort",
                                     "reverse", "update", "setdefault", "popitem"}) {
      if (name == mutator) {
        return absl::PermissionDeniedError(
            StrCat("access to attribute '", name, "' of '", TypeName(self), "' object is unsafe."));
      }
    }
  }
  if (!self.is_string()) return absl::NotFoundError(std::string(name));
  const std::string& s = self.str();
  RETURN_IF_ERROR(budget->SpendBytes(s.size()));
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    const bool left = name != "rstrip", right = name != "lstrip";
    ASSIGN_OR_RETURN(const std::string* chars, StringArg(args, 0, "chars", false));
    return Value::String(std::string(chars == nullptr ? py::Strip(s, left, right)
                                                      : py::StripChars(s, *chars, left, right)));
  }
  if (name == "upper") return Value::String(py::Upper(s));
  if (name == "lower") return Value::String(py::Lower(s));
  if (name == "title") return Value::String(py::Title(s));
  if (name == "format") return Format(s, args, budget);
  if (name == "capitalize") return Value::String(py::Capitalize(s));
  if (name == "startswith" || name == "endswith") {
    const Value* arg = args.Get(0, "prefix");
    if (arg == nullptr) return TypeError(StrCat(name, "() takes at least 1 argument"));
    const ValueList candidates = arg->is_list() ? arg->list() : ValueList{*arg};
    for (const Value& c : candidates) {
      if (!c.is_string()) return TypeError(StrCat(name, "() arguments must be strings"));
      const std::string& p = c.str();
      if (p.size() <= s.size() &&
          s.compare(name == "startswith" ? 0 : s.size() - p.size(), p.size(), p) == 0) {
        return Value::Bool(true);
      }
    }
    return Value::Bool(false);
  }
  if (name == "split") {
    ASSIGN_OR_RETURN(const std::string* sep, StringArg(args, 0, "sep", false));
    if (sep != nullptr && sep->empty()) return TypeError("empty separator");
    ASSIGN_OR_RETURN(const int64_t maxsplit, IntArg(args, 1, "maxsplit", -1));
    ValueList parts;
    for (std::string& p : py::Split(s, sep == nullptr ? "" : *sep, maxsplit)) {
      parts.push_back(Value::String(std::move(p)));
    }
    RETURN_IF_ERROR(budget->Spend(static_cast<int64_t>(parts.size())));
    return Value::List(std::move(parts));
  }
  if (name == "replace") {
    ASSIGN_OR_RETURN(const std::string* from, StringArg(args, 0, "old"));
    ASSIGN_OR_RETURN(const std::string* to, StringArg(args, 1, "new"));
    ASSIGN_OR_RETURN(const int64_t count, IntArg(args, 2, "count", -1));
    return Replace(s, *from, *to, count, budget);
  }
  if (name == "join") {
    const Value* seq = args.Get(0, "iterable");
    if (seq == nullptr) return TypeError("join() takes exactly one argument");
    ASSIGN_OR_RETURN(ValueList items, Iterate(*seq, budget));
    for (const Value& item : items) {
      if (!item.is_string()) {
        return TypeError(
            StrCat("sequence item: expected str instance, ", TypeName(item), " found"));
      }
    }
    return Join(items, s, budget);
  }
  if (name == "find" || name == "count") {
    ASSIGN_OR_RETURN(const std::string* sub, StringArg(args, 0, "sub"));
    if (name == "find") {
      const size_t at = s.find(*sub);
      return Value::Int(
          at == std::string::npos ? -1 : static_cast<int64_t>(py::Length(s.substr(0, at))));
    }
    if (sub->empty()) return Value::Int(static_cast<int64_t>(py::Length(s)) + 1);
    int64_t n = 0;
    for (size_t i = s.find(*sub); i != std::string::npos; i = s.find(*sub, i + sub->size())) ++n;
    return Value::Int(n);
  }
  return absl::NotFoundError(std::string(name));
}

bool IsGlobalFunction(std::string_view name) {
  return name == "range" || name == "namespace" || name == "dict";
}

absl::StatusOr<Value> CallGlobalFunction(std::string_view name, const CallArgs& args,
                                         Budget* budget) {
  if (name == "range") {
    // jinja2's sandbox caps ranges at 100000 items.
    int64_t bounds[3] = {0, 0, 1};
    const size_t n = args.positional.size();
    if (n < 1 || n > 3 || !args.keyword.empty()) return TypeError("range() takes 1 to 3 arguments");
    for (size_t i = 0; i < n; ++i) {
      if (!args.positional[i].is_integer()) return TypeError("range() arguments must be integers");
      bounds[n == 1 ? 1 : i] = args.positional[i].int_value();
    }
    const auto [start, stop, step] = bounds;
    if (step == 0) return TypeError("range() arg 3 must not be zero");
    const double count =
        std::max(0.0, std::ceil((static_cast<double>(stop) - static_cast<double>(start)) /
                                static_cast<double>(step)));
    if (count > 100000) {
      return absl::ResourceExhaustedError("range too big: the sandbox allows 100000 items");
    }
    RETURN_IF_ERROR(budget->Spend(static_cast<int64_t>(count)));
    ValueList out;
    for (int64_t i = 0; i < static_cast<int64_t>(count); ++i) {
      out.push_back(Value::Int(start + i * step));
    }
    return Value::List(std::move(out));
  }
  // namespace(mapping?, **kwargs) and dict(mapping?, **kwargs).
  ValueDict attrs;
  if (!args.positional.empty()) {
    if (args.positional.size() > 1 || !args.positional[0].is_dict()) {
      return TypeError(StrCat(name, "() takes at most one mapping argument"));
    }
    attrs = args.positional[0].dict();
  }
  for (const auto& [k, v] : args.keyword) {
    bool replaced = false;
    for (auto& [ek, ev] : attrs) {
      if (ek == k) ev = v, replaced = true;
    }
    if (!replaced) attrs.emplace_back(k, v);
  }
  return name == "namespace" ? Value::NewNamespace(std::move(attrs))
                             : Value::Dict(std::move(attrs));
}

}  // namespace tandem::tokenizer::jinja
