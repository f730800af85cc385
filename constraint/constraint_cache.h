// The constraints a request may carry, compiled once per content and kept in a cache bounded in
// bytes (least recently used first out), so requests with the same schema share one grammar and
// its growing mask cache.
#ifndef WALSH_CONSTRAINT_CONSTRAINT_CACHE_H_
#define WALSH_CONSTRAINT_CONSTRAINT_CACHE_H_

#include <cstdint>
#include <list>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "common/mutex.h"
#include "constraint/compiled_grammar.h"
#include "constraint/constraint_spec.h"
#include "constraint/grammar.h"
#include "constraint/token_trie.h"

namespace walsh {

class MaskPrefetcher;

class ConstraintCache {
 public:
  // With `warm_on`, a grammar's masks are warmed on its threads (which must outlive the cache)
  // while some request uses it: from when the request that brought it waits for its prefill
  // until the last request holding it ends (a later request resumes it).
  ConstraintCache(std::shared_ptr<const TokenTrie> trie, int64_t max_bytes,
                  MaskPrefetcher* warm_on = nullptr);

  // The grammar, as a handle for one request: it keeps the grammar whole after an eviction,
  // and the warm-up goes on while some request holds one.
  absl::StatusOr<std::shared_ptr<const CompiledGrammar>> Get(const ConstraintSpec& spec);

  int64_t hits() const;
  int64_t misses() const;
  int64_t bytes() const;  // grammars plus the masks they cached so far
  int64_t entries() const;
  // Over the cached grammars: contexts whose masks are cached, and those warm-up has yet to do
  // for the grammars some request uses (the others stay lazy until one does).
  int64_t cached_contexts() const;
  int64_t contexts_to_warm() const;

 private:
  struct Entry {
    std::string key;
    std::shared_ptr<const CompiledGrammar> grammar;
    int64_t grammar_bytes = 0;
    std::weak_ptr<const CompiledGrammar> lease;  // the requests' handle, while one holds it
  };
  // The requests' handle to `e`'s grammar; a new one (when none is held) is queued for warming.
  std::shared_ptr<const CompiledGrammar> LeaseLocked(Entry& e, bool& fresh)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  int64_t BytesLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Least recently used out until the rest fits (the most recent always stays).
  void EvictLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  std::shared_ptr<const TokenTrie> trie_;
  const int64_t max_bytes_;
  MaskPrefetcher* const warm_on_;
  mutable Mutex mu_;
  std::list<Entry> lru_ ABSL_GUARDED_BY(mu_);  // most recent first
  absl::flat_hash_map<std::string, std::list<Entry>::iterator> by_key_ ABSL_GUARDED_BY(mu_);
  int64_t hits_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t misses_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace walsh

#endif  // WALSH_CONSTRAINT_CONSTRAINT_CACHE_H_
