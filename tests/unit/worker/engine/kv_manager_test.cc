// The KV manager's bookkeeping driven directly, with no backend: which page and slot is whose,
// what a step reserves, what a new sequence would share, and what a hit asks the engine to copy.
#include "worker/engine/kv_manager.h"

#include <numeric>

#include "gtest/gtest.h"

namespace walsh {
namespace {

constexpr int64_t kPositionsPerPage = 4;

std::vector<int32_t> Tokens(int n, int32_t from = 0) {
  std::vector<int32_t> v(n);
  std::iota(v.begin(), v.end(), from);
  return v;
}

// 10 pages of 4 positions, 3 sequence slots, 2 snapshot slots.
KvManager Manager(bool prefix_caching = true) {
  return KvManager({.pages = 10, .slots = 3, .snapshot_slots = 2}, kPositionsPerPage, 100, 1000,
                   prefix_caching,
                   /*uses_kv=*/true);
}

// Feeds `tokens` to the sequence as one step: reserve, then advance.
void Feed(KvManager& kv, SequenceId id, std::vector<int32_t> tokens) {
  const std::vector<SequenceInput> step = {{id, std::move(tokens), false}};
  ASSERT_TRUE(kv.Reserve(step).ok());
  kv.Advance(step[0]);
}

TEST(KvManager, AStepReservesItsPagesAllOrNoneAndOnlyOnce) {
  KvManager kv = Manager(false);
  auto a = kv.AddSequence({});
  auto b = kv.AddSequence({});
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->restore.from_slot, -1);  // a new sequence's slot is cleared, nothing copied
  const std::vector<SequenceInput> step = {{a->id, Tokens(9), false}, {b->id, Tokens(20), false}};
  EXPECT_EQ(kv.PagesToGrow(step), 3 + 5);
  ASSERT_TRUE(kv.Reserve(step).ok());
  EXPECT_EQ(kv.PagesHeld(a->id), 3);
  EXPECT_EQ(kv.PagesHeld(b->id), 5);
  EXPECT_EQ(kv.PagesToGrow(step), 0);  // reserved: the engine's step takes none again
  ASSERT_TRUE(kv.Reserve(step).ok());
  EXPECT_EQ(kv.Stats().kv_pages_used, 8);
  // Three more pages are not to be had: nothing is taken.
  const std::vector<SequenceInput> more = {{a->id, Tokens(21), false}};
  EXPECT_EQ(kv.PagesToGrow(more), 3);
  EXPECT_EQ(kv.Reserve(more).code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(kv.PagesHeld(a->id), 3);
  EXPECT_EQ(kv.Stats().kv_pages_used, 8);
  ASSERT_TRUE(kv.RemoveSequence(b->id).ok());
  EXPECT_TRUE(kv.Reserve(more).ok());
  EXPECT_EQ(kv.Stats().kv_pages_used, 6);
  EXPECT_EQ(kv.Stats().state_slots_used, 1);
}

TEST(KvManager, AHitSharesFullPagesAndCopiesTheSnapshotAndItsPartialPage) {
  KvManager kv = Manager();
  auto a = kv.AddSequence(Tokens(11));
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->lookup.outcome, PrefixOutcome::kNoPrefix);
  Feed(kv, a->id, Tokens(10));  // two full pages, and 2 positions of a third
  auto snap = kv.PlanSnapshot(a->id, false);
  ASSERT_TRUE(snap.ok() && snap->has_value());
  const CacheCopy taken = (*snap)->copy;
  EXPECT_EQ(taken.from_slot, kv.Find(a->id)->slot);
  EXPECT_EQ(taken.to_slot, 3);  // snapshot slots follow the sequence slots
  EXPECT_GE(taken.to_page, 0);  // the partial page's copy
  // Cached already: no second snapshot at the same place.
  EXPECT_FALSE(kv.PlanSnapshot(a->id, false)->has_value());

  // The same 10 tokens and one more: the hit starts at 10, sharing the two full pages.
  EXPECT_EQ(kv.SharedPagesInUse(Tokens(11)), 2);  // a still holds them
  auto b = kv.AddSequence(Tokens(11));
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->lookup.outcome, PrefixOutcome::kHit);
  EXPECT_EQ(b->lookup.hit_tokens, 10);
  EXPECT_EQ(b->restore.from_slot, taken.to_slot);
  EXPECT_EQ(b->restore.from_page, taken.to_page);
  EXPECT_EQ(*kv.SequenceLength(b->id), 10);
  const KvManager::Sequence* sa = kv.Find(a->id);
  const KvManager::Sequence* sb = kv.Find(b->id);
  ASSERT_TRUE(sa != nullptr && sb != nullptr);
  ASSERT_EQ(sb->pages.size(), 3u);
  EXPECT_EQ(sb->pages[0], sa->pages[0]);
  EXPECT_EQ(sb->pages[1], sa->pages[1]);
  EXPECT_EQ(sb->pages[2], b->restore.to_page);  // its own copy of the partial page
  EXPECT_NE(sb->pages[2], sa->pages[2]);
  // Shared pages count once: a's three and b's partial page (the snapshot's copy counts as free:
  // the cache gives it back under pressure).
  EXPECT_EQ(kv.Stats().kv_pages_used, 4);
  ASSERT_TRUE(kv.RemoveSequence(a->id).ok());
  ASSERT_TRUE(kv.RemoveSequence(b->id).ok());
  EXPECT_EQ(kv.SharedPagesInUse(Tokens(11)), 0);  // cached, but no running sequence holds them
  EXPECT_EQ(kv.Stats().kv_pages_used, 0);
  EXPECT_EQ(kv.PrefixStats().pages, 2);
  EXPECT_EQ(kv.PrefixStats().snapshots, 1);
}

