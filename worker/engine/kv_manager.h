// The memory of the sequences (docs/architecture.md, "State per sequence and admission"): the KV
// page pool, the GatedDeltaNet state slots, the prefix cache, and every sequence's page table
// and length. It decides which page and slot is whose; it holds no device memory. Its owner is
// the scheduler (worker/server/scheduler.h), or a solo runner (solo_runner.h) for the tools and
// tests: the engine runs steps on the page tables it hands out and makes the copies it asks for
// (a snapshot restored into a new sequence, or taken from one), through sequence_runner.h. The
// scheduler asks it what a request would take and reserves each step's pages with it before the
// step (Reserve), so a step it planned never runs out of pages mid-way.
#ifndef WALSH_WORKER_ENGINE_KV_MANAGER_H_
#define WALSH_WORKER_ENGINE_KV_MANAGER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "worker/engine/cache_plan.h"
#include "worker/engine/kv_page_pool.h"
#include "worker/engine/prefix_cache.h"
#include "worker/engine/state_slot_pool.h"
#include "worker/engine/step_input.h"

namespace walsh {

// kv_pages_used counts the pages sequences hold; pages only the prefix cache holds are free
// (it gives them back under pressure) and are counted in PrefixCacheStats.
struct EngineStats {
  int64_t kv_pages_used, kv_pages_total, state_slots_used, state_slots_total;
};

// What a new sequence found in the prefix cache.
enum class PrefixOutcome {
  kHit,         // it starts from a snapshot
  kNoPrefix,    // nothing of it is cached
  kNoSnapshot,  // some of its pages are cached, but no snapshot on them it could use
  kNoRoom,      // a snapshot matched, but no page was free for its partial page
  kOff,         // prefix caching is off
};
const char* PrefixOutcomeName(PrefixOutcome o);

struct PrefixLookup {
  PrefixOutcome outcome = PrefixOutcome::kOff;
  int64_t kv_tokens = 0;   // tokens whose KV pages are cached (whole pages)
  int64_t hit_tokens = 0;  // tokens the sequence starts with (its length)
};

struct PrefixCacheStats {
  int64_t pages = 0, snapshots = 0, snapshot_slots = 0;
  int64_t page_bytes = 0, snapshot_bytes = 0;  // held by the cache (pages in use included)
  int64_t page_evictions = 0, snapshot_evictions = 0;
};

// The budgets of the sequences' memory, as the flags give them (docs/operations.md): the pools
// are planned from them and the room the engine reports (cache_plan.h).
struct CacheOptions {
  int64_t page_size = 16;                       // positions per KV page
  int64_t kv_cache_bytes = int64_t{256} << 20;  // pool of KV pages for the attention layers
  int64_t state_bytes = int64_t{256} << 20;     // pool of GatedDeltaNet state slots
  int64_t kv_pages = 0;     // if > 0: this many pages, whatever kv_cache_bytes says
  int64_t state_slots = 0;  // if > 0: this many slots, whatever state_bytes says
  // Prefix caching (prefix_cache.h): full KV pages shared by content, and GatedDeltaNet state
  // snapshots in a budget of their own (whole state slots, and one KV page each for a partial
  // last page, taken from the KV pool).
  bool prefix_caching = true;
  int64_t prefix_cache_bytes = int64_t{256} << 20;
};

class KvManager {
 public:
  // `uses_kv` is false for a model without attention layers (no page is ever taken); a prefix
  // cache exists when `prefix_caching` and uses_kv. Snapshot slots follow the sequence slots.
  KvManager(const CachePlan& plan, int64_t page_size, int64_t page_bytes, int64_t slot_bytes,
            bool prefix_caching, bool uses_kv);
  // The pools planned from the budgets, what a page and a slot take (`units`), and the room the
  // engine has for them (Engine::CacheRoom): an error names the budget that holds nothing.
  static absl::StatusOr<std::unique_ptr<KvManager>> Plan(const CacheOptions& options,
                                                         const CacheUnits& units, int64_t room);
  KvManager(const KvManager&) = delete;  // the prefix cache points at the pool
  KvManager& operator=(const KvManager&) = delete;

  int64_t page_size() const { return pages_.page_size(); }
  int64_t page_bytes() const { return page_bytes_; }
  int64_t total_pages() const { return pages_.total(); }
  // What the engine allocates for it (Engine::AllocateCaches).
  const CachePlan& plan() const { return plan_; }
  bool prefix_caching() const { return prefix_ != nullptr; }

  // A new sequence: a state slot, and, when the prefix cache has a snapshot on `tokens` that
  // leaves a token to compute, that snapshot's pages. `restore` is the copy the engine makes
  // before the sequence runs (to_slot alone, from_slot < 0: clear it). RESOURCE_EXHAUSTED when
  // no slot is free.
  struct Started {
    SequenceId id = 0;
    PrefixLookup lookup;
    CacheCopy restore;
  };
  absl::StatusOr<Started> AddSequence(absl::Span<const int32_t> tokens);
  // Where to take a snapshot of the sequence at its length, registered already: the engine
  // copies it, or drops it (DropSnapshot) when the copy failed. nullopt when it is cached
  // already, caching is off, or the budget has no room. `speculative`: evicted first
  // (prefix_cache.h).
  struct SnapshotPlan {
    PrefixCache::SnapshotId id = 0;
    CacheCopy copy;
  };
  absl::StatusOr<std::optional<SnapshotPlan>> PlanSnapshot(SequenceId id, bool speculative);
  void DropSnapshot(PrefixCache::SnapshotId id);
  // Frees the sequence's own pages and slot, and its pins on shared ones.
  absl::Status RemoveSequence(SequenceId id);

