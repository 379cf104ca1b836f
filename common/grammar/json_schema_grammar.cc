#include "common/grammar/json_schema_grammar.h"

#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <set>

#include "absl/container/flat_hash_map.h"
#include "common/grammar/code_point_set.h"
#include "common/grammar/grammar.h"
#include "common/grammar/regex_grammar.h"
#include "common/util/status_macros.h"
#include "common/util/strings.h"
#include "common/util/utf8.h"
#include "nlohmann/json.hpp"

namespace tandem::grammar {
namespace {

using json = nlohmann::ordered_json;

constexpr int kMaxCount = 1000;                    // minItems/maxItems/minLength/maxLength
constexpr int64_t kMaxBound = 999999999999999999;  // 18 digits
constexpr int kMaxDepth = 64;                      // JSON nesting of a schema
constexpr int kMaxMembers = 4096;                  // members of one object of a schema
constexpr size_t kMaxPrefixItems = 100;

// The building blocks every schema grammar may use.
constexpr std::string_view kBaseRules = R"gbnf(ws ::= | " " | "\n" [ \t]{0,20}
value ::= object | array | string | number | "true" | "false" | "null"
object ::= "{" ws (string ws ":" ws value ws ("," ws string ws ":" ws value ws)*)? "}"
array ::= "[" ws (value ws ("," ws value ws)*)? "]"
string ::= "\"" char* "\""
number ::= "-"? ("0" | [1-9] [0-9]{0,15}) ("." [0-9]{1,16})? ([eE] [-+]? [0-9]{1,2})?
integer ::= "0" | "-"? [1-9] [0-9]{0,15}
keychar ::= [^"\\\x00-\x1F] | "\\" ["\\bfnrt]
boolean ::= "true" | "false"
null ::= "null"
)gbnf";

const std::set<std::string_view>& Annotations() {
  static const std::set<std::string_view> k = {
      "title",    "description", "default",  "examples",  "$schema", "$id",
      "$comment", "deprecated",  "readOnly", "writeOnly", "$defs",   "definitions"};
  return k;
}
const std::set<std::string_view>& Supported() {
  static const std::set<std::string_view> k = {"type",
                                               "properties",
                                               "required",
                                               "additionalProperties",
                                               "items",
                                               "prefixItems",
                                               "minItems",
                                               "maxItems",
                                               "enum",
                                               "const",
                                               "anyOf",
                                               "oneOf",
                                               "allOf",
                                               "$ref",
                                               "pattern",
                                               "minLength",
                                               "maxLength",
                                               "format",
                                               "minimum",
                                               "maximum",
                                               "exclusiveMinimum",
                                               "exclusiveMaximum"};
  return k;
}

// No alternatives at all is an empty class, which matches nothing (Grammar::Compile
// drops it, or refuses a grammar left with nothing).
std::string Alternatives(const std::vector<std::string>& alts) {
  if (alts.empty()) return "[^\\x00-\\U0010FFFF]";
  if (alts.size() == 1) return alts[0];
  std::string out = "(";
  for (size_t i = 0; i < alts.size(); ++i) out += (i ? " | " : "") + alts[i];
  return out + ")";
}

// Equal-length decimal strings lo ≤ hi: every number between them, digit by digit.
std::string SameLength(const std::string& lo, const std::string& hi) {
  if (lo == hi) return GbnfLiteral(lo);
  if (lo.size() == 1) return StrCat("[", lo, "-", hi, "]");
  if (lo[0] == hi[0])
    return StrCat("\"", std::string(1, lo[0]), "\" ", SameLength(lo.substr(1), hi.substr(1)));
  const size_t rest = lo.size() - 1;
  const bool lo_zeros = lo.find_first_not_of('0', 1) == std::string::npos;
  const bool hi_nines = hi.find_first_not_of('9', 1) == std::string::npos;
  std::vector<std::string> alts;
  char mid_lo = static_cast<char>(lo[0] + 1), mid_hi = static_cast<char>(hi[0] - 1);
  if (lo_zeros) {
    mid_lo = lo[0];
  } else {
    alts.push_back(StrCat("\"", std::string(1, lo[0]), "\" ",
                          SameLength(lo.substr(1), std::string(rest, '9'))));
  }
  if (hi_nines) mid_hi = hi[0];
  if (mid_lo <= mid_hi) {
    alts.push_back(
        StrCat("[", std::string(1, mid_lo), "-", std::string(1, mid_hi), "] [0-9]{", rest, "}"));
  }
  if (!hi_nines) {
    alts.push_back(StrCat("\"", std::string(1, hi[0]), "\" ",
                          SameLength(std::string(rest, '0'), hi.substr(1))));
  }
  return Alternatives(alts);
}

// Decimal spellings (no leading zeros) of the integers in [lo, hi], 0 ≤ lo;
// hi = nullopt: unbounded (up to 18 digits).
std::string NonNegativeRange(int64_t lo, std::optional<int64_t> hi) {
  std::vector<std::string> alts;
  if (hi && *hi > kMaxBound) hi = kMaxBound;  // 18 digits at most, as unbounded numbers
  if (lo > kMaxBound || (hi && lo > *hi)) return Alternatives(alts);
  const std::string los = std::to_string(lo);
  const size_t max_len = hi ? std::to_string(*hi).size() : 18;
  for (size_t len = los.size(); len <= max_len; ++len) {
    const int64_t first = len == 1 ? 0 : static_cast<int64_t>(std::pow(10, len - 1));
    const int64_t last = static_cast<int64_t>(std::pow(10, len)) - 1;
    const int64_t a = std::max(lo, first);
    const int64_t b = hi ? std::min(*hi, last) : last;
    if (a > b) continue;
    if (!hi && a == first && len > los.size()) {  // every longer number
      alts.push_back(StrCat("[1-9] [0-9]{", len - 1, ",", max_len - 1, "}"));
      break;
    }
    alts.push_back(SameLength(std::to_string(a), std::to_string(b)));
  }
  return Alternatives(alts);
}

// Integers in [lo, hi]; either side may be open.
std::string IntegerRange(std::optional<int64_t> lo, std::optional<int64_t> hi) {
  std::vector<std::string> alts;
  if (!lo || *lo < 0) {  // negatives: "-" and a magnitude in [max(1, -hi), -lo]
    const int64_t m_lo = hi && *hi < 0 ? -*hi : 1;
    std::optional<int64_t> m_hi;
    if (lo) m_hi = -*lo;
    if (!m_hi || m_lo <= *m_hi) alts.push_back("\"-\" " + NonNegativeRange(m_lo, m_hi));
  }
  if (!hi || *hi >= 0) {
    alts.push_back(NonNegativeRange(lo ? std::max<int64_t>(*lo, 0) : 0, hi));
  }
  return Alternatives(alts);
}

// Non-negative numbers between integer bounds, as (integer part, fraction) pieces:
// lo ≤ v (or lo < v), v ≤ hi (or v < hi); hi nullopt = open.
void NonNegativeNumber(int64_t lo, bool lo_exclusive, std::optional<int64_t> hi, bool hi_exclusive,
                       std::vector<std::string>* alts) {
  const std::string any_frac = "(\".\" [0-9]{1,16})?";
  const std::string zero_frac = "(\".\" \"0\"{1,16})?";
  const std::string nonzero_frac = "\".\" \"0\"{0,15} [1-9] [0-9]{0,15}";
  const int64_t any_lo = lo_exclusive ? lo + 1 : lo;
  std::optional<int64_t> any_hi;
  if (hi) any_hi = *hi - 1;
  if (!any_hi || any_lo <= *any_hi) {
    alts->push_back(StrCat(NonNegativeRange(any_lo, any_hi), " ", any_frac));
  }
  if (lo_exclusive && (!hi || lo < *hi)) {
    alts->push_back(StrCat(GbnfLiteral(std::to_string(lo)), " ", nonzero_frac));
  }
  if (hi && !hi_exclusive && *hi >= any_lo) {
    alts->push_back(StrCat(GbnfLiteral(std::to_string(*hi)), " ", zero_frac));
  }
}

class SchemaCompiler {
 public:
  // Helper rules are named "<prefix>-<hint>-<n>".
  SchemaCompiler(const json& root, std::string prefix) : root_(root), prefix_(std::move(prefix)) {}

