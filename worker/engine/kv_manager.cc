#include "worker/engine/kv_manager.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace walsh {

const char* PrefixOutcomeName(PrefixOutcome o) {
  switch (o) {
    case PrefixOutcome::kHit:
      return "hit";
    case PrefixOutcome::kNoPrefix:
      return "no_prefix";
    case PrefixOutcome::kNoSnapshot:
      return "no_snapshot";
    case PrefixOutcome::kNoRoom:
      return "no_room";
    case PrefixOutcome::kOff:
      return "off";
  }
  return "off";
}

KvManager::KvManager(const CachePlan& plan, int64_t page_size, int64_t page_bytes,
                     int64_t slot_bytes, bool prefix_caching, bool uses_kv)
    : pages_(plan.pages, page_size),
      states_(plan.slots),
      page_bytes_(page_bytes),
      slot_bytes_(slot_bytes),
      uses_kv_(uses_kv) {
  // Prefix keys are KV pages: a model without attention layers has none to share.
  if (prefix_caching && uses_kv) {
    prefix_ = std::make_unique<PrefixCache>(&pages_, plan.snapshot_slots,
                                            static_cast<int32_t>(plan.slots));
  }
}

absl::StatusOr<KvManager::Started> KvManager::AddSequence(absl::Span<const int32_t> tokens) {
  Started started;
  PrefixLookup& found = started.lookup;
  std::optional<PrefixCache::Match> match;
  if (prefix_ != nullptr && !tokens.empty()) {
    match = prefix_->Lookup(tokens, static_cast<int64_t>(tokens.size()) - 1);
    found.kv_tokens = match->kv_tokens;
    found.outcome = match->snapshot        ? PrefixOutcome::kHit
                    : match->kv_tokens > 0 ? PrefixOutcome::kNoSnapshot
                                           : PrefixOutcome::kNoPrefix;
  }
  ASSIGN_OR_RETURN(int32_t slot, states_.Allocate());
  started.id = next_id_++;
  Sequence& sq = sequences_[started.id];
  sq.slot = slot;
  started.restore.to_slot = slot;
  if (found.outcome != PrefixOutcome::kHit) return started;
  const PrefixCache::Snapshot& snap = *match->snapshot;
  const int64_t full = snap.length / pages_.page_size();
  int32_t fresh = -1;
  if (snap.tail_page >= 0) {
    // The hit's own pages are pinned first, so making room cannot evict them.
    for (int64_t i = 0; i < full; ++i) prefix_->AddUser(match->nodes[i]);
    if (pages_.free() > 0 || prefix_->MakeRoom(1, match->snapshot_id)) {
      fresh = (*pages_.Allocate(1))[0];
    }
    for (int64_t i = 0; i < full; ++i) prefix_->RemoveUser(match->nodes[i]);
    if (fresh < 0) {
      found.outcome = PrefixOutcome::kNoRoom;
      return started;
    }
  }
  sq.nodes.assign(match->nodes.begin(), match->nodes.begin() + full);
  sq.pages.assign(match->pages.begin(), match->pages.begin() + full);
  for (PrefixCache::NodeId n : sq.nodes) prefix_->AddUser(n);
  if (fresh >= 0) sq.pages.push_back(fresh);
  sq.tokens.assign(tokens.begin(), tokens.begin() + snap.length);
  sq.length = snap.length;
  prefix_->Hit(match->snapshot_id);
  found.hit_tokens = snap.length;
  started.restore = {.from_slot = snap.slot,
                     .to_slot = slot,
                     .from_page = fresh >= 0 ? snap.tail_page : -1,
                     .to_page = fresh};
  return started;
}

absl::StatusOr<std::optional<KvManager::SnapshotPlan>> KvManager::PlanSnapshot(SequenceId id,
                                                                               bool speculative) {
  auto it = sequences_.find(id);
  if (it == sequences_.end()) return absl::NotFoundError(absl::StrCat("no sequence ", id));
  Sequence& sq = it->second;
  if (prefix_ == nullptr || sq.length == 0) return std::nullopt;
  const int64_t page = pages_.page_size();
  const int64_t full = sq.length / page;
  const PrefixCache::NodeId node = full == 0 ? PrefixCache::kRoot : sq.nodes[full - 1];
  const absl::Span<const int32_t> tail =
      absl::MakeConstSpan(sq.tokens).subspan(full * page, sq.length - full * page);
  if (prefix_->Touch(node, tail)) return std::nullopt;
  std::optional<PrefixCache::Snapshot> snap = prefix_->AddSnapshot(
      node, tail, sq.length,
      speculative ? PrefixCache::SnapshotTier::kSpeculative : PrefixCache::SnapshotTier::kOrdinary);
  if (!snap) return std::nullopt;
  const bool partial = snap->tail_page >= 0;
  return SnapshotPlan{.id = snap->id,
                      .copy = {.from_slot = sq.slot,
                               .to_slot = snap->slot,
                               .from_page = partial ? sq.pages[full] : -1,
                               .to_page = snap->tail_page}};
}

