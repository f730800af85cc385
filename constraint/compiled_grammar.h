// A checked grammar flattened for matching, with its cached token masks.
//
// The matcher's state is a set of stacks (a pushdown automaton run on all parses at once, as
// llama.cpp's GBNF sampler does); a stack holds positions, each the next element to match in
// some alternative, its top always a byte class. For a context, a stack's top position and the
// position its rule returns to (the frame below it), the vocabulary splits in three whatever
// lies further down: tokens it accepts on its own, tokens it rejects on its own, and tokens that
// finish the context's rules partway and so depend on the rest of the stack (xgrammar's
// adaptive token-mask cache, with one frame of context). The first two are computed once per
// context by walking the token trie, the third is checked per stack and remembered for it;
// docs/structured_output.md.
#ifndef WALSH_CONSTRAINT_COMPILED_GRAMMAR_H_
#define WALSH_CONSTRAINT_COMPILED_GRAMMAR_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "common/mutex.h"
#include "constraint/grammar.h"
#include "constraint/mask_budget.h"
#include "constraint/packed_stacks.h"
#include "constraint/token_trie.h"

namespace walsh {

using GrammarStack = std::vector<int32_t>;  // positions; the top is back()

// Bounds on one state, so an ambiguous grammar cannot blow up a step: stacks past them are
// dropped (their tokens are masked out).
inline constexpr size_t kMaxGrammarStacks = 512;
inline constexpr size_t kMaxGrammarStackDepth = 4096;
// One stack's expansion's work in stack elements copied or compared (1 MiB of them): deep
// stacks from nested nullable repetitions would otherwise take seconds and hold hundreds of MB
// of seen stacks. Per stack, so that a stack expands alike whatever set it is in (masks are
// computed per stack context).
inline constexpr int64_t kMaxExpansionElements = int64_t{1} << 18;
// The per-stack results of AddUncertain kept for reuse; past this the memo starts afresh.
inline constexpr int64_t kMaxStackMemoBytes = int64_t{8} << 20;
// The contexts WarmNext computes ahead at most, the grammar elements scanned finding them, and
// the context masks' bytes past which it stops (the rest stay lazy).
inline constexpr size_t kMaxWarmContexts = 8192;
inline constexpr int64_t kMaxWarmSearchSteps = 1 << 18;
inline constexpr int64_t kMaxWarmBytes = int64_t{8} << 20;

class CompiledGrammar {
 public:
  // `grammar` must have passed Check().
  CompiledGrammar(const Grammar& grammar, std::shared_ptr<const TokenTrie> trie);

  // A set of tokens: ids when sparse, else a bitset over the vocabulary.
  struct TokenSet {
    std::vector<int32_t> ids;
    std::vector<uint64_t> bits;
    void AddTo(std::vector<uint64_t>& out) const;  // out |= this
    int64_t bytes() const { return static_cast<int64_t>(ids.size() * 4 + bits.size() * 8); }
  };
  struct ContextMask {
    // With a frame below the position: what the position accepts alone (its own mask's), to
    // which `accepted` adds what the frame below decides.
    const TokenSet* alone = nullptr;
    TokenSet accepted;
    // Trie subtrees whose tokens depend on the stack below the context: (node, depth).
    std::vector<std::pair<int32_t, int32_t>> uncertain;
  };

  // The start state: every stack that can begin the root.
  std::vector<GrammarStack> Start() const;
  // The stacks after one byte; `escaped` (optional) is set when a stack ran past its bottom
  // marker (kBottom), which only the mask cache puts there. The expansions are charged to
  // `budget` (optional); once it is spent, `to` is incomplete and must be thrown away.
  void Advance(const std::vector<GrammarStack>& from, uint8_t byte, std::vector<GrammarStack>& to,
               bool* escaped = nullptr, MaskBudget* budget = nullptr) const;
  // The mask of `stack`'s context (its top one or two frames): computed on first use, then
  // shared by every matcher of this grammar. Null when `budget` ran out computing it (nothing
  // is cached then).
  const ContextMask* MaskAt(const GrammarStack& stack, MaskBudget& budget) const;
  // Sets in `bits` the tokens of `mask`'s uncertain subtrees that `stack` (whose context the
  // mask is) accepts. The answer depends on the stack alone, so it is kept per stack (up to
  // kMaxStackMemoBytes): a new stack only when the text goes somewhere new. False when `budget`
  // ran out (`bits` is then incomplete, and nothing is kept).
  bool AddUncertain(const GrammarStack& stack, const ContextMask& mask, std::vector<uint64_t>& bits,
                    MaskBudget& budget) const;

