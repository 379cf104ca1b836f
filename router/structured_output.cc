#include "router/structured_output.h"

#include "common/grammar/grammar.h"
#include "common/grammar/json_schema_grammar.h"
#include "common/grammar/regex_grammar.h"
#include "common/util/field_error.h"
#include "common/util/strings.h"
#include "common/util/utf8.h"

namespace tandem::router {
namespace {

constexpr size_t kMaxSourceBytes = 256 << 10;
constexpr int kMaxChoices = 1024;

absl::Status Bad(std::string_view field, std::string_view why) { return FieldError(field, why); }

}  // namespace

absl::StatusOr<std::string> StructuredOutputGbnf(const v1::SamplingParams& s) {
  std::string field, gbnf;
  switch (s.structured_output_case()) {
    case v1::SamplingParams::STRUCTURED_OUTPUT_NOT_SET:
      return std::string();
    case v1::SamplingParams::kJsonObject:
      if (!s.json_object()) return std::string();
      return grammar::AnyJsonGbnf(/*object_only=*/true);
    case v1::SamplingParams::kJsonSchema:
    case v1::SamplingParams::kRegex:
    case v1::SamplingParams::kGrammar: {
      const bool schema = s.has_json_schema(), regex = s.has_regex();
      field = schema ? "json_schema" : regex ? "regex" : "grammar";
      const std::string& source = schema ? s.json_schema() : regex ? s.regex() : s.grammar();
      if (source.size() > kMaxSourceBytes) {
        return Bad(field, StrCat("is longer than ", kMaxSourceBytes, " bytes"));
      }
      absl::StatusOr<std::string> out = source;
      if (schema) out = grammar::JsonSchemaToGbnf(source);
      if (regex) {
        out = grammar::RegexToGbnf(source);
        if (out.ok()) out = StrCat("root ::= ", *out, "\n");
      }
      if (!out.ok()) return Bad(field, std::string(out.status().message()));
      gbnf = *std::move(out);
      break;
    }
    case v1::SamplingParams::kChoice: {
      field = "choice";
      const auto& choices = s.choice().choices();
      if (choices.empty()) return Bad(field, "needs at least one string");
      if (choices.size() > kMaxChoices)
        return Bad(field, StrCat("at most ", kMaxChoices, " strings"));
      size_t total = 0;
      gbnf = "root ::= ";
      for (int i = 0; i < choices.size(); ++i) {
        const std::string& c = choices[i];
        if (c.empty()) return Bad(field, StrCat("choice ", i, " is empty"));
        if (!utf8::IsValid(c)) return Bad(field, StrCat("choice ", i, " is not valid UTF-8"));
        total += c.size();
        if (total > kMaxSourceBytes)
          return Bad(field, StrCat("is longer than ", kMaxSourceBytes, " bytes"));
        gbnf += StrCat(i ? " | " : "", grammar::GbnfLiteral(c));
      }
      gbnf += "\n";
      break;
    }
  }
  if (auto g = grammar::Grammar::Compile(gbnf); !g.ok())
    return Bad(field, std::string(g.status().message()));
  return gbnf;
}

}  // namespace tandem::router