  // `rule ::= ...` and its helper rules (not the base rules).
  absl::StatusOr<std::string> Run(std::string_view rule) {
    ASSIGN_OR_RETURN(std::string expr, Visit(root_, "schema"));
    std::string out = StrCat(rule, " ::= ", expr, "\n");
    for (const auto& [name, body] : rules_) out += StrCat(name, " ::= ", body, "\n");
    return out;
  }

 private:
  absl::Status Error(std::string_view where, std::string_view what) const {
    return absl::InvalidArgumentError(StrCat("json schema: ", where, ": ", what));
  }

  std::string NewRule(std::string_view hint) {
    std::string name;
    for (char c : hint) name += std::isalnum(static_cast<unsigned char>(c)) ? c : '-';
    if (name.size() > 40) name.resize(40);
    return StrCat(prefix_, "-", name, "-", ++counter_);
  }
  std::string Define(std::string_view hint, std::string body) {
    std::string name = NewRule(hint);
    rules_.push_back({name, std::move(body)});
    return name;
  }

  absl::StatusOr<const json*> Resolve(std::string_view ref, std::string_view where) const {
    if (!ref.starts_with("#"))
      return Error(where, StrCat("$ref '", ref, "' is not local (\"#...\")"));
    const json* at = &root_;
    std::string_view path = ref.substr(1);
    while (!path.empty()) {
      if (path[0] != '/') return Error(where, StrCat("$ref '", ref, "' is not a JSON pointer"));
      path.remove_prefix(1);
      const size_t slash = path.find('/');
      const std::string_view raw = path.substr(0, slash);
      path = slash == std::string_view::npos ? std::string_view() : path.substr(slash);
      std::string token;  // ~1 is "/", ~0 is "~"
      for (size_t i = 0; i < raw.size(); ++i) {
        if (raw[i] == '~' && i + 1 < raw.size() && (raw[i + 1] == '0' || raw[i + 1] == '1')) {
          token += raw[++i] == '1' ? '/' : '~';
        } else {
          token += raw[i];
        }
      }
      if (!at->is_object() || !at->contains(token)) {
        return Error(where, StrCat("$ref '", ref, "' points at nothing"));
      }
      at = &at->at(token);
    }
    return at;
  }

