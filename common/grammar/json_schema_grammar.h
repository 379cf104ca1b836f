// JsonSchemaToGbnf: a JSON Schema as the GBNF grammar of the JSON texts it accepts.
//
// Supported: type (one or a list), properties, required, additionalProperties (a
// schema, true or false; when absent, no properties beyond `properties`, as OpenAI's
// and xgrammar's strict mode do: the output is valid either way), items, prefixItems,
// minItems, maxItems, enum, const, anyOf, oneOf (as anyOf: a value valid for two
// branches is possible), allOf with one member, $ref into $defs / definitions or "#"
// (recursion allowed), string pattern (search semantics, RegexToGbnf's dialect),
// minLength, maxLength, format (date, time, date-time, uuid; other formats are
// annotations and ignored), integer minimum / maximum / exclusiveMinimum /
// exclusiveMaximum, the same on numbers when the bounds are integers. Annotations
// (title, description, default, examples, $schema, $id, $comment, deprecated,
// readOnly, writeOnly) are ignored. Any other keyword is refused with an
// InvalidArgument that names it and where it is ("properties.age.multipleOf").
//
// Properties come in the order `properties` lists them, each required one present;
// whitespace between tokens is bounded (at most one newline and 20 indentation
// characters), so a model cannot fill its budget with spaces. Pure; thread-safe.
#ifndef TANDEM_COMMON_GRAMMAR_JSON_SCHEMA_GRAMMAR_H_
#define TANDEM_COMMON_GRAMMAR_JSON_SCHEMA_GRAMMAR_H_

#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace tandem::grammar {

// GBNF whose `root` rule accepts exactly the JSON texts valid under the schema
// `schema_json` (JSON text, parsed here so that the order of `properties` is kept),
// within the limits above.
absl::StatusOr<std::string> JsonSchemaToGbnf(std::string_view schema_json);

// Several schemas in one grammar (tool calling: one per function). JsonSchemaRules gives
// rules that define `rule` as the schema's JSON texts, every helper rule named
// "<rule>-..."; JsonBaseRules() gives the rules they share (value, object, string, ws,
// ...), to be added once per grammar. The caller writes `root`. Same limits and errors.
absl::StatusOr<std::string> JsonSchemaRules(std::string_view schema_json, std::string_view rule);
std::string JsonBaseRules();

// GBNF whose `root` accepts any JSON value (response_format {"type": "json_object"}
// asks for an object: `object_only`).
std::string AnyJsonGbnf(bool object_only);

}  // namespace tandem::grammar

#endif  // TANDEM_COMMON_GRAMMAR_JSON_SCHEMA_GRAMMAR_H_