TEST(KvManager, AReservationEvictsWhatOnlyTheCacheHolds) {
  KvManager kv = Manager();
  auto a = kv.AddSequence(Tokens(33));
  ASSERT_TRUE(a.ok());
  Feed(kv, a->id, Tokens(32));  // eight full pages, cached when a ends
  ASSERT_TRUE(kv.RemoveSequence(a->id).ok());
  EXPECT_EQ(kv.PrefixStats().pages, 8);
  EXPECT_EQ(kv.Stats().kv_pages_used, 0);  // they count as free
  auto b = kv.AddSequence(Tokens(24, 100));
  ASSERT_TRUE(b.ok());
  const std::vector<SequenceInput> step = {{b->id, Tokens(24, 100), false}};
  ASSERT_TRUE(kv.Reserve(step).ok());  // 6 pages: 2 free, 4 evicted from the cache
  EXPECT_EQ(kv.PrefixStats().pages, 4);
  EXPECT_EQ(kv.PrefixStats().page_evictions, 4);
}

// A checkpoint takes a slot of its own; restored, it cuts the sequence back and gives back the
// pages past it; it is refused with prefix caching on, twice, beside a pending speculative
// step, and without a free slot.
TEST(KvManager, ACheckpointCutsBackToItsLengthAndGivesItsSlotBack) {
  KvManager cached = Manager(true);
  auto c = cached.AddSequence({});
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(cached.Checkpoint(c->id).status().code(), absl::StatusCode::kFailedPrecondition);

  KvManager kv = Manager(false);
  auto a = kv.AddSequence({});
  ASSERT_TRUE(a.ok());
  Feed(kv, a->id, Tokens(6));
  auto copy = kv.Checkpoint(a->id);
  ASSERT_TRUE(copy.ok());
  EXPECT_EQ(copy->from_slot, kv.Find(a->id)->slot);
  EXPECT_NE(copy->to_slot, copy->from_slot);
  EXPECT_EQ(kv.Stats().state_slots_used, 2);
  EXPECT_EQ(kv.Checkpoint(a->id).status().code(), absl::StatusCode::kFailedPrecondition);
  Feed(kv, a->id, Tokens(7));  // 13 positions: 4 pages
  EXPECT_EQ(kv.PagesHeld(a->id), 4);
  auto back = kv.CheckpointRestore(a->id);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->from_slot, copy->to_slot);
  EXPECT_EQ(back->to_slot, copy->from_slot);
  ASSERT_TRUE(kv.EndCheckpoint(a->id, /*restored=*/true).ok());
  EXPECT_EQ(*kv.SequenceLength(a->id), 6);
  EXPECT_EQ(kv.PagesHeld(a->id), 2);
  EXPECT_EQ(kv.Stats().state_slots_used, 1);
  EXPECT_EQ(kv.CheckpointRestore(a->id).status().code(), absl::StatusCode::kFailedPrecondition);

  // Beside a speculative step (reserved, then run): refused until its rollback.
  const std::vector<SequenceInput> spec = {{a->id, Tokens(3), true, /*keep_states=*/true}};
  ASSERT_TRUE(kv.Reserve(spec).ok());
  EXPECT_EQ(kv.Checkpoint(a->id).status().code(), absl::StatusCode::kFailedPrecondition);
  kv.Advance(spec[0]);
  EXPECT_EQ(kv.Checkpoint(a->id).status().code(), absl::StatusCode::kFailedPrecondition);
  kv.Rollback(a->id, 7);
  ASSERT_TRUE(kv.Checkpoint(a->id).ok());

  // Slots: a (and its checkpoint) and b take all three.
  auto b = kv.AddSequence({});
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(kv.Checkpoint(b->id).status().code(), absl::StatusCode::kResourceExhausted);
  ASSERT_TRUE(kv.RemoveSequence(a->id).ok());  // its checkpoint's slot goes with it
  EXPECT_EQ(kv.Stats().state_slots_used, 1);
  EXPECT_EQ(kv.Stats().kv_pages_used, 0);
}

}  // namespace
}  // namespace walsh
