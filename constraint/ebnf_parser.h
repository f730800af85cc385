// The EBNF grammars users write (docs/structured_output.md), close to llama.cpp's GBNF:
//
//   root   ::= object
//   object ::= "{" ws ( pair ( "," ws pair )* )? "}"   # a comment
//   pair   ::= [a-z]+ ":" ws ( "true" | "false" | [0-9]{1,3} )
//   ws     ::= [ \t\n]*
//
// Rules are `name ::= body`; a body runs to the next `name ::=`. Terms: "strings" and
// [classes] with the regex escapes, `.` (any character), rule names, ( groups ), and the
// postfix * + ? {m} {m,} {m,n}, and `%json { ... }`: the texts a JSON Schema accepts (as
// llguidance's grammars embed schemas). The start rule is `root`.
#ifndef WALSH_CONSTRAINT_EBNF_PARSER_H_
#define WALSH_CONSTRAINT_EBNF_PARSER_H_

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "constraint/grammar.h"

namespace walsh {

absl::StatusOr<Grammar> ParseEbnf(absl::string_view text);

}  // namespace walsh

#endif  // WALSH_CONSTRAINT_EBNF_PARSER_H_
