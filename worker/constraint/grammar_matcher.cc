#include "worker/constraint/grammar_matcher.h"

#include <algorithm>

namespace walsh {

GrammarMatcher::GrammarMatcher(std::shared_ptr<const CompiledGrammar> grammar)
    : grammar_(std::move(grammar)), stacks_(grammar_->Start()) {}

bool GrammarMatcher::AcceptToken(int32_t id) {
  const TokenTrie& trie = grammar_->trie();
  if (id < 0 || id >= trie.vocab_size() || !trie.contains(id)) return false;
  std::vector<GrammarStack> cur = stacks_, next;
  for (char c : trie.bytes(id)) {
    grammar_->Advance(cur, static_cast<uint8_t>(c), next);
    if (next.empty()) return false;
    cur.swap(next);
  }
  stacks_ = std::move(cur);
  return true;
}

void GrammarMatcher::FillMask(std::vector<uint64_t>& bits) const {
  const TokenTrie& trie = grammar_->trie();
  bits.assign((trie.vocab_size() + 63) / 64, 0);
  // Stacks with the same top share its context-independent tokens.
  std::vector<int32_t> tops_done;
  for (const GrammarStack& s : stacks_) {
    if (s.empty()) continue;
    const CompiledGrammar::PositionMask& m = grammar_->MaskAt(s.back());
    if (std::find(tops_done.begin(), tops_done.end(), s.back()) == tops_done.end()) {
      tops_done.push_back(s.back());
      if (!m.accepted_bits.empty()) {
        for (size_t w = 0; w < bits.size(); ++w) bits[w] |= m.accepted_bits[w];
      } else {
        for (int32_t id : m.accepted_ids) bits[id >> 6] |= 1ull << (id & 63);
      }
    }
    grammar_->AddUncertain(s, m, bits);
  }
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
