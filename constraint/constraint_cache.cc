#include "constraint/constraint_cache.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "constraint/mask_prefetcher.h"

namespace walsh {

ConstraintCache::ConstraintCache(std::shared_ptr<const TokenTrie> trie, int64_t max_bytes,
                                 MaskPrefetcher* warm_on)
    : trie_(std::move(trie)), max_bytes_(max_bytes), warm_on_(warm_on) {}

absl::StatusOr<std::shared_ptr<const CompiledGrammar>> ConstraintCache::Get(
    const ConstraintSpec& spec) {
  const std::string key = absl::StrCat(static_cast<int>(spec.kind), ":", spec.text);
  std::shared_ptr<const CompiledGrammar> lease;
  bool fresh = false;
  {
    MutexLock lock(&mu_);
    if (auto it = by_key_.find(key); it != by_key_.end()) {
      ++hits_;
      lru_.splice(lru_.begin(), lru_, it->second);
      lease = LeaseLocked(lru_.front(), fresh);
      EvictLocked();  // the grammars' masks grow as they are used, hits included
    } else {
      ++misses_;
    }
  }
  if (lease == nullptr) {
    ASSIGN_OR_RETURN(Grammar grammar, ConstraintGrammarOnOwnStack(spec));
    auto compiled = std::make_shared<const CompiledGrammar>(grammar, trie_);
    MutexLock lock(&mu_);
    auto it = by_key_.find(key);
    if (it == by_key_.end()) {
      lru_.push_front(
          {key, compiled, grammar.element_count() * 48 + static_cast<int64_t>(key.size())});
      it = by_key_.emplace(key, lru_.begin()).first;
    }
    lease = LeaseLocked(*it->second, fresh);
    EvictLocked();
  }
  if (fresh && warm_on_ != nullptr && lease->warm_remaining() > 0) warm_on_->Warm(lease);
  return lease;
}

std::shared_ptr<const CompiledGrammar> ConstraintCache::LeaseLocked(Entry& e, bool& fresh) {
  if (std::shared_ptr<const CompiledGrammar> held = e.lease.lock()) return held;
  // Shares the grammar, with a life of its own: the warm-up's weak handle expires when the
  // last request's copy goes, while the cache's entry lives on.
  auto owner = std::make_shared<std::shared_ptr<const CompiledGrammar>>(e.grammar);
  std::shared_ptr<const CompiledGrammar> lease(owner, owner->get());
  e.lease = lease;
  fresh = true;
  return lease;
}

void ConstraintCache::EvictLocked() {
  while (lru_.size() > 1 && BytesLocked() > max_bytes_) {
    by_key_.erase(lru_.back().key);
    lru_.pop_back();
  }
}

int64_t ConstraintCache::BytesLocked() const {
  int64_t total = 0;
  for (const Entry& e : lru_) total += e.grammar_bytes + e.grammar->cached_bytes();
  return total;
}

int64_t ConstraintCache::entries() const {
  MutexLock lock(&mu_);
  return static_cast<int64_t>(lru_.size());
}

int64_t ConstraintCache::cached_contexts() const {
  MutexLock lock(&mu_);
  int64_t total = 0;
  for (const Entry& e : lru_) total += e.grammar->cached_contexts();
  return total;
}

int64_t ConstraintCache::contexts_to_warm() const {
  MutexLock lock(&mu_);
  int64_t total = 0;
  for (const Entry& e : lru_) {
    if (!e.lease.expired()) total += e.grammar->warm_remaining();  // being warmed
  }
  return total;
}

int64_t ConstraintCache::hits() const {
  MutexLock lock(&mu_);
  return hits_;
}
int64_t ConstraintCache::misses() const {
  MutexLock lock(&mu_);
  return misses_;
}
int64_t ConstraintCache::bytes() const {
  MutexLock lock(&mu_);
  return BytesLocked();
}

}  // namespace walsh
