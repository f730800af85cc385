// One sequence's place in a compiled grammar: which tokens may come next, and the state after
// one does. Cheap to create (the grammar and its mask cache are shared); not thread-safe.
#ifndef WALSH_CONSTRAINT_GRAMMAR_MATCHER_H_
#define WALSH_CONSTRAINT_GRAMMAR_MATCHER_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "constraint/compiled_grammar.h"
#include "constraint/mask_budget.h"

namespace walsh {

class GrammarMatcher {
 public:
  explicit GrammarMatcher(std::shared_ptr<const CompiledGrammar> grammar);

  // Advances by one token's bytes. False (and no change) when the grammar does not allow it;
  // a token outside the trie (a control token) is never allowed. With a budget, also false
  // (and no change) once it is spent: the caller tells the two apart by budget.spent().
  bool AcceptToken(int32_t id);
  bool AcceptToken(int32_t id, MaskBudget& budget);
  // Whether AcceptToken(id) would: the token's bytes keep some stack alive.
  bool Accepts(int32_t id) const;
  // Bit i of `bits` (vocab_size bits) is set when token i may come next. End-of-sequence
  // tokens are the caller's: allowed exactly when CanEnd(). Past `budget`, its status (and
  // `bits` incomplete).
  absl::Status FillMask(std::vector<uint64_t>& bits, MaskBudget& budget) const;
  void FillMask(std::vector<uint64_t>& bits) const;  // unbounded
  bool CanEnd() const;                               // the output so far is a complete match
  bool MustEnd() const;                              // ... and nothing more can follow
  bool Dead() const { return stacks_.empty(); }

  const CompiledGrammar& grammar() const { return *grammar_; }

 private:
  // The stacks after `id`'s bytes into `out`; false when none survives.
  bool StacksAfter(int32_t id, std::vector<GrammarStack>& out, MaskBudget* budget) const;

  std::shared_ptr<const CompiledGrammar> grammar_;
  std::vector<GrammarStack> stacks_;
};

}  // namespace walsh

#endif  // WALSH_CONSTRAINT_GRAMMAR_MATCHER_H_
