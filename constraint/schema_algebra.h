// Operations on JSON Schemas that let the compiler take more of the language than it writes
// grammars for directly: the intersection of two schemas (what `allOf`, and a `$ref` or
// `anyOf` beside other keywords, mean), and whether a value satisfies a schema (to keep the
// `enum` and `const` values another keyword allows). Both refuse, naming it, a keyword they
// cannot combine or check. docs/structured_output.md.
#ifndef WALSH_CONSTRAINT_SCHEMA_ALGEBRA_H_
#define WALSH_CONSTRAINT_SCHEMA_ALGEBRA_H_

#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace walsh {

using SchemaJson = nlohmann::ordered_json;
// Finds the schema a "$ref" names (only references inside the document).
using SchemaResolver = std::function<absl::StatusOr<const SchemaJson*>(const std::string& ref)>;

// A schema that accepts exactly the values both accept, with `$ref` and `allOf` at its top
// level inlined (references deeper stay references). Unsatisfiable parts become `false`.
absl::StatusOr<SchemaJson> IntersectSchemas(const SchemaJson& a, const SchemaJson& b,
                                            const SchemaResolver& resolve);

// Whether two values are the same JSON value: objects compare without regard to member order
// (a SchemaJson keeps the order they were written in).
bool SameJsonValue(const SchemaJson& a, const SchemaJson& b);

// Keywords that only annotate (title, description, $defs, ...): no constraint on a value.
bool IsSchemaAnnotation(const std::string& keyword);

// Inlines a top-level `$ref` and folds a top-level `allOf` into the schema beside it.
absl::StatusOr<SchemaJson> FlattenSchema(const SchemaJson& s, const SchemaResolver& resolve);

// Whether `value` satisfies `schema`.
absl::StatusOr<bool> SchemaAdmits(const SchemaJson& schema, const SchemaJson& value,
                                  const SchemaResolver& resolve);

}  // namespace walsh

#endif  // WALSH_CONSTRAINT_SCHEMA_ALGEBRA_H_
