#include "constraint/compiled_grammar.h"

#include <algorithm>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/hash/hash.h"

namespace walsh {

struct CompiledGrammar::ExpandScratch {
  StackPile pending;
  PackedStacks entered_stacks;
  StackSet<PackedStacks> entered{entered_stacks};
};

CompiledGrammar::CompiledGrammar(const Grammar& grammar, std::shared_ptr<const TokenTrie> trie)
    : root_(grammar.root()), trie_(std::move(trie)) {
  alternatives_.resize(grammar.rules().size());
  const std::vector<bool> productive = grammar.ProductiveRules();
  for (size_t r = 0; r < grammar.rules().size(); ++r) {
    for (const GrammarSequence& alt : grammar.rules()[r].alternatives) {
      if (!std::all_of(alt.begin(), alt.end(), [&](const GrammarElement& e) {
            return e.kind == GrammarElement::Kind::kBytes ? !e.ranges.empty()
                                                          : static_cast<bool>(productive[e.rule]);
          })) {
        continue;  // never completes: a token that would end in it is not allowed
      }
      alternatives_[r].push_back(static_cast<int32_t>(elements_.size()));
      for (const GrammarElement& e : alt) {
        rule_of_.push_back(static_cast<int32_t>(r));
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
      rule_of_.push_back(static_cast<int32_t>(r));
    }
  }
  ComputeFollowSets();
  FindWarmContexts();
}

void CompiledGrammar::FindWarmContexts() {
  // The byte positions a rule's frame can show on top: its own, and (tail calls replace the
  // frame) those of the rules its alternatives end in; a depth-first search per start, bounded
  // in elements scanned.
  absl::flat_hash_set<int64_t> seen_contexts;
  int64_t budget = kMaxWarmSearchSteps;
  auto add_tops = [&](int32_t below, int32_t rule) {
    std::vector<int32_t> work{rule};
    absl::flat_hash_set<int32_t> visited{rule};
    while (!work.empty() && budget > 0) {
      const int32_t r = work.back();
      work.pop_back();
      for (int32_t pos : alternatives_[r]) {
        for (; elements_[pos].kind != Kind::kEnd && --budget >= 0; ++pos) {
          const Element& e = elements_[pos];
          if (e.kind == Kind::kBytes) {
            const int64_t key = (static_cast<int64_t>(below) + 1) << 32 | pos;
            if (seen_contexts.insert(key).second) warm_contexts_.emplace_back(below, pos);
          } else if (elements_[pos + 1].kind == Kind::kEnd && visited.insert(e.rule).second) {
            work.push_back(e.rule);
          }
        }
      }
    }
  };
  add_tops(-1, root_);
  for (size_t pos = 0; pos < elements_.size() && budget > 0; ++pos) {
    const Element& e = elements_[pos];
    if (e.kind == Kind::kRule && elements_[pos + 1].kind != Kind::kEnd) {
      add_tops(static_cast<int32_t>(pos) + 1, e.rule);
    }
  }
  // A top right after another byte class is met only when a token ends inside a run of them
  // (mid-character, mid-literal), the least likely contexts: they go last, so the bounds
  // (kMaxWarmContexts here, kMaxWarmBytes as masks are computed) leave them lazy first.
  std::stable_partition(warm_contexts_.begin(), warm_contexts_.end(), [&](const auto& context) {
    const int32_t pos = context.second;
    return pos == 0 || elements_[pos - 1].kind != Kind::kBytes;
  });
  if (warm_contexts_.size() > kMaxWarmContexts) warm_contexts_.resize(kMaxWarmContexts);
  warm_contexts_.shrink_to_fit();
}

bool CompiledGrammar::PastWarmBytes() const {
  MutexLock lock(&mu_);
  return mask_bytes_ >= kMaxWarmBytes;
}

bool CompiledGrammar::WarmNext(const MaskLimits& limits) const {
  if (PastWarmBytes() || warm_abandoned_.load(std::memory_order_relaxed)) return false;
  const size_t i = next_warm_.fetch_add(1, std::memory_order_relaxed);
  if (i >= warm_contexts_.size()) return false;
  const auto [below, position] = warm_contexts_[i];
  MaskBudget budget(MaskLimits{.work = limits.work, .time = std::chrono::milliseconds(0)});
  const ContextMask* alone = MaskFor(-1, position, budget);
  if (alone != nullptr && below >= 0 && !alone->uncertain.empty()) {
    alone = MaskFor(below, position, budget);
  }
  if (alone == nullptr) {
    warm_abandoned_.store(true, std::memory_order_relaxed);
    return false;
  }
  return true;
}

void CompiledGrammar::ComputeFollowSets() {
  const size_t rules = alternatives_.size();
  std::vector<bool> nullable(rules, false);
  std::vector<ByteSet> first(rules, ByteSet{0, 0, 0, 0});
  follow_.assign(rules, ByteSet{0, 0, 0, 0});
  auto merge = [](ByteSet& into, const ByteSet& from) {
    bool changed = false;
    for (int w = 0; w < 4; ++w) {
      const uint64_t v = into[w] | from[w];
      changed = changed || v != into[w];
      into[w] = v;
    }
    return changed;
  };
  // The first bytes of the sequence from `pos`, and whether it can be empty.
  auto sequence_first = [&](int32_t pos, ByteSet& out) {
    for (;; ++pos) {
      const Element& e = elements_[pos];
      if (e.kind == Kind::kEnd) return true;
      if (e.kind == Kind::kBytes) {
        merge(out, e.bytes);
        return false;
      }
      merge(out, first[e.rule]);
      if (!nullable[e.rule]) return false;
    }
  };
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t r = 0; r < rules; ++r) {
      for (int32_t start : alternatives_[r]) {
        ByteSet f{0, 0, 0, 0};
        const bool empty = sequence_first(start, f);
        changed = merge(first[r], f) || changed;
        if (empty && !nullable[r]) nullable[r] = changed = true;
      }
    }
  }
  // FOLLOW(R) holds what comes after each reference to R, and FOLLOW(S) of the rule S that
  // refers to it where nothing need come after: propagated along those edges by a work list
  // (a chain of 2,000 optional items would take as many passes).
  std::vector<std::vector<int32_t>> tails(rules);  // S -> the rules that may end S
  for (size_t pos = 0; pos < elements_.size(); ++pos) {
    if (elements_[pos].kind != Kind::kRule) continue;
    ByteSet after{0, 0, 0, 0};
    const bool rest_empty = sequence_first(static_cast<int32_t>(pos) + 1, after);
    merge(follow_[elements_[pos].rule], after);
    if (rest_empty) tails[rule_of_[pos]].push_back(elements_[pos].rule);
  }
  std::vector<int32_t> work(rules);
  for (size_t r = 0; r < rules; ++r) work[r] = static_cast<int32_t>(r);
  while (!work.empty()) {
    const int32_t s = work.back();
    work.pop_back();
    for (int32_t r : tails[s]) {
      if (merge(follow_[r], follow_[s])) work.push_back(r);
    }
  }
}