  absl::StatusOr<int64_t> Count(const json& s, const char* key, std::string_view where) const {
    const json& v = s.at(key);
    if (!v.is_number_integer() || v.get<int64_t>() < 0) {
      return Error(where, StrCat(key, " must be a non-negative integer"));
    }
    if (v.get<int64_t>() > kMaxCount) {
      return Error(where, StrCat(key, " above ", kMaxCount, " is not supported"));
    }
    return v.get<int64_t>();
  }

  // A minimum and an optional maximum count (items or characters), checked.
  absl::StatusOr<std::pair<int64_t, std::optional<int64_t>>> Counts(const json& s,
                                                                    const char* min_key,
                                                                    const char* max_key,
                                                                    std::string_view where) const {
    std::pair<int64_t, std::optional<int64_t>> out{0, std::nullopt};
    if (s.contains(min_key)) {
      ASSIGN_OR_RETURN(out.first, Count(s, min_key, where));
    }
    if (s.contains(max_key)) {
      ASSIGN_OR_RETURN(out.second, Count(s, max_key, where));
    }
    if (out.second && *out.second < out.first) {
      return Error(where, StrCat(max_key, " is below ", min_key));
    }
    return out;
  }

  absl::StatusOr<std::string> Visit(const json& s, const std::string& where) {
    if (++depth_ > 64) return Error(where, "schemas nested more than 64 deep");
    auto result = VisitInner(s, where);
    --depth_;
    return result;
  }

