// The bookkeeping of prefix caching (docs/prefix_caching.md): which KV pages hold which token
// prefixes, and which GatedDeltaNet state snapshots exist, so a new sequence can start from a
// cached prefix instead of recomputing it. The storage stays in the backend; this class only
// decides which page and slot is whose, and the engine copies (engine.h).
//
// Pages. A full page of a sequence is shared by content: its key is the node of the page before
// it (the chain from the first page) and its page_size token ids, compared in full, so a match
// is exact, never a hash collision. Nodes form a tree from the root (the empty prefix). A node
// is pinned by the sequences whose page tables hold it, its children and the snapshots at its
// end; an unpinned node is evictable, least recently used first. A page whose content is
// already cached is given back and the sequence uses the cached one: both were computed from
// the same tokens, and the engine is schedule-invariant, so they hold the same bits.
//
// Snapshots. A GatedDeltaNet layer's state summarizes the whole prefix, so a hit at position p
// also needs the recurrent and conv state exactly as it was after p tokens. A snapshot is a
// state slot of its own (from the --prefix-cache-bytes budget) taken at p, plus a copy of the
// partial last page (positions below p in the page p falls in) when p is not on a page
// boundary. A hit restores both into the new sequence: the slot is copied and the partial page
// is copied into a fresh page (copy on write: the new sequence appends to it).
//
// Snapshot eviction is a segmented LRU by tier: speculative snapshots (taken every interval of
// a long prefill, on the chance a later request branches there) go first, then ordinary ones
// (where a prompt or a request ended, or a branch was seen), then those a hit has proven, least
// recently used first within a tier. Proven snapshots hold at most half the slots: a hit past
// that demotes the least recently used proven one to ordinary, so a once-popular prefix cannot
// keep the slots forever.
#ifndef WALSH_WORKER_ENGINE_PREFIX_CACHE_H_
#define WALSH_WORKER_ENGINE_PREFIX_CACHE_H_

#include <cstdint>
#include <optional>
#include <set>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/types/span.h"
#include "worker/engine/kv_page_pool.h"

namespace walsh {

class PrefixCache {
 public:
  using NodeId = uint64_t;
  using SnapshotId = uint64_t;
  static constexpr NodeId kRoot = 0;

  // Eviction order, first to go first.
  enum class SnapshotTier : int { kSpeculative = 0, kOrdinary = 1, kProven = 2 };

  struct Snapshot {
    NodeId node = kRoot;        // the last full page before the snapshot's position
    std::vector<int32_t> tail;  // the tokens after that page, fewer than page_size
    int32_t slot = -1;          // the state slot holding the snapshot
    int32_t tail_page = -1;     // the copy of the partial page, or -1 when tail is empty
    int64_t length = 0;         // the position the snapshot was taken at
    uint64_t id = 0;            // its SnapshotId
  };

  // The longest cached prefix of a token sequence.
  struct Match {
    std::vector<NodeId> nodes;         // the full pages matched, from the first
    std::vector<int32_t> pages;        // their KV pages
    int64_t kv_tokens = 0;             // the tokens those pages hold
    std::optional<Snapshot> snapshot;  // the longest usable snapshot on that path, if any
    SnapshotId snapshot_id = 0;
    int64_t hit_tokens() const { return snapshot ? snapshot->length : 0; }
  };

  struct Counts {
    int64_t nodes = 0;              // cached full pages
    int64_t snapshots = 0;          // snapshots held
    int64_t tail_pages = 0;         // snapshots' copies of partial pages
    int64_t reclaimable_pages = 0;  // pages the cache gives back under pressure
    int64_t page_evictions = 0, snapshot_evictions = 0;
  };

  // Snapshots use the state slots [first_snapshot_slot, first_snapshot_slot + snapshot_slots).
  PrefixCache(KvPagePool* pages, int64_t snapshot_slots, int32_t first_snapshot_slot);

  int64_t snapshot_slots() const { return snapshot_slots_; }

  // The longest prefix of `tokens` whose pages are cached, and the longest snapshot on it no
  // longer than max_hit tokens. Changes nothing.
  Match Lookup(absl::Span<const int32_t> tokens, int64_t max_hit) const;

