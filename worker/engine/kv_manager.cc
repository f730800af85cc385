#include "worker/engine/kv_manager.h"

#include <algorithm>

#include "absl/container/flat_hash_set.h"
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

absl::StatusOr<std::unique_ptr<KvManager>> KvManager::Plan(const CacheOptions& options,
                                                           const CacheUnits& units, int64_t room) {
  if (options.page_size < 1) return absl::InvalidArgumentError("KV page size must be >= 1");
  const bool snapshots = options.prefix_caching && units.uses_kv;
  ASSIGN_OR_RETURN(const CachePlan plan,
                   PlanCaches({.kv_cache_bytes = options.kv_cache_bytes,
                               .state_bytes = options.state_bytes,
                               .kv_pages = options.kv_pages,
                               .state_slots = options.state_slots,
                               .snapshot_bytes = snapshots ? options.prefix_cache_bytes : 0,
                               .room = room},
                              units.page_bytes, units.slot_bytes));
  return std::make_unique<KvManager>(plan, options.page_size, units.page_bytes, units.slot_bytes,
                                     options.prefix_caching, units.uses_kv);
}

KvManager::KvManager(const CachePlan& plan, int64_t page_size, int64_t page_bytes,
                     int64_t slot_bytes, bool prefix_caching, bool uses_kv)
    : plan_(plan),
      pages_(plan.pages, page_size),
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
  if (sq.speculated_from >= 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("sequence ", id, " has a speculative step to roll back first"));
  }
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
  for (int32_t plane : sq.planes) states_.Release(plane);
  if (sq.checkpoint_slot >= 0) states_.Release(sq.checkpoint_slot);
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

absl::Status KvManager::CheckStep(const std::vector<SequenceInput>& batch) const {
  absl::flat_hash_set<SequenceId> seen;
  for (const SequenceInput& in : batch) {
    const Sequence* sq = Find(in.id);
    if (sq == nullptr) return absl::NotFoundError(absl::StrCat("no sequence ", in.id));
    if (!seen.insert(in.id).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("sequence ", in.id, " appears twice in a batch"));
    }
    if (sq->awaits_rollback()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "sequence ", in.id, " has a speculative step to roll back before its next step"));
    }
    if (sq->speculated_from >= 0 &&
        (!in.keep_states || in.tokens.size() != sq->planes.size() + 1)) {
      return absl::FailedPreconditionError(absl::StrCat("sequence ", in.id,
                                                        "'s speculative step was reserved for ",
                                                        sq->planes.size() + 1, " tokens"));
    }
  }
  return absl::OkStatus();
}

std::vector<SequenceCache> KvManager::StepCaches(const std::vector<SequenceInput>& batch) const {
  std::vector<SequenceCache> caches;
  caches.reserve(batch.size());
  for (const SequenceInput& in : batch) {
    const Sequence& sq = sequences_.at(in.id);
    caches.push_back({.length = sq.length,
                      .slot = sq.slot,
                      .pages = sq.pages,
                      .planes = in.keep_states ? absl::Span<const int32_t>(sq.planes)
                                               : absl::Span<const int32_t>()});
  }
  return caches;
}

absl::Status KvManager::Reserve(const std::vector<SequenceInput>& batch) {
  int64_t planes = 0;
  for (const SequenceInput& in : batch) {
    const Sequence* sq = Find(in.id);
    if (sq != nullptr && in.keep_states && sq->speculated_from < 0 && !in.tokens.empty()) {
      planes += static_cast<int64_t>(in.tokens.size()) - 1;
    }
  }
  if (planes > states_.free()) {
    return absl::ResourceExhaustedError(absl::StrCat("state slots: ", planes,
                                                     " planes needed for a speculative step, ",
                                                     states_.free(), " free"));
  }
  const int64_t needed = PagesToGrow(batch);
  if (needed > 0) {
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
  }
  for (const SequenceInput& in : batch) {
    auto it = sequences_.find(in.id);
    if (it == sequences_.end() || !in.keep_states || it->second.speculated_from >= 0) continue;
    Sequence& sq = it->second;
    sq.speculated_from = sq.length;
    for (size_t j = 0; j + 1 < in.tokens.size(); ++j) sq.planes.push_back(*states_.Allocate());
  }
  return absl::OkStatus();
}

