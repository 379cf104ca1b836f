// Value: what Jinja expressions evaluate to, with Python's semantics.
//
// Undefined (with the message to raise when it is used where a value is required),
// None, bool, int (int64; overflow is an error, not a bignum), float, str (UTF-8),
// list, dict (string keys, insertion order), namespace and callable (a builtin global
// or a macro). A tuple is a list marked to print as one. Strings, lists and dicts are
// immutable and shared, so copying a Value is cheap; a namespace is the one mutable
// value, and it may not be stored inside a container (so values never form cycles).
// Containers record their nesting depth, which the interpreter bounds (printing and
// comparing recurse on it).
//
// The printing and comparing helpers below take a byte limit or a work budget so a
// hostile template cannot make them run away; they are otherwise plain Python:
// str(), repr(), ==, <, json.dumps(ensure_ascii=False). A namespace belongs to the one
// render that created it; everything else may be shared across threads.
#ifndef TANDEM_COMMON_TOKENIZER_JINJA_VALUE_H_
#define TANDEM_COMMON_TOKENIZER_JINJA_VALUE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace tandem::tokenizer::jinja {

struct Stmt;
class Value;
using ValueList = std::vector<Value>;
// Keys unique, in insertion order. A key is a string's own text, or for the other keys
// Python allows in a template's dict literal (ints, floats, booleans, None: {0: 0, 512:
// 128}) DictKey's encoding of it, which no UTF-8 text can equal.
using ValueDict = std::vector<std::pair<std::string, Value>>;

struct Namespace {
  ValueDict attrs;
};

struct Callable {
  std::string name;             // a builtin global ("range"), or the macro's name
  const Stmt* macro = nullptr;  // the macro definition (owned by the parsed template)
};

class Value {
 public:
  enum class Kind {
    kUndefined,
    kNone,
    kBool,
    kInt,
    kFloat,
    kString,
    kList,
    kDict,
    kNamespace,
    kCallable,
    // What jinja2's map, select, reject, selectattr, rejectattr and items filters return:
    // a Python generator. It iterates (and `list` makes a list of it), but it is always
    // true, has no len(), no index, and is not JSON serializable.
    kGenerator
  };

  Value() = default;  // undefined
  static Value Undefined(std::string hint);
  static Value None() { return Value(nullptr); }
  static Value Bool(bool b) { return Value(b); }
  static Value Int(int64_t i) { return Value(i); }
  static Value Float(double d) { return Value(d); }
  static Value String(std::string s);
  // markupsafe's Markup: a str (is_string(), str()) that the `safe` and `escape` filters
  // make; `Markup + str` and `str + Markup` HTML-escape the plain side (& < > " ').
  static Value Markup(std::string s);
  static Value List(ValueList items, bool tuple = false);
  static Value Dict(ValueDict items);
  static Value NewNamespace(ValueDict attrs);
  static Value Function(std::string name, const Stmt* macro = nullptr);
  static Value Generator(ValueList items);

  Kind kind() const { return static_cast<Kind>(v_.index()); }
  bool is_undefined() const { return kind() == Kind::kUndefined; }
  bool is_none() const { return kind() == Kind::kNone; }
  bool is_string() const { return kind() == Kind::kString; }
  bool is_markup() const { return is_string() && std::get<StrPtr>(v_)->markup; }
  bool is_list() const { return kind() == Kind::kList; }
  bool is_dict() const { return kind() == Kind::kDict; }
  bool is_tuple() const { return is_list() && std::get<ListPtr>(v_)->tuple; }
  // bool is a number, as in Python.
  bool is_number() const {
    return kind() == Kind::kBool || kind() == Kind::kInt || kind() == Kind::kFloat;
  }
  bool is_integer() const { return kind() == Kind::kBool || kind() == Kind::kInt; }

