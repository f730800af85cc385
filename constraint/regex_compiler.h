// Regular expressions (the ECMAScript syntax JSON Schema's `pattern` uses) compiled to grammar
// rules that match the whole text: alternation, groups, classes, `.`, the quantifiers with their
// lazy forms (the same language), and the escapes of docs/structured_output.md. Anchors are
// accepted only at the ends. Lookaround, backreferences and word boundaries are refused by
// name.
#ifndef WALSH_CONSTRAINT_REGEX_COMPILER_H_
#define WALSH_CONSTRAINT_REGEX_COMPILER_H_

#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "constraint/grammar.h"

namespace walsh {

// Adds to `grammar` a rule matching exactly the texts `pattern` matches in full, every
// character restricted to `universe` (a JSON string's pattern excludes what JSON must escape).
absl::StatusOr<int32_t> AddRegexRule(Grammar& grammar, absl::string_view pattern,
                                     const std::vector<CodepointRange>& universe);

// A grammar whose root is the pattern.
absl::StatusOr<Grammar> RegexGrammar(absl::string_view pattern);

}  // namespace walsh

#endif  // WALSH_CONSTRAINT_REGEX_COMPILER_H_
