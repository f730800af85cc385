// What kinds of JSON value a schema may accept (object, array, string, number, boolean, null),
// and what follows from it: whether the branches of a oneOf can never hold together, and a
// schema's types less those a `not` names.
#ifndef WALSH_CONSTRAINT_SCHEMA_KINDS_H_
#define WALSH_CONSTRAINT_SCHEMA_KINDS_H_

#include <optional>
#include <set>
#include <string>

#include "absl/status/statusor.h"
#include "constraint/schema_algebra.h"

namespace walsh {

// The kinds `schema` may accept (nullopt: any), or with `written` those the compiler writes
// for it (its inferred type where it has none). "integer" counts as "number".
std::optional<std::set<std::string>> SchemaKinds(const SchemaJson& schema, bool written);

// oneOf holds when exactly one branch does: each branch's outputs must fail every other
// branch, shown by the kinds of value or the enum values alone. Errors name `at`.
absl::Status CheckOneOfDisjoint(const SchemaJson& branches, const std::string& at);

// `s` without the values `negated` (a `not` naming types alone) accepts. Errors name `path`.
absl::StatusOr<SchemaJson> WithoutTypes(SchemaJson s, const SchemaJson& negated,
                                        const std::string& path);

}  // namespace walsh

#endif  // WALSH_CONSTRAINT_SCHEMA_KINDS_H_