  absl::StatusOr<int64_t> SequenceLength(SequenceId id) const;
  // The sequence's state slot and page table; nullptr for an unknown one.
  struct Sequence {
    int64_t length = 0;
    int32_t slot = -1;
    std::vector<int32_t> pages;
    // With prefix caching: the tokens fed, and the cache nodes of the full pages (every full
    // page is one; the partial last page is the sequence's own).
    std::vector<int32_t> tokens;
    std::vector<PrefixCache::NodeId> nodes;
    // While a speculative step awaits its rollback: the length before it, and the planes that
    // hold the state after each of its tokens but the last.
    int64_t speculated_from = -1;
    std::vector<int32_t> planes;
    // While a checkpoint is held: its length, and the slot holding the state at it.
    int64_t checkpoint_length = -1;
    int32_t checkpoint_slot = -1;
    bool awaits_rollback() const { return speculated_from >= 0 && length > speculated_from; }
  };
  const Sequence* Find(SequenceId id) const;

  // What admission asks. The pages the sequence's page table holds (shared ones included; 0 for
  // an unknown one), and the pages a new sequence of `tokens` would share, through a
  // prefix-cache hit, with pages in use already: it needs not find them free.
  int64_t PagesHeld(SequenceId id) const;
  int64_t SharedPagesInUse(absl::Span<const int32_t> tokens) const;

  // Refuses a step the sequences are not ready for: an unknown or repeated sequence, one with a
  // speculative step to roll back first, or a reserved speculative step fed otherwise.
  absl::Status CheckStep(const std::vector<SequenceInput>& batch) const;
  // The memory each entry of `batch` runs on; its pages must have been reserved.
  std::vector<SequenceCache> StepCaches(const std::vector<SequenceInput>& batch) const;
  // The pages a step over `batch` would take from the pool. Changes nothing.
  int64_t PagesToGrow(const std::vector<SequenceInput>& batch) const;
  // Takes them into the sequences' page tables, evicting cache entries for them, and the state
  // planes of speculative inputs: all or none (RESOURCE_EXHAUSTED, nothing changed). Unknown
  // sequences are skipped; a step whose pages and planes were reserved takes none.
  absl::Status Reserve(const std::vector<SequenceInput>& batch);
  // After a step: the sequence is `in.tokens` longer, and its full pages enter the prefix cache
  // (after its rollback, for a speculative step).
  void Advance(const SequenceInput& in);
  // The plane holding the state a speculative sequence rolls back to at `length` (its length
  // before the step + 1 .. its length now), or -1 when that is its own state (length now).
  // Refuses a sequence with no speculative step pending, or a length out of that range.
  absl::StatusOr<int32_t> RollbackPlane(SequenceId id, int64_t length) const;
  // Ends the speculative step at `length` once the engine has copied that plane: later
  // positions are dropped (pages past them go back), the planes go back, full pages enter the
  // prefix cache.
  void Rollback(SequenceId id, int64_t length);

  // A checkpoint (what a draft model's sequence drafts from, draft_model_drafter.h): the
  // sequence's state at its length now, kept in a slot of its own so that the steps after it can
  // be undone at once. `Checkpoint` returns the copy the engine makes into that slot (on failure
  // the caller ends it, not restored). Refused with prefix caching on (pages past it may be
  // shared by then), for a sequence that holds a checkpoint or has a speculative step
  // pending (reserved or awaiting its rollback), and RESOURCE_EXHAUSTED when no slot is free.
  absl::StatusOr<CacheCopy> Checkpoint(SequenceId id);
  // The copy that brings the checkpoint's state back into the sequence's slot; once it is made,
  // EndCheckpoint(id, /*restored=*/true) drops the positions past the checkpoint.
  absl::StatusOr<CacheCopy> CheckpointRestore(SequenceId id) const;
  // Gives the checkpoint's slot back; `restored`: the sequence is cut back to it (refused while a
  // speculative step is pending).
  absl::Status EndCheckpoint(SequenceId id, bool restored);

  EngineStats Stats() const;
  PrefixCacheStats PrefixStats() const;

 private:
  void CommitFullPages(Sequence& sq);
  // Cuts the sequence to `length`, giving back the pages past it (its own ones).
  void Truncate(Sequence& sq, int64_t length);
  int64_t NewPages(const Sequence& sq, int64_t tokens) const;

  CachePlan plan_;
  KvPagePool pages_;
  StateSlotPool states_;
  std::unique_ptr<PrefixCache> prefix_;  // null when prefix caching is off
  int64_t page_bytes_, slot_bytes_;
  bool uses_kv_;
  absl::flat_hash_map<SequenceId, Sequence> sequences_;
  SequenceId next_id_ = 1;
};

}  // namespace walsh

#endif  // WALSH_WORKER_ENGINE_KV_MANAGER_H_