  absl::StatusOr<std::string> VisitInner(const json& s, const std::string& where) {
    if (s.is_boolean()) {
      if (s.get<bool>()) return std::string("value");
      return Error(where, "the schema false accepts nothing");
    }
    if (!s.is_object()) return Error(where, "a schema must be an object or a boolean");
    for (const auto& [key, v] : s.items()) {
      if (!Supported().contains(key) && !Annotations().contains(key)) {
        return Error(where, StrCat("keyword '", key, "' is not supported"));
      }
    }
    if (s.contains("$ref")) {
      for (const auto& [key, v] : s.items()) {
        if (key != "$ref" && !Annotations().contains(key)) {
          return Error(where, StrCat("'", key, "' beside $ref is not supported"));
        }
      }
      if (!s.at("$ref").is_string()) return Error(where, "$ref must be a string");
      const std::string ref = s.at("$ref").get<std::string>();
      if (auto it = refs_.find(ref); it != refs_.end()) return it->second;
      ASSIGN_OR_RETURN(const json* target, Resolve(ref, where));
      const std::string name = NewRule(ref);
      refs_[ref] = name;
      ASSIGN_OR_RETURN(std::string body, Visit(*target, ref));
      rules_.push_back({name, body});
      return name;
    }
    if (s.contains("const")) return GbnfLiteral(s.at("const").dump());
    if (s.contains("enum")) {
      const json& e = s.at("enum");
      if (!e.is_array() || e.empty()) return Error(where, "enum must be a non-empty array");
      std::vector<std::string> alts;
      for (const json& v : e) alts.push_back(GbnfLiteral(v.dump()));
      return Alternatives(alts);
    }
    for (const char* key : {"anyOf", "oneOf", "allOf"}) {
      if (!s.contains(key)) continue;
      const json& list = s.at(key);
      if (!list.is_array() || list.empty())
        return Error(where, StrCat(key, " must be a non-empty array"));
      for (const auto& [k, v] : s.items()) {
        if (k != key && !Annotations().contains(k)) {
          return Error(where, StrCat("'", k, "' beside ", key, " is not supported"));
        }
      }
      if (std::string_view(key) == "allOf" && list.size() != 1) {
        return Error(where, "allOf with more than one schema is not supported");
      }
      std::vector<std::string> alts;
      for (size_t i = 0; i < list.size(); ++i) {
        ASSIGN_OR_RETURN(std::string alt, Visit(list[i], StrCat(where, ".", key, "[", i, "]")));
        alts.push_back(std::move(alt));
      }
      return Alternatives(alts);
    }

    std::vector<std::string> types;
    if (s.contains("type")) {
      const json& t = s.at("type");
      if (t.is_string()) {
        types.push_back(t.get<std::string>());
      } else if (t.is_array() && !t.empty()) {
        for (const json& x : t) {
          if (!x.is_string()) return Error(where, "type must be a string or a list of strings");
          types.push_back(x.get<std::string>());
        }
      } else {
        return Error(where, "type must be a string or a list of strings");
      }
    } else if (s.contains("properties") || s.contains("additionalProperties") ||
               s.contains("required")) {
      types.push_back("object");
    } else if (s.contains("items") || s.contains("prefixItems") || s.contains("minItems") ||
               s.contains("maxItems")) {
      types.push_back("array");
    } else if (s.contains("pattern") || s.contains("minLength") || s.contains("maxLength") ||
               s.contains("format")) {
      types.push_back("string");
    } else if (s.contains("minimum") || s.contains("maximum") || s.contains("exclusiveMinimum") ||
               s.contains("exclusiveMaximum")) {
      types.push_back("number");
    } else {
      return std::string("value");
    }
    std::vector<std::string> alts;
    for (const std::string& type : types) {
      if (type == "object") {
        ASSIGN_OR_RETURN(std::string a, Object(s, where));
        alts.push_back(a);
      } else if (type == "array") {
        ASSIGN_OR_RETURN(std::string a, Array(s, where));
        alts.push_back(a);
      } else if (type == "string") {
        ASSIGN_OR_RETURN(std::string a, String(s, where));
        alts.push_back(a);
      } else if (type == "number" || type == "integer") {
        ASSIGN_OR_RETURN(std::string a, Number(s, where, type == "integer"));
        alts.push_back(a);
      } else if (type == "boolean") {
        alts.push_back("boolean");
      } else if (type == "null") {
        alts.push_back("null");
      } else {
        return Error(where, StrCat("type '", type, "' is not a JSON Schema type"));
      }
    }
    return Alternatives(alts);
  }