  // How many of the first n nodes of a match some sequence holds: their pages are in use
  // already, so a sequence that shares them takes no page of the pool for them (a cached page
  // no sequence holds counts as free, reclaimable, until one takes it).
  int64_t InUseAmong(const Match& m, int64_t n) const;

  // A sequence starts or stops holding a node's page.
  void AddUser(NodeId node);
  void RemoveUser(NodeId node);
  // A sequence's page after `parent` filled with `tokens` (page_size of them): returns the node
  // now holding that content, with the sequence counted as its user. If the content was cached
  // already, *page goes back to the pool and is replaced by the cached page.
  NodeId Commit(NodeId parent, absl::Span<const int32_t> tokens, int32_t* page);

  // Marks a snapshot at (node, tail) used now. False when there is none.
  bool Touch(NodeId node, absl::Span<const int32_t> tail);
  // A sequence starts from the snapshot: it is used now, and proven.
  void Hit(SnapshotId id);
  // Room for a new snapshot at (node, tail): a state slot, and a page for the partial page when
  // tail is not empty, evicting the least recently used cache entries for them. nullopt when
  // the budget has no slot or no page can be had; the caller copies state and page into the
  // returned snapshot, which is registered already.
  std::optional<Snapshot> AddSnapshot(NodeId node, absl::Span<const int32_t> tail, int64_t length,
                                      SnapshotTier tier = SnapshotTier::kOrdinary);

  // Forgets a snapshot (one whose copy failed); nothing if it is gone already.
  void DropSnapshot(SnapshotId id);

  // Evicts cache entries until `n` pages are free (a running sequence always wins over the
  // cache): unpinned pages first, least recently used first, then snapshots other than `keep`.
  // False if the cache cannot free that many.
  bool MakeRoom(int64_t n, SnapshotId keep = 0);

  Counts counts() const;

 private:
  struct PageKey {
    NodeId parent;
    std::vector<int32_t> tokens;
    bool operator==(const PageKey&) const = default;
    template <typename H>
    friend H AbslHashValue(H h, const PageKey& k) {
      return H::combine(std::move(h), k.parent, k.tokens);
    }
  };
  struct Node {
    PageKey key;
    int32_t page = -1;
    int64_t users = 0, children = 0;
    std::vector<SnapshotId> snapshots;
    uint64_t last_use = 0;
  };
  struct SnapshotEntry {
    Snapshot snapshot;
    SnapshotTier tier = SnapshotTier::kOrdinary;
    uint64_t last_use = 0;
  };
  using SnapshotOrder = std::tuple<SnapshotTier, uint64_t, SnapshotId>;
  static SnapshotOrder OrderOf(SnapshotId id, const SnapshotEntry& e) {
    return {e.tier, e.last_use, id};
  }
  // Moves a snapshot to `tier`, used now.
  void Relink(SnapshotId id, SnapshotEntry& e, SnapshotTier tier);

  int64_t Pins(const Node& n) const {
    return n.users + n.children + static_cast<int64_t>(n.snapshots.size());
  }
  // Keeps evictable_ in step after a node's pins or last use changed.
  void Unlist(NodeId id, const Node& n);
  void Relist(NodeId id, const Node& n);
  void EvictNode(NodeId id);
  void EvictSnapshot(SnapshotId id);

  KvPagePool* pages_;
  int64_t page_size_;
  int64_t snapshot_slots_;
  std::vector<int32_t> free_slots_;
  uint64_t clock_ = 0;
  NodeId next_node_ = 1;
  SnapshotId next_snapshot_ = 1;
  absl::flat_hash_map<NodeId, Node> nodes_;  // the root included
  absl::flat_hash_map<PageKey, NodeId> by_key_;
  absl::flat_hash_map<SnapshotId, SnapshotEntry> snapshots_;
  std::set<std::pair<uint64_t, NodeId>> evictable_;  // unpinned nodes by last use
  std::set<SnapshotOrder> snapshot_lru_;             // snapshots in eviction order
  int64_t proven_ = 0;                               // snapshots in the proven tier
  int64_t nodes_in_use_ = 0;                         // nodes with users
  int64_t tail_pages_ = 0;
  int64_t page_evictions_ = 0, snapshot_evictions_ = 0;
};

}  // namespace walsh

#endif  // WALSH_WORKER_ENGINE_PREFIX_CACHE_H_