  // Computes the mask of one more of the contexts a stack can present (found from the grammar
  // alone: the root's positions, then those under each call in the grammar's order), so that a
  // request's first tokens find them cached (docs/structured_output.md §Warm-up). False once every
  // one is cached, or once a context's mask ran past `limits` (its deadline aside: warming is in
  // no hurry), which ends the warm-up for good. Thread-safe: several threads may warm one grammar.
  bool WarmNext(const MaskLimits& limits = {}) const;
  size_t warm_contexts() const { return warm_contexts_.size(); }
  // Contexts WarmNext has yet to compute (0 once done, past the byte bound, or abandoned).
  int64_t warm_remaining() const;

  const TokenTrie& trie() const { return *trie_; }
  int64_t cached_contexts() const;
  int64_t cached_bytes() const;

  static constexpr int32_t kBottom = -2;

 private:
  enum class Kind : uint8_t { kBytes, kRule, kEnd };
  struct Element {
    Kind kind;
    int32_t rule;
    std::array<uint64_t, 4> bytes;  // kBytes: the accepted bytes as a bitmap
  };
  bool Matches(int32_t position, uint8_t b) const {
    return (elements_[position].bytes[b >> 6] >> (b & 63)) & 1;
  }
  // The stacks one expansion has yet to expand and the rule-topped ones it has entered, kept
  // across the expansions of one step so their buffers are allocated once.
  struct ExpandScratch;
  // Expands `stack` until every top is a byte class, adding the results to `out` (a step's
  // stacks: each once, in first-seen order, up to kMaxGrammarStacks).
  void Expand(GrammarStack stack, StackSet<std::vector<GrammarStack>>& out, ExpandScratch& scratch,
              bool* escaped, MaskBudget* budget) const;
  // The mask of `position` with `below` (-1: none) the frame under it, cached; null when
  // `budget` ran out.
  const ContextMask* MaskFor(int32_t below, int32_t position, MaskBudget& budget) const;
  // With a frame below, `alone` is the position's own mask, whose uncertain subtrees are all
  // that is left to walk. Null when `budget` ran out.
  std::unique_ptr<ContextMask> ComputeMask(int32_t below, int32_t position,
                                           const ContextMask* alone, MaskBudget& budget) const;
  TokenSet MakeTokenSet(std::vector<int32_t> ids) const;
  // AddUncertain's walk: each subtree's path once, then its tokens depth first.
  std::vector<int32_t> WalkUncertain(const GrammarStack& stack, const ContextMask& mask,
                                     MaskBudget& budget) const;
  class SetSteps;

  using ByteSet = std::array<uint64_t, 4>;
  // Per rule: the bytes that can come right after it in any context (its follow set), so a
  // token that leaves a position's rule with a byte outside it is rejected whatever the stack.
  void ComputeFollowSets();
  // The contexts (frame below or -1, byte position) a stack can show: the root's positions
  // alone, and under each return position the positions of its callee and of what the callee
  // ends in (a tail call replaces the frame). WarmNext computes a 2-frame context's 1-frame
  // mask first, so every reachable position is covered.
  void FindWarmContexts();
  bool PastWarmBytes() const;  // the masks cached reached kMaxWarmBytes: warm-up is over

  std::vector<Element> elements_;
  std::vector<int32_t> rule_of_;                    // per position
  std::vector<std::vector<int32_t>> alternatives_;  // per rule: the positions that start them
  std::vector<ByteSet> follow_;
  int32_t root_ = 0;
  std::shared_ptr<const TokenTrie> trie_;
  std::vector<std::pair<int32_t, int32_t>> warm_contexts_;
  mutable std::atomic<size_t> next_warm_{0};
  mutable std::atomic<bool> warm_abandoned_{false};  // a context ran past its budget
  mutable Mutex mu_;
  // By context: (frame below + 1) << 32 | top position.
  mutable absl::flat_hash_map<int64_t, std::unique_ptr<ContextMask>> masks_ ABSL_GUARDED_BY(mu_);
  mutable int64_t mask_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  mutable absl::flat_hash_map<GrammarStack, std::shared_ptr<const TokenSet>> stack_memo_
      ABSL_GUARDED_BY(mu_);
  mutable int64_t stack_memo_bytes_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace walsh

#endif  // WALSH_CONSTRAINT_COMPILED_GRAMMAR_H_
