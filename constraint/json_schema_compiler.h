// JSON Schema (the draft 2020-12 subset of docs/structured_output.md) and "any JSON object"
// compiled to grammars whose every text is a JSON document the schema accepts. A keyword outside
// the subset is refused with the path of the schema that holds it, never ignored.
//
// Choices a schema leaves open, made the same way every time: members are written in the order
// of `properties` with optional ones skippable; an object schema with `properties` and no
// `additionalProperties` allows no other members (OpenAI's strict mode); whitespace is at most
// one space after ':' and ','; numbers have at most 16 digits before and after the point.
#ifndef WALSH_CONSTRAINT_JSON_SCHEMA_COMPILER_H_
#define WALSH_CONSTRAINT_JSON_SCHEMA_COMPILER_H_

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "constraint/grammar.h"

namespace walsh {

inline constexpr int kMaxSchemaDepth = 64;  // nesting of the schema's own JSON text

absl::StatusOr<Grammar> JsonSchemaGrammar(absl::string_view schema_json);
// The schema's rules added to `grammar` (as EBNF's %json does), as one element.
absl::StatusOr<GrammarElement> AddJsonSchema(Grammar& grammar, absl::string_view schema_json);
absl::StatusOr<Grammar> JsonObjectGrammar();  // any JSON object

}  // namespace walsh

#endif  // WALSH_CONSTRAINT_JSON_SCHEMA_COMPILER_H_