void CompiledGrammar::Expand(GrammarStack stack, StackSet<std::vector<GrammarStack>>& out,
                             ExpandScratch& scratch, bool* escaped, MaskBudget* work) const {
  scratch.pending.Clear();
  scratch.entered.Clear();
  // A bound on the expansion's work, in stack elements: nullable repetitions nested in each
  // other can reach millions of stacks, thousands deep, without reading a byte. Stacks past it
  // are dropped, as past kMaxGrammarStacks.
  int64_t budget = kMaxExpansionElements;
  GrammarStack s = std::move(stack);
  do {
    while ((budget -= static_cast<int64_t>(s.size()) + 1) >= 0) {
      if (s.empty()) {
        out.Insert(std::move(s));
        break;
      }
      const int32_t top = s.back();
      if (top == kBottom) {
        if (escaped != nullptr) *escaped = true;
        break;
      }
      const Element& e = elements_[top];
      if (e.kind == Kind::kBytes) {
        out.Insert(std::move(s));
        break;
      }
      if (e.kind == Kind::kRule) {
        // A nullable x* comes back to the stack it started from: expand it once.
        if (!scratch.entered.Insert(s)) break;
      }
      s.pop_back();
      if (e.kind == Kind::kEnd) continue;
      // A rule: return past it (unless that is the end of the alternative: a tail call keeps
      // right recursion from growing the stack), then enter each alternative.
      if (elements_[top + 1].kind != Kind::kEnd) s.push_back(top + 1);
      if (s.size() >= kMaxGrammarStackDepth) break;
      const std::vector<int32_t>& starts = alternatives_[e.rule];
      for (size_t i = 1; i < starts.size(); ++i) {
        budget -= static_cast<int64_t>(s.size());
        scratch.pending.Push(s, starts[i]);
      }
      if (starts.empty()) break;
      s.push_back(starts[0]);
    }
  } while (budget >= 0 && scratch.pending.Pop(s));
  if (work != nullptr) work->Spend(kMaxExpansionElements - std::max<int64_t>(budget, 0));
}

