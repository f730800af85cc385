#include "worker/engine/prefix_cache.h"

#include <algorithm>

namespace walsh {

PrefixCache::PrefixCache(KvPagePool* pages, int64_t snapshot_slots, int32_t first_snapshot_slot)
    : pages_(pages), page_size_(pages->page_size()), snapshot_slots_(snapshot_slots) {
  for (int64_t s = snapshot_slots - 1; s >= 0; --s) {
    free_slots_.push_back(first_snapshot_slot + static_cast<int32_t>(s));
  }
  nodes_[kRoot] = Node{};
}

int64_t PrefixCache::InUseAmong(const Match& m, int64_t n) const {
  int64_t in_use = 0;
  for (int64_t i = 0; i < n && i < static_cast<int64_t>(m.nodes.size()); ++i) {
    auto it = nodes_.find(m.nodes[i]);
    if (it != nodes_.end() && it->second.users > 0) ++in_use;
  }
  return in_use;
}

PrefixCache::Match PrefixCache::Lookup(absl::Span<const int32_t> tokens, int64_t max_hit) const {
  Match m;
  NodeId at = kRoot;
  for (int64_t begin = 0; begin + page_size_ <= static_cast<int64_t>(tokens.size());
       begin += page_size_) {
    PageKey key{at,
                std::vector<int32_t>(tokens.begin() + begin, tokens.begin() + begin + page_size_)};
    auto it = by_key_.find(key);
    if (it == by_key_.end()) break;
    at = it->second;
    m.nodes.push_back(at);
    m.pages.push_back(nodes_.at(at).page);
  }
  m.kv_tokens = static_cast<int64_t>(m.nodes.size()) * page_size_;
  // Snapshots at a deeper node are longer, so the first depth with a usable one has the best.
  for (int64_t depth = static_cast<int64_t>(m.nodes.size()); depth >= 0 && !m.snapshot; --depth) {
    const Node& node = nodes_.at(depth == 0 ? kRoot : m.nodes[depth - 1]);
    const int64_t base = depth * page_size_;
    for (SnapshotId sid : node.snapshots) {
      const Snapshot& s = snapshots_.at(sid).snapshot;
      const int64_t tail = static_cast<int64_t>(s.tail.size());
      if (s.length > max_hit || base + tail > static_cast<int64_t>(tokens.size())) continue;
      if (!std::equal(s.tail.begin(), s.tail.end(), tokens.begin() + base)) continue;
      if (!m.snapshot || s.length > m.snapshot->length) {
        m.snapshot = s;
        m.snapshot_id = sid;
      }
    }
  }
  return m;
}

void PrefixCache::Unlist(NodeId id, const Node& n) {
  if (id != kRoot && Pins(n) == 0) evictable_.erase({n.last_use, id});
}

void PrefixCache::Relist(NodeId id, const Node& n) {
  if (id != kRoot && Pins(n) == 0) evictable_.insert({n.last_use, id});
}

void PrefixCache::AddUser(NodeId id) {
  Node& n = nodes_.at(id);
  Unlist(id, n);
  if (n.users++ == 0) ++nodes_in_use_;
  n.last_use = ++clock_;
}

void PrefixCache::RemoveUser(NodeId id) {
  Node& n = nodes_.at(id);
  if (--n.users == 0) --nodes_in_use_;
  n.last_use = ++clock_;
  Relist(id, n);
}

PrefixCache::NodeId PrefixCache::Commit(NodeId parent, absl::Span<const int32_t> tokens,
                                        int32_t* page) {
  PageKey key{parent, std::vector<int32_t>(tokens.begin(), tokens.end())};
  if (auto it = by_key_.find(key); it != by_key_.end()) {
    const NodeId id = it->second;
    pages_->Release({*page});
    *page = nodes_.at(id).page;
    AddUser(id);
    return id;
  }
  const NodeId id = next_node_++;
  Node& p = nodes_.at(parent);
  Unlist(parent, p);
  ++p.children;
  Node& n = nodes_[id];
  n.key = key;
  n.page = *page;
  by_key_[std::move(key)] = id;
  AddUser(id);
  return id;
}

bool PrefixCache::Touch(NodeId node, absl::Span<const int32_t> tail) {
  for (SnapshotId sid : nodes_.at(node).snapshots) {
    SnapshotEntry& e = snapshots_.at(sid);
    if (!std::equal(e.snapshot.tail.begin(), e.snapshot.tail.end(), tail.begin(), tail.end())) {
      continue;
    }
    Relink(sid, e, e.tier);
    return true;
  }
  return false;
}

void PrefixCache::Relink(SnapshotId id, SnapshotEntry& e, SnapshotTier tier) {
  snapshot_lru_.erase(OrderOf(id, e));
  proven_ += (tier == SnapshotTier::kProven) - (e.tier == SnapshotTier::kProven);
  e.tier = tier;
  e.last_use = ++clock_;
  snapshot_lru_.insert(OrderOf(id, e));
}

void PrefixCache::Hit(SnapshotId id) {
  auto it = snapshots_.find(id);
  if (it == snapshots_.end()) return;
  Relink(id, it->second, SnapshotTier::kProven);
  const int64_t cap = std::max<int64_t>(1, snapshot_slots_ / 2);
  if (proven_ > cap) {
    // The least recently used proven snapshot goes back to ordinary, keeping its age.
    auto oldest = snapshot_lru_.lower_bound({SnapshotTier::kProven, 0, 0});
    const SnapshotId demoted = std::get<2>(*oldest);
    SnapshotEntry& d = snapshots_.at(demoted);
    snapshot_lru_.erase(oldest);
    d.tier = SnapshotTier::kOrdinary;
    --proven_;
    snapshot_lru_.insert(OrderOf(demoted, d));
  }
}

std::optional<PrefixCache::Snapshot> PrefixCache::AddSnapshot(NodeId node,
                                                              absl::Span<const int32_t> tail,
                                                              int64_t length, SnapshotTier tier) {
  if (snapshot_slots_ == 0) return std::nullopt;
  Snapshot s;
  s.node = node;
  s.tail.assign(tail.begin(), tail.end());
  s.length = length;
  if (!tail.empty()) {
    // The partial page first, so no snapshot is evicted for a slot when the page cannot be had.
    // The node it hangs on is pinned meanwhile: only unpinned pages are evicted for it.
    Unlist(node, nodes_.at(node));
    nodes_.at(node).snapshots.push_back(0);  // a placeholder pin while room is made
    const bool room = pages_->free() > 0 || MakeRoom(1);
    Node& n = nodes_.at(node);  // looked up again: MakeRoom erased other nodes
    n.snapshots.pop_back();
    Relist(node, n);
    if (!room) return std::nullopt;
    s.tail_page = (*pages_->Allocate(1))[0];
    ++tail_pages_;
  }
  if (free_slots_.empty()) EvictSnapshot(std::get<2>(*snapshot_lru_.begin()));
  s.slot = free_slots_.back();
  free_slots_.pop_back();
  const SnapshotId sid = next_snapshot_++;
  Node& n = nodes_.at(node);
  Unlist(node, n);
  n.snapshots.push_back(sid);
  SnapshotEntry& e = snapshots_[sid];
  s.id = sid;
  e.snapshot = s;
  e.tier = tier;
  e.last_use = ++clock_;
  snapshot_lru_.insert(OrderOf(sid, e));
  return s;
}

void PrefixCache::EvictNode(NodeId id) {
  Node& n = nodes_.at(id);
  evictable_.erase({n.last_use, id});
  pages_->Release({n.page});
  const NodeId parent = n.key.parent;
  by_key_.erase(n.key);
  nodes_.erase(id);
  Node& p = nodes_.at(parent);
  --p.children;
  Relist(parent, p);
  ++page_evictions_;
}

void PrefixCache::EvictSnapshot(SnapshotId sid) {
  SnapshotEntry& e = snapshots_.at(sid);
  snapshot_lru_.erase(OrderOf(sid, e));
  if (e.tier == SnapshotTier::kProven) --proven_;
  free_slots_.push_back(e.snapshot.slot);
  if (e.snapshot.tail_page >= 0) {
    pages_->Release({e.snapshot.tail_page});
    --tail_pages_;
  }
  const NodeId node = e.snapshot.node;
  snapshots_.erase(sid);
  Node& n = nodes_.at(node);
  std::erase(n.snapshots, sid);
  Relist(node, n);
  ++snapshot_evictions_;
}

void PrefixCache::DropSnapshot(SnapshotId id) {
  if (snapshots_.contains(id)) EvictSnapshot(id);
}

bool PrefixCache::MakeRoom(int64_t n, SnapshotId keep) {
  // Nothing is evicted when even everything would not be enough.
  int64_t can_free = counts().reclaimable_pages;
  if (auto it = snapshots_.find(keep);
      it != snapshots_.end() && it->second.snapshot.tail_page >= 0) {
    --can_free;
  }
  if (pages_->free() + can_free < n) return false;
  while (pages_->free() < n) {
    auto victim = snapshot_lru_.begin();
    if (victim != snapshot_lru_.end() && std::get<2>(*victim) == keep) ++victim;
    if (!evictable_.empty()) {
      EvictNode(evictable_.begin()->second);
    } else if (victim != snapshot_lru_.end()) {
      EvictSnapshot(std::get<2>(*victim));
    } else {
      return false;
    }
  }
  return true;
}

PrefixCache::Counts PrefixCache::counts() const {
  Counts c;
  c.nodes = static_cast<int64_t>(nodes_.size()) - 1;
  c.snapshots = static_cast<int64_t>(snapshots_.size());
  c.tail_pages = tail_pages_;
  c.reclaimable_pages = c.nodes - nodes_in_use_ + tail_pages_;
  c.page_evictions = page_evictions_;
  c.snapshot_evictions = snapshot_evictions_;
  return c;
}

}  // namespace walsh