  absl::StatusOr<std::string> Object(const json& s, const std::string& where) {
    struct Property {
      std::string name;
      const json* schema;
      bool required;
    };
    std::vector<Property> props;
    const json* additional = nullptr;  // nullptr: no other properties
    if (s.contains("additionalProperties")) {
      const json& a = s.at("additionalProperties");
      if (!(a.is_boolean() && !a.get<bool>())) additional = &a;
    }
    // The other properties' value, compiled once however many names use it.
    std::string additional_value;
    if (additional != nullptr) {
      ASSIGN_OR_RETURN(additional_value,
                       Visit(*additional, StrCat(where, ".additionalProperties")));
    }
    std::set<std::string> required;
    if (s.contains("required")) {
      const json& r = s.at("required");
      if (!r.is_array()) return Error(where, "required must be an array of strings");
      for (const json& x : r) {
        if (!x.is_string()) return Error(where, "required must be an array of strings");
        required.insert(x.get<std::string>());
      }
    }
    if (s.contains("properties")) {
      const json& p = s.at("properties");
      if (!p.is_object()) return Error(where, "properties must be an object");
      for (const auto& [name, sub] : p.items())
        props.push_back({name, &sub, required.contains(name)});
    }
    for (const std::string& name : required) {
      bool listed = false;
      for (const Property& p : props) listed = listed || p.name == name;
      if (listed) continue;
      if (additional == nullptr) {
        return Error(where, StrCat("required property '", name,
                                   "' is not in properties and no other properties are allowed"));
      }
      props.push_back({name, nullptr, true});  // nullptr: additional_value
    }
    std::vector<std::string> kv;
    for (const Property& p : props) {
      std::string value = additional_value;
      if (p.schema != nullptr) {
        ASSIGN_OR_RETURN(value, Visit(*p.schema, StrCat(where, ".properties.", p.name)));
      }
      kv.push_back(StrCat(GbnfLiteral(json(p.name).dump()), " ws \":\" ws ", value));
    }
    std::string extra_kv;
    if (additional != nullptr) {
      std::vector<std::string> names;
      for (const Property& p : props) names.push_back(p.name);
      extra_kv = StrCat(KeyExcept(names), " ws \":\" ws ", additional_value);
    }
    // rest[i]: properties i.. after at least one was written; first[i]: before any.
    const size_t n = props.size();
    std::vector<std::string> rest(n + 1), first(n + 1);
    rest[n] = extra_kv.empty() ? "\"\"" : Define("rest", StrCat("(ws \",\" ws ", extra_kv, ")*"));
    first[n] = extra_kv.empty()
                   ? "\"\""
                   : Define("first", StrCat("(", extra_kv, " (ws \",\" ws ", extra_kv, ")*)?"));
    for (size_t i = n; i-- > 0;) {
      const std::string with = StrCat("ws \",\" ws ", kv[i], " ", rest[i + 1]);
      rest[i] = Define(props[i].name, props[i].required ? with : StrCat(with, " | ", rest[i + 1]));
      const std::string lead = StrCat(kv[i], " ", rest[i + 1]);
      first[i] =
          Define(props[i].name, props[i].required ? lead : StrCat(lead, " | ", first[i + 1]));
    }
    return Define("object", StrCat("\"{\" ws ", first[0], " ws \"}\""));
  }

  // A JSON string spelled with keychar (one spelling per string) that is none of
  // `names`: a trie over the names' spelled characters, leaving it at any other one.
  std::string KeyExcept(const std::vector<std::string>& names) {
    if (names.empty()) return "\"\\\"\" keychar* \"\\\"\"";
    struct Node {
      std::map<std::string, int> next;  // spelled character → node
      bool terminal = false;
    };
    std::vector<Node> trie(1);
    for (const std::string& name : names) {
      int at = 0;
      bool spellable = true;
      std::vector<std::string> units;
      for (size_t i = 0; i < name.size();) {
        size_t len = 0;
        const uint32_t cp = utf8::DecodeCodepoint(std::string_view(name).substr(i), &len);
        if (len == 0) {
          spellable = false;
          break;
        }
        const std::string unit = json(name.substr(i, len)).dump();  // "\"x\"" with escapes
        units.push_back(unit.substr(1, unit.size() - 2));
        if (cp < 0x20 && units.back().starts_with("\\u")) spellable = false;
        i += len;
      }
      if (!spellable) continue;  // keychar never spells it
      for (const std::string& u : units) {
        auto it = trie[at].next.find(u);
        if (it == trie[at].next.end()) {
          trie[at].next[u] = static_cast<int>(trie.size());
          at = static_cast<int>(trie.size());
          trie.emplace_back();
        } else {
          at = it->second;
        }
      }
      trie[at].terminal = true;
    }
    std::vector<std::string> rule(trie.size());
    for (size_t n = 0; n < trie.size(); ++n) rule[n] = NewRule("key");
    for (size_t n = 0; n < trie.size(); ++n) {
      std::vector<std::string> alts;
      CodePointSet plain = CodePointSet({{0x20, CodePointSet::kMax}})
                               .Minus(CodePointSet({{'"', '"'}, {'\\', '\\'}}));
      std::string escapes = "\"\\bfnrt";  // the letters after a backslash
      for (const auto& [unit, child] : trie[n].next) {
        alts.push_back(StrCat(GbnfLiteral(unit), " ", rule[child]));
        if (unit.size() == 2 && unit[0] == '\\') {
          escapes.erase(escapes.find(unit[1]), 1);
        } else {
          size_t len = 0;
          const uint32_t cp = utf8::DecodeCodepoint(unit, &len);
          plain = plain.Minus(CodePointSet({{cp, cp}}));
        }
      }
      std::vector<std::string> other;
      if (!plain.Empty()) other.push_back(plain.GbnfClass());
      if (!escapes.empty()) {
        std::string cls = "[";
        for (char c : escapes)
          cls += c == '"' || c == '\\' ? StrCat("\\", std::string(1, c)) : std::string(1, c);
        other.push_back(StrCat("\"\\\\\" ", cls, "]"));
      }
      if (!other.empty()) alts.push_back(StrCat(Alternatives(other), " keychar* \"\\\"\""));
      if (!trie[n].terminal) alts.push_back("\"\\\"\"");
      rules_.push_back({rule[n], Alternatives(alts)});
    }
    return StrCat("\"\\\"\" ", rule[0]);
  }

