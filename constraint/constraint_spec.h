// What a request's constraint is (a JSON schema, any JSON object, a regex, a grammar) and its
// compilation to a checked grammar: the entry point both faces use to refuse a bad one at their
// edge, and the constraint cache to compile it once (docs/structured_output.md).
#ifndef WALSH_CONSTRAINT_CONSTRAINT_SPEC_H_
#define WALSH_CONSTRAINT_CONSTRAINT_SPEC_H_

#include <string>

#include "absl/status/statusor.h"
#include "constraint/grammar.h"

namespace walsh {

struct ConstraintSpec {
  enum class Kind { kJsonSchema, kJsonObject, kRegex, kGrammar };
  Kind kind = Kind::kJsonObject;
  std::string text;  // the schema, regex or grammar; empty for kJsonObject
};

// The grammar of a constraint, checked; errors name the offending path, offset or rule.
absl::StatusOr<Grammar> ConstraintGrammar(const ConstraintSpec& spec);

// The same, on a thread of its own with a 16 MiB stack: the compilers recurse with the nesting
// of what they compile, deeper than a server's threads allow (libmicrohttpd's and gRPC's are
// small). Every caller that serves requests compiles through this.
absl::StatusOr<Grammar> ConstraintGrammarOnOwnStack(const ConstraintSpec& spec);

}  // namespace walsh

#endif  // WALSH_CONSTRAINT_CONSTRAINT_SPEC_H_
