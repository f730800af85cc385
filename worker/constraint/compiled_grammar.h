// A checked grammar flattened for matching, with its per-position token masks.
//
// The matcher's state is a set of stacks (a pushdown automaton run on all parses at once, as
// llama.cpp's GBNF sampler does); a stack holds positions, each the next element to match in
// some alternative, its top always a byte class. For a position the vocabulary splits in three
// whatever lies below it on the stack: tokens it accepts on its own, tokens it rejects on its
// own, and tokens that finish the position's rule partway and so depend on the stack below
// (xgrammar's adaptive token-mask cache). The first two are computed once per position by
// walking the token trie, the third is checked per step; docs/structured_output.md.
#ifndef WALSH_WORKER_CONSTRAINT_COMPILED_GRAMMAR_H_
#define WALSH_WORKER_CONSTRAINT_COMPILED_GRAMMAR_H_

#include <array>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "worker/constraint/grammar.h"
#include "worker/constraint/token_trie.h"

namespace walsh {

using GrammarStack = std::vector<int32_t>;  // positions; the top is back()

// Bounds on one state, so an ambiguous grammar cannot blow up a step: stacks past them are
// dropped (their tokens are masked out).
inline constexpr size_t kMaxGrammarStacks = 512;
inline constexpr size_t kMaxGrammarStackDepth = 4096;
inline constexpr int64_t kMaxExpansionSteps = 20'000;

class CompiledGrammar {
 public:
  // `grammar` must have passed Check().
  CompiledGrammar(const Grammar& grammar, std::shared_ptr<const TokenTrie> trie);

  struct PositionMask {
    std::vector<uint64_t> accepted_bits;  // when dense; else accepted_ids
    std::vector<int32_t> accepted_ids;
    // Trie subtrees whose tokens depend on the stack below the position: (node, depth).
    std::vector<std::pair<int32_t, int32_t>> uncertain;
  };

  // The start state: every stack that can begin the root.
  std::vector<GrammarStack> Start() const;
  // The stacks after one byte; `escaped` (optional) is set when a stack ran past its bottom
  // marker (kBottom), which only the mask cache puts there.
  void Advance(const std::vector<GrammarStack>& from, uint8_t byte, std::vector<GrammarStack>& to,
               bool* escaped = nullptr) const;
  // Sets in `bits` the tokens of `mask`'s uncertain subtrees that `stack` (whose top is the
  // mask's position) accepts: each subtree's path walked once, then its tokens depth first.
  void AddUncertain(const GrammarStack& stack, const PositionMask& mask,
                    std::vector<uint64_t>& bits) const;
  // Computed on first use, then shared by every matcher of this grammar.
  const PositionMask& MaskAt(int32_t position) const;

  const TokenTrie& trie() const { return *trie_; }
  int64_t cached_positions() const;
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
  // Expands `stack` until every top is a byte class, adding the results to `out`.
  void Expand(GrammarStack stack, std::vector<GrammarStack>& out, bool* escaped) const;
  std::unique_ptr<PositionMask> ComputeMask(int32_t position) const;
  class SetSteps;

  using ByteSet = std::array<uint64_t, 4>;
  // Per rule: the bytes that can come right after it in any context (its follow set), so a
  // token that leaves a position's rule with a byte outside it is rejected whatever the stack.
  void ComputeFollowSets();

  std::vector<Element> elements_;
  std::vector<int32_t> rule_of_;                    // per position
  std::vector<std::vector<int32_t>> alternatives_;  // per rule: the positions that start them
  std::vector<ByteSet> follow_;
  int32_t root_ = 0;
  std::shared_ptr<const TokenTrie> trie_;
  mutable absl::Mutex mu_;
  mutable absl::flat_hash_map<int32_t, std::unique_ptr<PositionMask>> masks_ ABSL_GUARDED_BY(mu_);
  mutable int64_t mask_bytes_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace walsh

#endif  // WALSH_WORKER_CONSTRAINT_COMPILED_GRAMMAR_H_