  absl::StatusOr<std::string> Array(const json& s, const std::string& where) {
    ASSIGN_OR_RETURN(auto bounds, Counts(s, "minItems", "maxItems", where));
    const int64_t min = bounds.first;
    std::optional<int64_t> max = bounds.second;
    std::vector<std::string> prefix;
    if (s.contains("prefixItems")) {
      const json& p = s.at("prefixItems");
      if (!p.is_array()) return Error(where, "prefixItems must be an array");
      if (p.size() > kMaxPrefixItems) {
        return Error(where, StrCat("prefixItems with more than ", kMaxPrefixItems,
                                   " schemas is not supported"));
      }
      for (size_t i = 0; i < p.size(); ++i) {
        ASSIGN_OR_RETURN(std::string e, Visit(p[i], StrCat(where, ".prefixItems[", i, "]")));
        prefix.push_back(e);
      }
    }
    std::string item = "value";
    bool items_allowed = true;
    if (s.contains("items")) {
      const json& it = s.at("items");
      if (it.is_boolean() && !it.get<bool>()) {
        items_allowed = false;
      } else {
        ASSIGN_OR_RETURN(item, Visit(it, where + ".items"));
      }
    }
    const int64_t k = static_cast<int64_t>(prefix.size());
    if (!items_allowed) max = max ? std::min<int64_t>(*max, k) : k;
    if (max && *max < min) return Error(where, "minItems is more than the items allowed");
    // tail(i): elements i.. (i ≥ 1), each after a comma.
    std::function<std::string(int64_t)> tail = [&](int64_t i) -> std::string {
      if (max && i >= *max) return "\"\"";
      if (i >= k) {
        const int64_t need = std::max<int64_t>(0, min - i);
        return StrCat("(ws \",\" ws ", item, "){", need, ",", max ? std::to_string(*max - i) : "",
                      "}");
      }
      const std::string elem = StrCat("ws \",\" ws ", prefix[i], " ", tail(i + 1));
      return i < min ? StrCat("(", elem, ")") : StrCat("(", elem, ")?");
    };
    std::string body;
    if (max && *max == 0) {
      body = "\"[\" ws \"]\"";
    } else {
      const std::string first = StrCat(k > 0 ? prefix[0] : item, " ", tail(1));
      body = StrCat("\"[\" ws ", min > 0 ? StrCat("(", first, ")") : StrCat("(", first, ")?"),
                    " ws \"]\"");
    }
    return Define("array", body);
  }