std::vector<GrammarStack> CompiledGrammar::Start() const {
  std::vector<GrammarStack> out;
  StackSet<std::vector<GrammarStack>> found(out, kMaxGrammarStacks);
  ExpandScratch scratch;
  for (int32_t start : alternatives_[root_]) Expand({start}, found, scratch, nullptr, nullptr);
  return out;
}

void CompiledGrammar::Advance(const std::vector<GrammarStack>& from, uint8_t byte,
                              std::vector<GrammarStack>& to, bool* escaped,
                              MaskBudget* budget) const {
  to.clear();
  StackSet<std::vector<GrammarStack>> found(to, kMaxGrammarStacks);
  ExpandScratch scratch;
  for (const GrammarStack& s : from) {
    if (s.empty() || !Matches(s.back(), byte)) continue;
    if (budget != nullptr && !budget->Spend(1)) return;
    GrammarStack next = s;
    ++next.back();
    Expand(std::move(next), found, scratch, escaped, budget);
  }
}

// Stack sets interned, and each (set, byte) step computed once: a walk over many tokens meets
// few distinct sets (inside a string, every character leads back to the same one).
class CompiledGrammar::SetSteps {
 public:
  SetSteps(const CompiledGrammar& g, MaskBudget& budget)
      : g_(g), budget_(budget), dead_(Intern({})) {}
  int32_t Intern(std::vector<GrammarStack>&& set) {
    auto [it, fresh] = ids_.try_emplace(set, static_cast<int32_t>(sets_.size()));
    if (fresh) {
      ByteSet& live = live_.emplace_back(ByteSet{0, 0, 0, 0});
      for (const GrammarStack& s : set) {
        if (s.empty()) continue;
        for (int w = 0; w < 4; ++w) live[w] |= g_.elements_[s.back()].bytes[w];
      }
      sets_.push_back(std::move(set));
      if (dense_.size() < kDenseSets) dense_.emplace_back().fill(kUnknown);
    }
    return it->second;
  }
  // The set after `b`, and whether some stack left its bottom (kBottom) on the way.
  std::pair<int32_t, bool> Step(int32_t set, uint8_t b) {
    // No top takes the byte: every stack dies on it, none leaves its bottom.
    if (!((live_[set][b >> 6] >> (b & 63)) & 1)) return {dead_, false};
    if (static_cast<size_t>(set) < dense_.size()) {
      if (dense_[set][b] == kUnknown) {
        const auto [next, left] = Compute(set, b);  // may grow dense_: index it again after
        dense_[set][b] = next << 1 | static_cast<int32_t>(left);
      }
      return {dense_[set][b] >> 1, dense_[set][b] & 1};
    }
    auto [it, fresh] = steps_.try_emplace((static_cast<int64_t>(set) << 8) | b);
    if (fresh) it->second = Compute(set, b);
    return it->second;
  }
  bool Dead(int32_t set) const { return sets_[set].empty(); }

