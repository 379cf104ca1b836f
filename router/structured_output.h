// StructuredOutputGbnf: a request's structured-output constraint (a JSON Schema, any
// JSON object, a regular expression, a GBNF grammar or a choice list) as the one GBNF
// grammar the workers run.
//
// The grammar is compiled here once, so every bad source is an InvalidArgument naming
// its field ("json_schema: keyword 'not' is not supported") before any worker sees it.
// Pure; thread-safe.
#ifndef TANDEM_ROUTER_STRUCTURED_OUTPUT_H_
#define TANDEM_ROUTER_STRUCTURED_OUTPUT_H_

#include <string>

#include "absl/status/statusor.h"
#include "tandem/v1/generation.pb.h"

namespace tandem::router {

// GBNF for `s.structured_output`; empty when none is set.
absl::StatusOr<std::string> StructuredOutputGbnf(const v1::SamplingParams& s);

}  // namespace tandem::router

#endif  // TANDEM_ROUTER_STRUCTURED_OUTPUT_H_