  absl::StatusOr<std::string> String(const json& s, const std::string& where) {
    const bool lengths = s.contains("minLength") || s.contains("maxLength");
    if (s.contains("pattern")) {
      if (lengths)
        return Error(where, "pattern together with minLength/maxLength is not supported");
      if (!s.at("pattern").is_string()) return Error(where, "pattern must be a string");
      RegexOptions o;
      o.json_string = true;
      o.search = true;
      auto body = RegexToGbnf(s.at("pattern").get<std::string>(), o);
      if (!body.ok()) return Error(where + ".pattern", std::string(body.status().message()));
      return Define("pattern", StrCat("\"\\\"\" ", *body, " \"\\\"\""));
    }
    if (s.contains("format") && s.at("format").is_string() && !lengths) {
      static const absl::flat_hash_map<std::string, std::string> kFormats = {
          // Calendar dates only (RFC 3339 full-date, as Python's date.fromisoformat reads
          // it): 30 days in April, June, September and November, 28 in February and the
          // 29th only in leap years (year % 4 == 0 and, for a year ending in 00,
          // year % 400 == 0), no year 0000.
          {"date",
           R"gbnf((("000" [1-9] | "00" [1-9] [0-9] | "0" [1-9] [0-9]{2} | [1-9] [0-9]{3}) "-" (("0" [13578] | "1" [02]) "-" ("0" [1-9] | [12] [0-9] | "3" [01]) | ("0" [469] | "11") "-" ("0" [1-9] | [12] [0-9] | "30") | "02-" ("0" [1-9] | "1" [0-9] | "2" [0-8])) | ([0-9]{2} ("0" [48] | [2468] [048] | [13579] [26]) | ("0" [48] | [2468] [048] | [13579] [26]) "00") "-02-29"))gbnf"},
          {"time",
           R"gbnf(([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9] ":" [0-5] [0-9] ("." [0-9]{1,9})? ("Z" | [+-] ([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9]))gbnf"},
          {"uuid",
           R"gbnf([0-9a-f]{8} "-" [0-9a-f]{4} "-" [0-9a-f]{4} "-" [0-9a-f]{4} "-" [0-9a-f]{12})gbnf"},
      };
      const std::string f = s.at("format").get<std::string>();
      std::string body;
      if (f == "date-time") {
        body = StrCat("(", kFormats.at("date"), ") \"T\" (", kFormats.at("time"), ")");
      } else if (auto it = kFormats.find(f); it != kFormats.end()) {
        body = it->second;
      }
      if (!body.empty()) return Define(f, StrCat("\"\\\"\" ", body, " \"\\\"\""));
    }
    if (!lengths) return std::string("string");
    ASSIGN_OR_RETURN(auto bounds, Counts(s, "minLength", "maxLength", where));
    const int64_t min = bounds.first;
    const std::optional<int64_t> max = bounds.second;
    return Define("string", StrCat("\"\\\"\" char{", min, ",", max ? std::to_string(*max) : "",
                                   "} \"\\\"\""));
  }

