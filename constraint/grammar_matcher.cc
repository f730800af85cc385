#include "constraint/grammar_matcher.h"

#include <algorithm>

namespace walsh {

GrammarMatcher::GrammarMatcher(std::shared_ptr<const CompiledGrammar> grammar)
    : grammar_(std::move(grammar)), stacks_(grammar_->Start()) {}

bool GrammarMatcher::StacksAfter(int32_t id, std::vector<GrammarStack>& out,
                                 MaskBudget* budget) const {
  const TokenTrie& trie = grammar_->trie();
  if (id < 0 || id >= trie.vocab_size() || !trie.contains(id)) return false;
  const std::vector<GrammarStack>* from = &stacks_;
  std::vector<GrammarStack> next;
  for (char c : trie.bytes(id)) {
    grammar_->Advance(*from, static_cast<uint8_t>(c), next, nullptr, budget);
    if (next.empty() || (budget != nullptr && budget->spent())) return false;
    out.swap(next);
    from = &out;
  }
  return true;
}

bool GrammarMatcher::AcceptToken(int32_t id) {
  std::vector<GrammarStack> after;
  if (!StacksAfter(id, after, nullptr)) return false;
  stacks_ = std::move(after);
  return true;
}

bool GrammarMatcher::AcceptToken(int32_t id, MaskBudget& budget) {
  std::vector<GrammarStack> after;
  if (!StacksAfter(id, after, &budget)) return false;
  stacks_ = std::move(after);
  return true;
}

bool GrammarMatcher::Accepts(int32_t id) const {
  std::vector<GrammarStack> after;
  return StacksAfter(id, after, nullptr);
}

void GrammarMatcher::FillMask(std::vector<uint64_t>& bits) const {
  MaskBudget unbounded;
  (void)FillMask(bits, unbounded);
}

absl::Status GrammarMatcher::FillMask(std::vector<uint64_t>& bits, MaskBudget& budget) const {
  const TokenTrie& trie = grammar_->trie();
  bits.assign((trie.vocab_size() + 63) / 64, 0);
  // Stacks with the same context (or top position) share the tokens it accepts on its own.
  std::vector<const CompiledGrammar::TokenSet*> added;
  auto add = [&](const CompiledGrammar::TokenSet* set) {
    if (set == nullptr || std::find(added.begin(), added.end(), set) != added.end()) return;
    added.push_back(set);
    set->AddTo(bits);
  };
  for (const GrammarStack& s : stacks_) {
    if (s.empty()) continue;
    const CompiledGrammar::ContextMask* m = grammar_->MaskAt(s, budget);
    if (m == nullptr) return budget.status();
    add(m->alone);
    add(&m->accepted);
    if (!grammar_->AddUncertain(s, *m, bits, budget)) return budget.status();
  }
  return absl::OkStatus();
}

bool GrammarMatcher::CanEnd() const {
  return std::any_of(stacks_.begin(), stacks_.end(),
                     [](const GrammarStack& s) { return s.empty(); });
}

bool GrammarMatcher::MustEnd() const {
  return !stacks_.empty() && std::all_of(stacks_.begin(), stacks_.end(),
                                         [](const GrammarStack& s) { return s.empty(); });
}

}  // namespace walsh