 private:
  // The first sets' steps sit in tables indexed by byte (a walk's hot loop); the rest, which
  // only a large walk meets, in a hash map, so memory stays proportional to the steps taken.
  static constexpr size_t kDenseSets = 1024;
  static constexpr int32_t kUnknown = -1;

  std::pair<int32_t, bool> Compute(int32_t set, uint8_t b) {
    bool left = false;
    std::vector<GrammarStack> next;
    g_.Advance(sets_[set], b, next, &left, &budget_);
    return {Intern(std::move(next)), left};
  }

  const CompiledGrammar& g_;
  MaskBudget& budget_;  // once spent, the sets are incomplete: the walk is thrown away
  std::vector<std::vector<GrammarStack>> sets_;
  std::vector<ByteSet> live_;  // per set: the bytes some stack's top takes
  absl::flat_hash_map<std::vector<GrammarStack>, int32_t> ids_;
  std::vector<std::array<int32_t, 256>> dense_;
  absl::flat_hash_map<int64_t, std::pair<int32_t, bool>> steps_;
  const int32_t dead_;  // the empty set, interned first (after every other member exists)
};

bool CompiledGrammar::AddUncertain(const GrammarStack& stack, const ContextMask& mask,
                                   std::vector<uint64_t>& bits, MaskBudget& budget) const {
  if (mask.uncertain.empty()) return true;
  std::shared_ptr<const TokenSet> accepted;
  {
    MutexLock lock(&mu_);
    auto it = stack_memo_.find(stack);
    if (it != stack_memo_.end()) accepted = it->second;
  }
  if (accepted == nullptr) {
    std::vector<int32_t> walked = WalkUncertain(stack, mask, budget);
    if (budget.spent()) return false;
    accepted = std::make_shared<const TokenSet>(MakeTokenSet(std::move(walked)));
    const int64_t bytes = accepted->bytes() + static_cast<int64_t>(stack.size() * 4 + 64);
    MutexLock lock(&mu_);
    if (stack_memo_bytes_ + bytes > kMaxStackMemoBytes) {
      stack_memo_.clear();
      stack_memo_bytes_ = 0;
    }
    if (stack_memo_.try_emplace(stack, accepted).second) stack_memo_bytes_ += bytes;
  }
  accepted->AddTo(bits);
  return true;
}

CompiledGrammar::TokenSet CompiledGrammar::MakeTokenSet(std::vector<int32_t> ids) const {
  TokenSet set;
  const int64_t vocab = trie_->vocab_size();
  if (static_cast<int64_t>(ids.size()) * 32 > vocab) {
    set.bits.assign((vocab + 63) / 64, 0);
    for (int32_t id : ids) set.bits[id >> 6] |= 1ull << (id & 63);
  } else {
    std::sort(ids.begin(), ids.end());
    set.ids = std::move(ids);
    set.ids.shrink_to_fit();
  }
  return set;
}

void CompiledGrammar::TokenSet::AddTo(std::vector<uint64_t>& out) const {
  for (size_t w = 0; w < bits.size(); ++w) out[w] |= bits[w];
  for (int32_t id : ids) out[id >> 6] |= 1ull << (id & 63);
}

