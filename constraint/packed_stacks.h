// Grammar stacks kept end to end in one buffer, for the scratch of one expansion
// (CompiledGrammar::Expand): a stack pushed or remembered there is a copy of its elements, with
// no allocation of its own once the buffers have grown. An allocation per stack was the largest
// cost of the constraint_mask fuzzer's brute-force walks under ASan.
#ifndef WALSH_CONSTRAINT_PACKED_STACKS_H_
#define WALSH_CONSTRAINT_PACKED_STACKS_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/hash/hash.h"
#include "absl/types/span.h"

namespace walsh {

// Stacks last in, first out.
class StackPile {
 public:
  // Pushes `stack` with `top` on it.
  void Push(const std::vector<int32_t>& stack, int32_t top) {
    elements_.insert(elements_.end(), stack.begin(), stack.end());
    elements_.push_back(top);
    ends_.push_back(elements_.size());
  }
  // Moves the last stack pushed into `stack`; false when there is none.
  bool Pop(std::vector<int32_t>& stack) {
    if (ends_.empty()) return false;
    ends_.pop_back();
    const size_t begin = ends_.empty() ? 0 : ends_.back();
    stack.assign(elements_.begin() + static_cast<std::ptrdiff_t>(begin), elements_.end());
    elements_.resize(begin);
    return true;
  }
  void Clear() {
    elements_.clear();
    ends_.clear();
  }

 private:
  std::vector<int32_t> elements_;
  std::vector<size_t> ends_;  // per stack: one past its last element
};

// A set of stacks, found through an index of their positions (each stack is hashed anyway, so
// a scan of the first few, as StackSetBuilder does, would save nothing).
class PackedStackSet {
 public:
  PackedStackSet() = default;
  PackedStackSet(const PackedStackSet&) = delete;  // its index points back at it
  PackedStackSet& operator=(const PackedStackSet&) = delete;

  // Adds `stack`; false when it was in the set already.
  bool Insert(const std::vector<int32_t>& stack) {
    const absl::Span<const int32_t> s(stack);
    const size_t hash = absl::Hash<absl::Span<const int32_t>>{}(s);
    if (index_.contains(Probe{hash, s})) return false;
    stored_.push_back({hash, elements_.size(), stack.size()});
    elements_.insert(elements_.end(), stack.begin(), stack.end());
    index_.insert(stored_.size() - 1);
    return true;
  }
  void Clear() {
    elements_.clear();
    stored_.clear();
    index_.clear();
  }

 private:
  struct StoredStack {
    size_t hash, begin, size;
  };
  struct Probe {
    size_t hash;
    absl::Span<const int32_t> stack;
  };
  absl::Span<const int32_t> Of(size_t i) const {
    return absl::Span<const int32_t>(elements_.data() + stored_[i].begin, stored_[i].size);
  }
  // The index holds positions in stored_, hashed and compared as the stacks they name.
  struct Hash {
    using is_transparent = void;
    const PackedStackSet* set;
    size_t operator()(size_t i) const { return set->stored_[i].hash; }
    size_t operator()(const Probe& p) const { return p.hash; }
  };
  struct Eq {
    using is_transparent = void;
    const PackedStackSet* set;
    absl::Span<const int32_t> Of(size_t i) const { return set->Of(i); }
    absl::Span<const int32_t> Of(const Probe& p) const { return p.stack; }
    template <typename A, typename B>
    bool operator()(const A& a, const B& b) const {
      return Of(a) == Of(b);
    }
  };
  std::vector<int32_t> elements_;
  std::vector<StoredStack> stored_;
  absl::flat_hash_set<size_t, Hash, Eq> index_{0, Hash{this}, Eq{this}};
};

}  // namespace walsh

#endif  // WALSH_CONSTRAINT_PACKED_STACKS_H_
