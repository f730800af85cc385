// Grammar stacks kept together: a pile and a packed store for the scratch of one expansion
// (CompiledGrammar::Expand), where a stack pushed or remembered is a copy of its elements with
// no allocation of its own once the buffers have grown (an allocation per stack was the largest
// cost of the constraint_mask fuzzer's brute-force walks under ASan), and the one set of stacks
// (StackSet), over that store or over a matcher state's vector of stacks.
#ifndef WALSH_CONSTRAINT_PACKED_STACKS_H_
#define WALSH_CONSTRAINT_PACKED_STACKS_H_

#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <utility>
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

// Stacks end to end in one buffer: a store for a StackSet that copies each stack's elements
// once and allocates nothing per stack.
class PackedStacks {
 public:
  size_t size() const { return ends_.size(); }
  absl::Span<const int32_t> operator[](size_t i) const {
    const size_t begin = i == 0 ? 0 : ends_[i - 1];
    return absl::Span<const int32_t>(elements_.data() + begin, ends_[i] - begin);
  }
  void push_back(absl::Span<const int32_t> stack) {
    elements_.insert(elements_.end(), stack.begin(), stack.end());
    ends_.push_back(elements_.size());
  }
  void clear() {
    elements_.clear();
    ends_.clear();
  }

 private:
  std::vector<int32_t> elements_;
  std::vector<size_t> ends_;
};

// The one set of grammar stacks: it adds each stack to `Store` (PackedStacks, or a
// std::vector of stacks) once, in first-seen order (the order interning and the masks depend
// on), up to `limit` stacks. While the store holds few stacks a new one is compared by a scan,
// since hashing every addition to a set of a few stacks costs more than it saves; from
// kScannedStacks on, an index of positions is built and kept (hashed and compared as the stacks
// they name, so a lookup copies nothing), since scanning hundreds of stacks per addition was most
// of a large walk's time.
template <typename Store>
class StackSet {
 public:
  explicit StackSet(Store& store, size_t limit = SIZE_MAX)
      : store_(store), limit_(limit), index_(0, Hash{&store}, Eq{&store}) {}
  StackSet(const StackSet&) = delete;  // its index points at the store
  StackSet& operator=(const StackSet&) = delete;

  // Adds `stack` (moved, where the store keeps vectors); false when it was there already or
  // the set is full.
  template <typename Stack>
  bool Insert(Stack&& stack) {
    const absl::Span<const int32_t> s(stack);
    if (store_.size() >= limit_) return false;
    if (store_.size() < kScannedStacks) {
      for (size_t i = 0; i < store_.size(); ++i) {
        if (At(i) == s) return false;
      }
    } else {
      if (index_.empty()) {
        for (size_t i = 0; i < store_.size(); ++i) index_.insert(i);
      }
      if (index_.contains(s)) return false;
    }
    if constexpr (std::is_same_v<Store, PackedStacks>) {
      store_.push_back(s);
    } else {
      store_.push_back(std::forward<Stack>(stack));
    }
    if (!index_.empty()) index_.insert(store_.size() - 1);
    return true;
  }
  // Empties the store and the index.
  void Clear() {
    store_.clear();
    index_.clear();
  }

 private:
  static constexpr size_t kScannedStacks = 16;
  absl::Span<const int32_t> At(size_t i) const { return absl::Span<const int32_t>(store_[i]); }
  struct Hash {
    using is_transparent = void;
    const Store* store;
    size_t operator()(size_t i) const { return (*this)(absl::Span<const int32_t>((*store)[i])); }
    size_t operator()(absl::Span<const int32_t> s) const {
      return absl::Hash<absl::Span<const int32_t>>{}(s);
    }
  };
  struct Eq {
    using is_transparent = void;
    const Store* store;
    absl::Span<const int32_t> Of(size_t i) const { return absl::Span<const int32_t>((*store)[i]); }
    absl::Span<const int32_t> Of(absl::Span<const int32_t> s) const { return s; }
    template <typename A, typename B>
    bool operator()(const A& a, const B& b) const {
      return Of(a) == Of(b);
    }
  };
  Store& store_;
  size_t limit_;
  absl::flat_hash_set<size_t, Hash, Eq> index_;  // empty until the store passes kScannedStacks
};

}  // namespace walsh

#endif  // WALSH_CONSTRAINT_PACKED_STACKS_H_