  // Each accessor requires the matching kind.
  bool bool_value() const { return std::get<bool>(v_); }
  int64_t int_value() const;  // bool or int
  double number() const;      // bool, int or float
  const std::string& str() const { return *std::get<StrPtr>(v_); }
  const ValueList& list() const { return std::get<ListPtr>(v_)->items; }
  const ValueDict& dict() const { return std::get<DictPtr>(v_)->items; }
  Namespace& ns() const { return *std::get<NsPtr>(v_); }
  const Callable& callable() const { return *std::get<FnPtr>(v_); }
  const ValueList& generated() const { return std::get<GenPtr>(v_).items->items; }
  // The error an undefined raises when used ("'x' is undefined").
  std::string undefined_hint() const;

  // Container nesting: 0 for scalars, 1 for a flat list, ...
  int depth() const;
  // A dict's (or namespace's) entry, or null.
  const Value* Find(std::string_view key) const;

 private:
  struct UndefinedTag {
    std::shared_ptr<const std::string> hint;
  };
  template <typename T>
  struct Box {
    T items;
    int depth = 0;
    bool tuple = false;
  };
  struct StrBox : std::string {
    bool markup = false;
  };
  using StrPtr = std::shared_ptr<const StrBox>;
  using ListPtr = std::shared_ptr<const Box<ValueList>>;
  using DictPtr = std::shared_ptr<const Box<ValueDict>>;
  using NsPtr = std::shared_ptr<Namespace>;
  using FnPtr = std::shared_ptr<const Callable>;
  struct GenPtr {
    ListPtr items;
  };
  using Storage = std::variant<UndefinedTag, std::nullptr_t, bool, int64_t, double, StrPtr, ListPtr,
                               DictPtr, NsPtr, FnPtr, GenPtr>;

  template <typename T>
  explicit Value(T v) : v_(std::move(v)) {}
  Storage v_;
};

// The ValueDict key of `key`: a string's text; an int, bool, float or None as a byte
// 0xFF (never in UTF-8), its kind and its number, so 2 and 2.0 are one key, as in Python
// (True and 1 are two here, one there). InvalidArgument for other values (lists and
// dicts are unhashable; tuples not supported).
absl::StatusOr<std::string> DictKey(const Value& key);
// The value a ValueDict key stands for (the inverse of DictKey; 2.0 reads as 2).
Value KeyValue(const std::string& key);

// markupsafe.escape's text: & < > " ' as &amp; &lt; &gt; &#34; &#39;.
std::string HtmlEscape(std::string_view s);

// Python truthiness: undefined, None, False, 0, 0.0, "", [] and {} are false.
bool Truthy(const Value& v);
// "str", "int", "list", "dict", "NoneType", ... as Python's type(v).__name__.
std::string TypeName(const Value& v);
// repr(float): the shortest round-trip digits, "1.0", "1e+16", "inf".
std::string FormatFloat(double d);

// str(v) and repr(v) appended to `out`; ResourceExhausted once `out` passes max_bytes.
absl::Status AppendStr(const Value& v, std::string* out, size_t max_bytes);
absl::Status AppendRepr(const Value& v, std::string* out, size_t max_bytes);
// json.dumps(v, ensure_ascii=ascii, indent=indent) (indent < 0: none), as the `tojson`
// filter of Hugging Face transformers. Undefined, namespaces and callables are errors.
absl::Status AppendJson(const Value& v, int indent, std::string* out, size_t max_bytes,
                        bool ascii = false);

// a == b (1 == 1.0 == True; dicts ignore order). Each element and each 256 bytes
// compared spend one unit of *work; comparison stops (returning false) once it is < 0.
bool Equals(const Value& a, const Value& b, int64_t* work);
// a < b, a == b or a > b as -1, 0, 1; InvalidArgument where Python raises TypeError.
absl::StatusOr<int> Compare(const Value& a, const Value& b, int64_t* work);

}  // namespace tandem::tokenizer::jinja

#endif  // TANDEM_COMMON_TOKENIZER_JINJA_VALUE_H_