std::vector<int32_t> CompiledGrammar::WalkUncertain(const GrammarStack& stack,
                                                    const ContextMask& mask,
                                                    MaskBudget& budget) const {
  std::vector<int32_t> accepted;
  const std::vector<TokenTrie::Node>& nodes = trie_->nodes();
  const std::vector<int32_t>& sorted = trie_->sorted();
  SetSteps steps(*this, budget);
  const int32_t start = steps.Intern({stack});
  auto allow = [&](int32_t from, int32_t to) {
    accepted.insert(accepted.end(), sorted.begin() + from, sorted.begin() + to);
  };
  std::vector<std::pair<int32_t, int32_t>> frames;  // (node, set after its byte)
  // The subtrees come in trie order: each path shares a prefix with the one before, whose sets
  // by depth are kept (path_sets[d]: the set after d bytes).
  std::string previous;
  std::vector<int32_t> path_sets{start};
  for (const auto& [root, depth] : mask.uncertain) {
    if (!budget.Spend(1)) return accepted;
    const std::string& path = trie_->bytes(sorted[nodes[root].first]);
    size_t same = 0;
    const size_t known = std::min<size_t>(previous.size(), path_sets.size() - 1);
    while (same < known && same < static_cast<size_t>(depth) && previous[same] == path[same]) {
      ++same;
    }
    path_sets.resize(same + 1);
    int32_t set = path_sets.back();
    for (int32_t d = static_cast<int32_t>(same); d < depth && !steps.Dead(set); ++d) {
      set = steps.Step(set, static_cast<uint8_t>(path[d])).first;
      path_sets.push_back(set);
    }
    previous.assign(path, 0, path_sets.size() - 1);
    if (steps.Dead(set) || static_cast<int32_t>(path_sets.size()) - 1 < depth) continue;
    frames.assign(1, {root, set});
    while (!frames.empty()) {
      if (!budget.Spend(1)) return accepted;
      const auto [node, at] = frames.back();
      frames.pop_back();
      allow(nodes[node].first, nodes[node].own_end);
      for (int32_t c = node + 1; c < nodes[node].end; c = nodes[c].end) {
        const int32_t next = steps.Step(at, nodes[c].byte).first;
        if (!steps.Dead(next)) frames.emplace_back(c, next);
      }
    }
  }
  return accepted;
}

std::unique_ptr<CompiledGrammar::ContextMask> CompiledGrammar::ComputeMask(
    int32_t below, int32_t position, const ContextMask* alone, MaskBudget& budget) const {
  auto mask = std::make_unique<ContextMask>();
  const std::vector<TokenTrie::Node>& nodes = trie_->nodes();
  const std::vector<int32_t>& sorted = trie_->sorted();
  std::vector<int32_t> accepted;
  // Depth-first over the trie, one stack set per depth.
  struct Frame {
    int32_t node;   // whose children are being visited
    int32_t child;  // the next child to visit
    bool escaped;   // some parse left the context, with a byte that may follow it
    bool pending;   // some parse left it on this node's own byte: the next must follow it
    bool inside;    // in a subtree to classify (below: on the way to one)
  };
  // With a frame below, only the tokens the position alone left uncertain are walked (their
  // subtrees, in trie order); its other tokens are decided whatever lies below.
  std::vector<int32_t> roots;
  size_t next_root = 0;
  if (alone != nullptr) {
    mask->alone = &alone->accepted;
    for (const auto& [node, depth] : alone->uncertain) roots.push_back(node);
  }
  // Leaving the context is returning from the rule of its lowest frame.
  const ByteSet& follow = follow_[rule_of_[below >= 0 ? below : position]];
  auto follows = [&](uint8_t b) { return (follow[b >> 6] >> (b & 63)) & 1; };
  SetSteps memo(*this, budget);
  GrammarStack start{kBottom};
  if (below >= 0) start.push_back(below);
  start.push_back(position);
  std::vector<int32_t> sets{memo.Intern({std::move(start)})};
  std::vector<Frame> frames{{0, 1, false, false, alone == nullptr}};
  while (!frames.empty()) {
    if (!budget.Spend(1)) return nullptr;
    Frame& f = frames.back();
    if (f.child >= nodes[f.node].end) {
      frames.pop_back();
      sets.pop_back();
      continue;
    }
    int32_t child = f.child;
    bool inside = f.inside;
    if (!inside) {
      // The walk visits nodes in preorder, the order of `roots`: a cursor finds the next
      // subtree to classify, and the child on the way to it is reached by skipping siblings.
      while (next_root < roots.size() && roots[next_root] < child) ++next_root;
      if (next_root == roots.size() || roots[next_root] >= nodes[f.node].end) {
        f.child = nodes[f.node].end;  // none left under this node
        continue;
      }
      while (nodes[child].end <= roots[next_root]) child = nodes[child].end;
      inside = roots[next_root] == child;
    }
    f.child = nodes[child].end;
    const TokenTrie::Node& n = nodes[child];
    const bool escaped = f.escaped || (f.pending && follows(n.byte));
    const auto [next_set, left_here] = memo.Step(sets.back(), n.byte);
    const bool dead = memo.Dead(next_set);
    if (dead && escaped) {
      mask->uncertain.emplace_back(child, static_cast<int32_t>(frames.size()));
      continue;
    }
    if (dead && !left_here) continue;
    // Alive here, or the context ended exactly here: a token ending here is allowed whatever
    // the stack below holds (on the way to a subtree, the position alone allowed it already).
    if (inside) {
      accepted.insert(accepted.end(), sorted.begin() + n.first, sorted.begin() + n.own_end);
    }
    if (n.own_end == n.last) continue;
    sets.push_back(next_set);
    frames.push_back({child, child + 1, escaped, left_here, inside});
  }
  if (budget.spent()) return nullptr;  // the last steps' sets may be incomplete
  mask->accepted = MakeTokenSet(std::move(accepted));
  mask->uncertain.shrink_to_fit();
  return mask;
}