  absl::StatusOr<std::string> Number(const json& s, const std::string& where, bool integer) {
    // Bounds: (value, exclusive).
    // Bounds (value, exclusive), as long double: exact for every 18-digit integer.
    std::optional<std::pair<long double, bool>> lo, hi;
    for (const char* key : {"minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"}) {
      if (!s.contains(key)) continue;
      const json& v = s.at(key);
      if (!v.is_number()) return Error(where, StrCat(key, " must be a number"));
      // Integers exactly (a double holds only 53 bits); at most 18 digits either way.
      const bool in_range = v.is_number_integer()
                                ? (v.is_number_unsigned() ? v.get<uint64_t>() <= uint64_t{kMaxBound}
                                                          : v.get<int64_t>() >= -kMaxBound &&
                                                                v.get<int64_t>() <= kMaxBound)
                                : std::fabs(v.get<double>()) < 1e17;
      if (!in_range) return Error(where, StrCat(key, " beyond 18 digits is not supported"));
      const long double x = v.is_number_unsigned()  ? static_cast<long double>(v.get<uint64_t>())
                            : v.is_number_integer() ? static_cast<long double>(v.get<int64_t>())
                                                    : static_cast<long double>(v.get<double>());
      const bool exclusive = std::string_view(key).starts_with("exclusive");
      auto& bound = std::string_view(key).find("inimum") != std::string_view::npos ? lo : hi;
      // The tighter of minimum / exclusiveMinimum (or maxima) wins.
      const bool tighter =
          !bound || (&bound == &lo ? (x > bound->first || (x == bound->first && exclusive))
                                   : (x < bound->first || (x == bound->first && exclusive)));
      if (tighter) bound = std::pair{x, exclusive};
    }
    if (!lo && !hi) return std::string(integer ? "integer" : "number");
    if (integer) {
      std::optional<int64_t> a, b;
      if (lo)
        a = static_cast<int64_t>(lo->second ? std::floor(lo->first) + 1 : std::ceil(lo->first));
      if (hi)
        b = static_cast<int64_t>(hi->second ? std::ceil(hi->first) - 1 : std::floor(hi->first));
      if (a && b && *a > *b) return Error(where, "no integer lies between the bounds");
      return Define("integer", IntegerRange(a, b));
    }
    for (const auto& bound : {lo, hi}) {
      if (bound && bound->first != std::floor(bound->first)) {
        return Error(where, "number bounds that are not integers are not supported");
      }
    }
    std::vector<std::string> alts;
    // Negative values: the magnitude m = -v, bounded by -hi (below) and -lo (above).
    if (!lo || lo->first < 0) {
      int64_t m_lo = 0;
      bool m_lo_exclusive = true;  // v < 0 means m > 0
      if (hi && hi->first < 0) {
        m_lo = static_cast<int64_t>(-hi->first);
        m_lo_exclusive = hi->second;
      }
      std::optional<int64_t> m_hi;
      bool m_hi_exclusive = false;
      if (lo) {
        m_hi = static_cast<int64_t>(-lo->first);
        m_hi_exclusive = lo->second;
      }
      std::vector<std::string> neg;
      NonNegativeNumber(m_lo, m_lo_exclusive, m_hi, m_hi_exclusive, &neg);
      for (const std::string& a : neg) alts.push_back("\"-\" " + a);
    }
    if (!hi || hi->first >= 0) {
      const bool from_zero = !lo || lo->first < 0;
      std::optional<int64_t> b;
      if (hi) b = static_cast<int64_t>(hi->first);
      NonNegativeNumber(from_zero ? 0 : static_cast<int64_t>(lo->first),
                        from_zero ? false : lo->second, b, hi ? hi->second : false, &alts);
    }
    if (alts.empty()) return Error(where, "no number lies between the bounds");
    return Define("number", Alternatives(alts));
  }

  const json& root_;
  const std::string prefix_;
  std::vector<std::pair<std::string, std::string>> rules_;
  absl::flat_hash_map<std::string, std::string> refs_;
  int counter_ = 0;
  int depth_ = 0;
};

}  // namespace

namespace {

// `rule` ::= the schema's texts, helpers named "<prefix>-...".
absl::StatusOr<std::string> CompileSchema(std::string_view schema_json, std::string_view rule,
                                          std::string_view prefix) {
  // Bounded before anything recurses over it: nesting depth, and members per object
  // (an ordered object finds a key by scanning its members).
  struct TooLarge {
    std::string what;
  };
  std::vector<int> members;  // per open object
  const json::parser_callback_t bound = [&](int depth, json::parse_event_t event, json&) {
    if (depth > kMaxDepth) throw TooLarge{StrCat("nests deeper than ", kMaxDepth)};
    if (event == json::parse_event_t::object_start) members.push_back(0);
    if (event == json::parse_event_t::object_end && !members.empty()) members.pop_back();
    if (event == json::parse_event_t::key && !members.empty() && ++members.back() > kMaxMembers) {
      throw TooLarge{StrCat("has an object of more than ", kMaxMembers, " members")};
    }
    return true;
  };
  try {
    const json schema = json::parse(schema_json, bound);
    return SchemaCompiler(schema, std::string(prefix)).Run(rule);
  } catch (const TooLarge& e) {
    return absl::InvalidArgumentError(StrCat("json schema: the schema ", e.what));
  } catch (const json::exception& e) {
    return absl::InvalidArgumentError(StrCat("json schema: ", e.what()));
  }
}

}  // namespace

std::string JsonBaseRules() { return StrCat(kBaseRules, "char ::= ", JsonStringCharGbnf(), "\n"); }

absl::StatusOr<std::string> JsonSchemaToGbnf(std::string_view schema_json) {
  ASSIGN_OR_RETURN(std::string rules, CompileSchema(schema_json, "root", "s"));
  return StrCat(rules, JsonBaseRules());
}

absl::StatusOr<std::string> JsonSchemaRules(std::string_view schema_json, std::string_view rule) {
  return CompileSchema(schema_json, rule, rule);
}

std::string AnyJsonGbnf(bool object_only) {
  return StrCat("root ::= ", object_only ? "object" : "value", "\n", JsonBaseRules());
}

}  // namespace tandem::grammar
