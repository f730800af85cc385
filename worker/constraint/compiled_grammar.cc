#include "worker/constraint/compiled_grammar.h"

#include <algorithm>

namespace walsh {
namespace {

void AddUnique(std::vector<GrammarStack>& set, GrammarStack&& stack) {
  if (set.size() >= kMaxGrammarStacks) return;
  for (const GrammarStack& s : set) {
    if (s == stack) return;
  }
  set.push_back(std::move(stack));
}

}  // namespace

CompiledGrammar::CompiledGrammar(const Grammar& grammar, std::shared_ptr<const TokenTrie> trie)
    : root_(grammar.root()), trie_(std::move(trie)) {
  alternatives_.resize(grammar.rules().size());
  for (size_t r = 0; r < grammar.rules().size(); ++r) {
    for (const GrammarSequence& alt : grammar.rules()[r].alternatives) {
      alternatives_[r].push_back(static_cast<int32_t>(elements_.size()));
      for (const GrammarElement& e : alt) {
        Element flat{Kind::kRule, e.rule, {0, 0, 0, 0}};
        if (e.kind == GrammarElement::Kind::kBytes) {
          flat.kind = Kind::kBytes;
          for (const ByteRange& range : e.ranges) {
            for (int b = range.lo; b <= range.hi; ++b) flat.bytes[b >> 6] |= 1ull << (b & 63);
          }
        }
        elements_.push_back(flat);
      }
      elements_.push_back({Kind::kEnd, -1, {0, 0, 0, 0}});
    }
  }
}

void CompiledGrammar::Expand(GrammarStack stack, std::vector<GrammarStack>& out,
                             bool* escaped) const {
  std::vector<GrammarStack> work, entered;
  work.push_back(std::move(stack));
  while (!work.empty()) {
    GrammarStack s = std::move(work.back());
    work.pop_back();
    while (true) {
      if (s.empty()) {
        AddUnique(out, std::move(s));
        break;
      }
      const int32_t top = s.back();
      if (top == kBottom) {
        if (escaped != nullptr) *escaped = true;
        break;
      }
      const Element& e = elements_[top];
      if (e.kind == Kind::kBytes) {
        AddUnique(out, std::move(s));
        break;
      }
      if (e.kind == Kind::kRule) {
        // A nullable x* comes back to the stack it started from: expand it once.
        if (std::find(entered.begin(), entered.end(), s) != entered.end()) break;
        entered.push_back(s);
      }
      s.pop_back();
      if (e.kind == Kind::kEnd) continue;
      // A rule: return past it (unless that is the end of the alternative: a tail call keeps
      // right recursion from growing the stack), then enter each alternative.
      if (elements_[top + 1].kind != Kind::kEnd) s.push_back(top + 1);
      if (s.size() >= kMaxGrammarStackDepth) break;
      const std::vector<int32_t>& starts = alternatives_[e.rule];
      for (size_t i = 1; i < starts.size(); ++i) {
        GrammarStack c = s;
        c.push_back(starts[i]);
        work.push_back(std::move(c));
      }
      if (starts.empty()) break;
      s.push_back(starts[0]);
    }
  }
}

std::vector<GrammarStack> CompiledGrammar::Start() const {
  std::vector<GrammarStack> out;
  for (int32_t start : alternatives_[root_]) Expand({start}, out, nullptr);
  return out;
}

void CompiledGrammar::Advance(const std::vector<GrammarStack>& from, uint8_t byte,
                              std::vector<GrammarStack>& to, bool* escaped) const {
  to.clear();
  for (const GrammarStack& s : from) {
    if (s.empty() || !Matches(s.back(), byte)) continue;
    GrammarStack next = s;
    ++next.back();
    Expand(std::move(next), to, escaped);
  }
}

bool CompiledGrammar::AcceptsBytes(const GrammarStack& stack, const std::string& bytes) const {
  std::vector<GrammarStack> cur{stack}, next;
  for (char c : bytes) {
    Advance(cur, static_cast<uint8_t>(c), next);
    if (next.empty()) return false;
    cur.swap(next);
  }
  return true;
}

std::unique_ptr<CompiledGrammar::PositionMask> CompiledGrammar::ComputeMask(
    int32_t position) const {
  auto mask = std::make_unique<PositionMask>();
  const std::vector<TokenTrie::Node>& nodes = trie_->nodes();
  const std::vector<int32_t>& sorted = trie_->sorted();
  std::vector<int32_t> accepted;
  // Depth-first over the trie, one stack set per depth.
  struct Frame {
    int32_t node;   // whose children are being visited
    int32_t child;  // the next child to visit
    bool escaped;   // some parse left the position's rule on the way here
  };
  std::vector<std::vector<GrammarStack>> sets(1);
  sets[0].push_back({kBottom, position});
  std::vector<Frame> frames{{0, 1, false}};
  while (!frames.empty()) {
    Frame& f = frames.back();
    if (f.child >= nodes[f.node].end) {
      frames.pop_back();
      sets.pop_back();
      continue;
    }
    const int32_t child = f.child;
    f.child = nodes[child].end;
    bool escaped = f.escaped;
    std::vector<GrammarStack> next;
    Advance(sets.back(), nodes[child].byte, next, &escaped);
    const TokenTrie::Node& n = nodes[child];
    if (next.empty()) {
      if (escaped) mask->uncertain.insert(mask->uncertain.end(), sorted.begin() + n.first,
                                          sorted.begin() + n.last);
      continue;
    }
    accepted.insert(accepted.end(), sorted.begin() + n.first, sorted.begin() + n.own_end);
    if (n.own_end == n.last) continue;
    sets.push_back(std::move(next));
    frames.push_back({child, child + 1, escaped});
  }
  const int64_t vocab = trie_->vocab_size();
  if (static_cast<int64_t>(accepted.size()) * 32 > vocab) {
    mask->accepted_bits.assign((vocab + 63) / 64, 0);
    for (int32_t id : accepted) mask->accepted_bits[id >> 6] |= 1ull << (id & 63);
  } else {
    std::sort(accepted.begin(), accepted.end());
    mask->accepted_ids = std::move(accepted);
  }
  std::sort(mask->uncertain.begin(), mask->uncertain.end());
  mask->accepted_bits.shrink_to_fit();
  mask->uncertain.shrink_to_fit();
  return mask;
}

const CompiledGrammar::PositionMask& CompiledGrammar::MaskAt(int32_t position) const {
  {
    absl::MutexLock lock(&mu_);
    auto it = masks_.find(position);
    if (it != masks_.end()) return *it->second;
  }
  std::unique_ptr<PositionMask> mask = ComputeMask(position);
  absl::MutexLock lock(&mu_);
  auto [it, fresh] = masks_.try_emplace(position, std::move(mask));
  if (fresh) {
    const PositionMask& m = *it->second;
    mask_bytes_ += static_cast<int64_t>(m.accepted_bits.size() * 8 + m.accepted_ids.size() * 4 +
                                        m.uncertain.size() * 4);
  }
  return *it->second;
}

int64_t CompiledGrammar::cached_positions() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(masks_.size());
}

int64_t CompiledGrammar::cached_bytes() const {
  absl::MutexLock lock(&mu_);
  return mask_bytes_;
}

}  // namespace walsh