const CompiledGrammar::ContextMask* CompiledGrammar::MaskAt(const GrammarStack& stack,
                                                            MaskBudget& budget) const {
  const ContextMask* alone = MaskFor(-1, stack.back(), budget);
  if (alone == nullptr || stack.size() < 2 || alone->uncertain.empty()) return alone;
  return MaskFor(stack[stack.size() - 2], stack.back(), budget);
}

const CompiledGrammar::ContextMask* CompiledGrammar::MaskFor(int32_t below, int32_t position,
                                                             MaskBudget& budget) const {
  const int64_t key = (static_cast<int64_t>(below) + 1) << 32 | static_cast<uint32_t>(position);
  {
    MutexLock lock(&mu_);
    auto it = masks_.find(key);
    if (it != masks_.end()) return it->second.get();
  }
  const ContextMask* alone = below >= 0 ? MaskFor(-1, position, budget) : nullptr;
  if (below >= 0 && alone == nullptr) return nullptr;
  std::unique_ptr<ContextMask> mask = ComputeMask(below, position, alone, budget);
  if (mask == nullptr) return nullptr;
  MutexLock lock(&mu_);
  auto [it, fresh] = masks_.try_emplace(key, std::move(mask));
  if (fresh) {
    const ContextMask& m = *it->second;
    mask_bytes_ += m.accepted.bytes() + static_cast<int64_t>(m.uncertain.size() * 8);
  }
  return it->second.get();
}

int64_t CompiledGrammar::warm_remaining() const {
  if (PastWarmBytes() || warm_abandoned_.load(std::memory_order_relaxed)) return 0;
  const size_t next = next_warm_.load(std::memory_order_relaxed);
  return next >= warm_contexts_.size() ? 0 : static_cast<int64_t>(warm_contexts_.size() - next);
}

int64_t CompiledGrammar::cached_contexts() const {
  MutexLock lock(&mu_);
  return static_cast<int64_t>(masks_.size());
}

int64_t CompiledGrammar::cached_bytes() const {
  MutexLock lock(&mu_);
  return mask_bytes_ + stack_memo_bytes_;
}

}  // namespace walsh