void KvManager::DropSnapshot(PrefixCache::SnapshotId id) {
  if (prefix_ != nullptr) prefix_->DropSnapshot(id);
}

absl::Status KvManager::RemoveSequence(SequenceId id) {
  auto it = sequences_.find(id);
  if (it == sequences_.end()) return absl::NotFoundError(absl::StrCat("no sequence ", id));
  Sequence& sq = it->second;
  for (PrefixCache::NodeId n : sq.nodes) prefix_->RemoveUser(n);
  pages_.Release(std::vector<int32_t>(sq.pages.begin() + sq.nodes.size(), sq.pages.end()));
  states_.Release(sq.slot);
  sequences_.erase(it);
  return absl::OkStatus();
}

absl::StatusOr<int64_t> KvManager::SequenceLength(SequenceId id) const {
  const Sequence* sq = Find(id);
  if (sq == nullptr) return absl::NotFoundError(absl::StrCat("no sequence ", id));
  return sq->length;
}

const KvManager::Sequence* KvManager::Find(SequenceId id) const {
  auto it = sequences_.find(id);
  return it == sequences_.end() ? nullptr : &it->second;
}

int64_t KvManager::PagesHeld(SequenceId id) const {
  const Sequence* sq = Find(id);
  return sq == nullptr ? 0 : static_cast<int64_t>(sq->pages.size());
}

int64_t KvManager::SharedPagesInUse(absl::Span<const int32_t> tokens) const {
  if (prefix_ == nullptr || tokens.empty()) return 0;
  // As AddSequence looks up: the hit leaves the last token to compute.
  const PrefixCache::Match match = prefix_->Lookup(tokens, static_cast<int64_t>(tokens.size()) - 1);
  if (!match.snapshot) return 0;
  return prefix_->InUseAmong(match, match.snapshot->length / pages_.page_size());
}

int64_t KvManager::NewPages(const Sequence& sq, int64_t tokens) const {
  if (!uses_kv_) return 0;
  const int64_t pages = (sq.length + tokens + pages_.page_size() - 1) / pages_.page_size();
  return std::max<int64_t>(0, pages - static_cast<int64_t>(sq.pages.size()));
}

int64_t KvManager::PagesToGrow(const std::vector<SequenceInput>& batch) const {
  int64_t pages = 0;
  for (const SequenceInput& in : batch) {
    const Sequence* sq = Find(in.id);
    if (sq != nullptr) pages += NewPages(*sq, static_cast<int64_t>(in.tokens.size()));
  }
  return pages;
}

absl::Status KvManager::Reserve(const std::vector<SequenceInput>& batch) {
  const int64_t needed = PagesToGrow(batch);
  if (needed == 0) return absl::OkStatus();
  if (prefix_ != nullptr && pages_.free() < needed) prefix_->MakeRoom(needed);
  ASSIGN_OR_RETURN(std::vector<int32_t> fresh, pages_.Allocate(needed));
  size_t next = 0;
  for (const SequenceInput& in : batch) {
    auto it = sequences_.find(in.id);
    if (it == sequences_.end()) continue;
    for (int64_t n = NewPages(it->second, static_cast<int64_t>(in.tokens.size())); n > 0; --n) {
      it->second.pages.push_back(fresh[next++]);
    }
  }
  return absl::OkStatus();
}

void KvManager::Advance(SequenceId id, absl::Span<const int32_t> tokens) {
  Sequence& sq = sequences_.at(id);
  sq.length += static_cast<int64_t>(tokens.size());
  if (prefix_ != nullptr) {
    sq.tokens.insert(sq.tokens.end(), tokens.begin(), tokens.end());
    CommitFullPages(sq);
  }
}

void KvManager::CommitFullPages(Sequence& sq) {
  const int64_t page = pages_.page_size();
  while (static_cast<int64_t>(sq.nodes.size() + 1) * page <= sq.length) {
    const size_t i = sq.nodes.size();
    const PrefixCache::NodeId parent = i == 0 ? PrefixCache::kRoot : sq.nodes[i - 1];
    sq.nodes.push_back(prefix_->Commit(
        parent, absl::MakeConstSpan(sq.tokens).subspan(i * page, page), &sq.pages[i]));
  }
}

EngineStats KvManager::Stats() const {
  const int64_t cached = prefix_ != nullptr ? prefix_->counts().reclaimable_pages : 0;
  return {pages_.used() - cached, pages_.total(), states_.used(), states_.total()};
}

PrefixCacheStats KvManager::PrefixStats() const {
  PrefixCacheStats st;
  if (prefix_ == nullptr) return st;
  const PrefixCache::Counts c = prefix_->counts();
  st.pages = c.nodes;
  st.snapshots = c.snapshots;
  st.snapshot_slots = prefix_->snapshot_slots();
  st.page_bytes = c.nodes * page_bytes_;
  st.snapshot_bytes = c.snapshots * slot_bytes_ + c.tail_pages * page_bytes_;
  st.page_evictions = c.page_evictions;
  st.snapshot_evictions = c.snapshot_evictions;
  return st;
}

}  // namespace walsh