void KvManager::Advance(const SequenceInput& in) {
  Sequence& sq = sequences_.at(in.id);
  sq.length += static_cast<int64_t>(in.tokens.size());
  if (prefix_ != nullptr) {
    sq.tokens.insert(sq.tokens.end(), in.tokens.begin(), in.tokens.end());
    if (sq.speculated_from < 0) CommitFullPages(sq);
  }
}

absl::StatusOr<int32_t> KvManager::RollbackPlane(SequenceId id, int64_t length) const {
  const Sequence* sq = Find(id);
  if (sq == nullptr) return absl::NotFoundError(absl::StrCat("no sequence ", id));
  if (!sq->awaits_rollback()) {
    return absl::FailedPreconditionError(
        absl::StrCat("sequence ", id, " has no speculative step to roll back"));
  }
  if (length <= sq->speculated_from || length > sq->length) {
    return absl::OutOfRangeError(absl::StrCat("sequence ", id, " rolls back to ",
                                              sq->speculated_from + 1, "..", sq->length,
                                              " tokens, not ", length));
  }
  if (length == sq->length) return -1;
  const size_t plane = static_cast<size_t>(length - sq->speculated_from - 1);
  if (plane >= sq->planes.size()) {
    return absl::InternalError(absl::StrCat("sequence ", id, " kept no state at ", length));
  }
  return sq->planes[plane];
}

void KvManager::Rollback(SequenceId id, int64_t length) {
  Sequence& sq = sequences_.at(id);
  // Pages of the speculative step are the sequence's own: none is in the prefix cache yet.
  Truncate(sq, length);
  if (prefix_ != nullptr) sq.tokens.resize(static_cast<size_t>(length));
  for (int32_t plane : sq.planes) states_.Release(plane);
  sq.planes.clear();
  sq.speculated_from = -1;
  if (prefix_ != nullptr) CommitFullPages(sq);
}

absl::StatusOr<CacheCopy> KvManager::Checkpoint(SequenceId id) {
  auto it = sequences_.find(id);
  if (it == sequences_.end()) return absl::NotFoundError(absl::StrCat("no sequence ", id));
  Sequence& sq = it->second;
  if (prefix_ != nullptr) {
    return absl::FailedPreconditionError("checkpoints need an engine without prefix caching");
  }
  if (sq.checkpoint_slot >= 0 || sq.speculated_from >= 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("sequence ", id, " holds a checkpoint or has a speculative step pending"));
  }
  ASSIGN_OR_RETURN(sq.checkpoint_slot, states_.Allocate());
  sq.checkpoint_length = sq.length;
  return CacheCopy{.from_slot = sq.slot, .to_slot = sq.checkpoint_slot};
}

absl::StatusOr<CacheCopy> KvManager::CheckpointRestore(SequenceId id) const {
  const Sequence* sq = Find(id);
  if (sq == nullptr) return absl::NotFoundError(absl::StrCat("no sequence ", id));
  if (sq->checkpoint_slot < 0) {
    return absl::FailedPreconditionError(absl::StrCat("sequence ", id, " holds no checkpoint"));
  }
  return CacheCopy{.from_slot = sq->checkpoint_slot, .to_slot = sq->slot};
}

absl::Status KvManager::EndCheckpoint(SequenceId id, bool restored) {
  auto it = sequences_.find(id);
  if (it == sequences_.end()) return absl::NotFoundError(absl::StrCat("no sequence ", id));
  Sequence& sq = it->second;
  if (sq.checkpoint_slot < 0) {
    return absl::FailedPreconditionError(absl::StrCat("sequence ", id, " holds no checkpoint"));
  }
  if (restored && sq.speculated_from >= 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("sequence ", id, " has a speculative step pending"));
  }
  if (restored) Truncate(sq, sq.checkpoint_length);  // no prefix cache: its pages are its own
  states_.Release(sq.checkpoint_slot);
  sq.checkpoint_slot = -1;
  sq.checkpoint_length = -1;
  return absl::OkStatus();
}

void KvManager::Truncate(Sequence& sq, int64_t length) {
  const size_t keep = static_cast<size_t>((length + pages_.page_size() - 1) / pages_.page_size());
  if (uses_kv_ && sq.pages.size() > keep) {
    pages_.Release(std::vector<int32_t>(sq.pages.begin() + keep, sq.pages.end()));
    sq.pages.resize(keep);
  }
  sq.length = length;
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
