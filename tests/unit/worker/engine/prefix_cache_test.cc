// Prefix caching: the bookkeeping (pins, LRU eviction, exact keys) in-process, and the engine's
// warm runs against cold ones. A sequence restored from the cache must give logits
// bit-identical to the same tokens on an engine with caching off, however the rest is fed
// (chunks of 1, 7 or 64), whatever shares its batch, on one rank or two.
#include "worker/engine/prefix_cache.h"

#include <cstring>
#include <random>

#include "gtest/gtest.h"
#include "tests/util/synthetic_engine.h"
#include "tests/util/test_util.h"
#include "tools/mkmodel/synthetic_model.h"
#include "worker/engine/engine.h"

namespace walsh {
namespace {

std::vector<int32_t> Range(int32_t from, int n) {
  std::vector<int32_t> v(n);
  for (int i = 0; i < n; ++i) v[i] = from + i;
  return v;
}

TEST(PrefixCacheBook, IdenticalPagesAreSharedAndKeysCompareInFull) {
  KvPagePool pool(8, 4);
  PrefixCache cache(&pool, 2, 10);
  std::vector<int32_t> a = *pool.Allocate(2), b = *pool.Allocate(2);
  const auto n0 = cache.Commit(PrefixCache::kRoot, Range(0, 4), &a[0]);
  const auto n1 = cache.Commit(n0, Range(4, 4), &a[1]);
  // A second sequence with the same first page gets the cached page; its own goes back.
  const int32_t b0 = b[0];
  const auto m0 = cache.Commit(PrefixCache::kRoot, Range(0, 4), &b[0]);
  EXPECT_EQ(m0, n0);
  EXPECT_EQ(b[0], a[0]);
  EXPECT_NE(b0, a[0]);
  EXPECT_EQ(pool.free(), 5);
  // Same tokens after another parent: another node.
  const auto m1 = cache.Commit(PrefixCache::kRoot, Range(4, 4), &b[1]);
  EXPECT_NE(m1, n1);
  const std::vector<int32_t> query = {0, 1, 2, 3, 4, 5, 6, 7, 8};
  PrefixCache::Match m = cache.Lookup(query, 8);
  EXPECT_EQ(m.kv_tokens, 8);
  EXPECT_EQ(m.nodes, (std::vector<PrefixCache::NodeId>{n0, n1}));
  EXPECT_FALSE(m.snapshot);
  EXPECT_EQ(cache.Lookup(std::vector<int32_t>{0, 1, 2, 9, 4}, 4).kv_tokens, 0);
}

TEST(PrefixCacheBook, SnapshotsMatchOnlyTheirExactTailAndLength) {
  KvPagePool pool(8, 4);
  PrefixCache cache(&pool, 2, 10);
  std::vector<int32_t> a = *pool.Allocate(1);
  const auto n0 = cache.Commit(PrefixCache::kRoot, Range(0, 4), &a[0]);
  auto s = cache.AddSnapshot(n0, std::vector<int32_t>{4, 5}, 6);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->slot, 10);
  EXPECT_GE(s->tail_page, 0);
  auto at4 = cache.AddSnapshot(n0, {}, 4);
  ASSERT_TRUE(at4);
  EXPECT_EQ(at4->tail_page, -1);
  EXPECT_EQ(cache.Lookup(Range(0, 7), 6).hit_tokens(), 6);
  EXPECT_EQ(cache.Lookup(Range(0, 7), 5).hit_tokens(), 4);  // the hit leaves a token to compute
  EXPECT_EQ(cache.Lookup(std::vector<int32_t>{0, 1, 2, 3, 4, 9, 9}, 6).hit_tokens(), 4);
  EXPECT_TRUE(cache.Touch(n0, std::vector<int32_t>{4, 5}));
  EXPECT_FALSE(cache.Touch(n0, std::vector<int32_t>{4}));
  // The budget holds two: a third evicts the least recently used (at4: s was touched).
  auto third = cache.AddSnapshot(n0, std::vector<int32_t>{4}, 5);
  ASSERT_TRUE(third);
  EXPECT_EQ(third->slot, at4->slot);
  EXPECT_EQ(cache.counts().snapshot_evictions, 1);
  EXPECT_EQ(cache.Lookup(Range(0, 7), 6).hit_tokens(), 6);
}

// Eviction by tier: speculative (interval) snapshots before ordinary ones before those a hit
// proved, least recently used first within a tier; proven ones hold at most half the slots.
TEST(PrefixCacheBook, SnapshotsGoSpeculativeFirstThenOrdinaryThenProven) {
  using Tier = PrefixCache::SnapshotTier;
  KvPagePool pool(16, 8);
  PrefixCache cache(&pool, 4, 10);
  // Snapshots at the root after `length` tokens of 0, 1, 2, ...
  auto at = [&](int64_t length, Tier tier) {
    auto s =
        cache.AddSnapshot(PrefixCache::kRoot, Range(0, static_cast<int>(length)), length, tier);
    EXPECT_TRUE(s) << length;
    return s ? s->id : 0;
  };
  auto held = [&](int64_t length) {
    return cache.Lookup(Range(0, 8), length).hit_tokens() == length;
  };
  const auto first = at(1, Tier::kOrdinary);
  at(2, Tier::kSpeculative);
  at(3, Tier::kOrdinary);
  cache.Hit(first);  // the oldest, but proven by a hit
  const auto fourth = at(4, Tier::kOrdinary);
  const auto fifth = at(5, Tier::kOrdinary);  // the budget holds four: the speculative one goes
  EXPECT_FALSE(held(2));
  EXPECT_TRUE(held(1) && held(3) && held(4));
  at(6, Tier::kOrdinary);  // then the least recently used ordinary one
  EXPECT_FALSE(held(3));
  EXPECT_TRUE(held(1) && held(4) && held(5));
  // Proven snapshots hold at most half the slots: a third demotes the least recently proven.
  cache.Hit(fourth);
  cache.Hit(fifth);
  at(7, Tier::kOrdinary);
  EXPECT_FALSE(held(1));
  EXPECT_TRUE(held(4) && held(5) && held(6));
  EXPECT_EQ(cache.counts().snapshot_evictions, 3);
}

TEST(PrefixCacheBook, PinnedPagesStayAndUnpinnedOnesGoLeastRecentlyUsedFirst) {
  KvPagePool pool(4, 2);
  PrefixCache cache(&pool, 1, 4);
  std::vector<int32_t> a = *pool.Allocate(2), b = *pool.Allocate(1);
  const auto a0 = cache.Commit(PrefixCache::kRoot, Range(0, 2), &a[0]);
  const auto a1 = cache.Commit(a0, Range(2, 2), &a[1]);
  const auto b0 = cache.Commit(PrefixCache::kRoot, Range(10, 2), &b[0]);
  EXPECT_EQ(cache.counts().reclaimable_pages, 0);  // all in use
  EXPECT_FALSE(cache.MakeRoom(2));
  cache.RemoveUser(a1);
  cache.RemoveUser(a0);
  cache.RemoveUser(b0);
  EXPECT_EQ(cache.counts().reclaimable_pages, 3);
  // a0 has a child, so a1 and then b0 are the leaves, a1 older; then a0.
  ASSERT_TRUE(cache.MakeRoom(2));
  EXPECT_EQ(cache.counts().page_evictions, 1);
  EXPECT_EQ(cache.Lookup(Range(0, 4), 4).kv_tokens, 2);
  EXPECT_EQ(cache.Lookup(Range(10, 2), 2).kv_tokens, 2);
  // A snapshot pins its page until the snapshot itself is evicted.
  auto s = cache.AddSnapshot(b0, {}, 2);
  ASSERT_TRUE(s);
  ASSERT_TRUE(cache.MakeRoom(3));
  EXPECT_EQ(cache.Lookup(Range(0, 4), 4).kv_tokens, 0);
  EXPECT_EQ(cache.Lookup(Range(10, 2), 2).kv_tokens, 2);
  ASSERT_TRUE(cache.MakeRoom(4));
  EXPECT_EQ(cache.counts().nodes, 0);
  EXPECT_EQ(cache.counts().snapshots, 0);
  EXPECT_EQ(pool.free(), 4);
}

TEST(PrefixCacheBook, TheSnapshotBeingRestoredIsNeverEvictedForItsOwnPage) {
  KvPagePool pool(2, 4);
  PrefixCache cache(&pool, 1, 2);
  auto s = cache.AddSnapshot(PrefixCache::kRoot, std::vector<int32_t>{1, 2}, 2);
  ASSERT_TRUE(s);
  std::vector<int32_t> held = *pool.Allocate(1);  // a running sequence's page
  const PrefixCache::Match m = cache.Lookup(std::vector<int32_t>{1, 2, 3}, 2);
  ASSERT_EQ(m.hit_tokens(), 2);
  EXPECT_FALSE(cache.MakeRoom(1, m.snapshot_id));
  EXPECT_EQ(cache.counts().snapshots, 1);
  EXPECT_TRUE(cache.MakeRoom(1));
  EXPECT_EQ(cache.counts().snapshots, 0);
}

TEST(PrefixCacheBook, NothingIsEvictedWhenEverythingWouldNotBeEnough) {
  KvPagePool pool(4, 2);
  PrefixCache cache(&pool, 2, 4);
  std::vector<int32_t> a = *pool.Allocate(1);
  const auto a0 = cache.Commit(PrefixCache::kRoot, Range(0, 2), &a[0]);
  cache.RemoveUser(a0);
  auto s = cache.AddSnapshot(a0, std::vector<int32_t>{2}, 3);
  ASSERT_TRUE(s);
  std::vector<int32_t> held = *pool.Allocate(2);
  EXPECT_EQ(pool.free(), 0);
  EXPECT_EQ(cache.counts().reclaimable_pages, 2);
  EXPECT_FALSE(cache.MakeRoom(3));  // two could go; three are asked: keep everything
  EXPECT_EQ(cache.counts().snapshots, 1);
  EXPECT_EQ(cache.counts().nodes, 1);
  // A snapshot whose copy failed is forgotten, and its page comes back.
  cache.DropSnapshot(s->id);
  cache.DropSnapshot(s->id);
  EXPECT_EQ(cache.counts().snapshots, 0);
  EXPECT_EQ(pool.free(), 1);
}

TEST(PrefixCacheBook, ASnapshotThatCannotHaveItsPageEvictsNoOtherSnapshot) {
  KvPagePool pool(2, 2);
  PrefixCache cache(&pool, 1, 2);
  ASSERT_TRUE(cache.AddSnapshot(PrefixCache::kRoot, {}, 0));  // no page, the only slot
  std::vector<int32_t> held = *pool.Allocate(2);
  EXPECT_FALSE(cache.AddSnapshot(PrefixCache::kRoot, std::vector<int32_t>{7}, 1));
  EXPECT_EQ(cache.counts().snapshots, 1);
  EXPECT_EQ(cache.counts().snapshot_evictions, 0);
}

// Feeds ids[from..] into `seq` in chunks, each step sharing the batch with a step of `other`
// (when given); returns the logits of every fed position.
std::vector<float> Feed(SequenceRunner& e, SequenceId seq, const std::vector<int32_t>& ids,
                        size_t from, size_t chunk, std::optional<SequenceId> other = std::nullopt) {
  std::vector<float> logits;
  for (size_t i = from; i < ids.size(); i += chunk) {
    std::vector<SequenceInput> batch;
    if (other) batch.push_back({*other, {static_cast<int32_t>(i % 7)}, false});
    batch.push_back(
        {seq, std::vector<int32_t>(ids.begin() + i, ids.begin() + std::min(ids.size(), i + chunk)),
         true});
    auto out = e.Forward(batch);
    EXPECT_TRUE(out.ok()) << out.status();
    if (!out.ok()) return logits;
    const size_t first = other ? 1 : 0;
    for (size_t r = first; r < out->rows.size(); ++r) {
      logits.insert(logits.end(), out->RowLogits(r), out->RowLogits(r) + out->vocab);
    }
  }
  return logits;
}

// The cold logits of positions [from, ids.size()).
std::vector<float> Cold(SequenceRunner& e, const std::vector<int32_t>& ids, size_t from) {
  auto seq = e.AddSequence();
  EXPECT_TRUE(seq.ok());
  std::vector<float> all = Feed(e, *seq, ids, 0, ids.size());
  EXPECT_TRUE(e.RemoveSequence(*seq).ok());
  const size_t vocab = all.size() / ids.size();
  return std::vector<float>(all.begin() + from * vocab, all.end());
}

// A sequence fed `prefix` and snapshotted at its end (unless that snapshot exists), then
// removed.
void Warm(SequenceRunner& e, const std::vector<int32_t>& prefix) {
  auto seq = e.AddSequence();
  ASSERT_TRUE(seq.ok());
  Feed(e, *seq, prefix, 0, 5);
  ASSERT_TRUE(e.Snapshot(*seq).ok());
  ASSERT_TRUE(e.RemoveSequence(*seq).ok());
}

void ExpectSameBits(const std::vector<float>& a, const std::vector<float>& b, const char* what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * 4)) << what;
}

void CheckWarmEqualsCold(const std::string& preset, int tp, KvCacheDtype kv = KvCacheDtype::kFp16) {
  testing::SyntheticEngine f(preset);
  auto cold = f.Make({.kv_cache_dtype = kv, .tp = tp}, {.prefix_caching = false});
  auto warm = f.Make({.kv_cache_dtype = kv, .tp = tp}, {.prefix_caching = true});
  const std::vector<int32_t> doc = f.Tokens(53, 1);  // not on a page boundary (16)
  for (int question = 0; question < 3; ++question) {
    std::vector<int32_t> ids = doc;
    const std::vector<int32_t> q = f.Tokens(9, 100 + question);
    ids.insert(ids.end(), q.begin(), q.end());
    for (int prefix_len : {48, 53}) {  // on and off a page boundary
      Warm(*warm, std::vector<int32_t>(doc.begin(), doc.begin() + prefix_len));
      const std::vector<float> expected = Cold(*cold, ids, prefix_len);
      for (size_t chunk : {1, 7, 64}) {
        for (bool mixed : {false, true}) {
          std::optional<SequenceId> other;
          if (mixed) other = *warm->AddSequence();
          PrefixLookup lookup;
          auto seq = warm->AddSequence(ids, &lookup);
          ASSERT_TRUE(seq.ok());
          ASSERT_EQ(lookup.outcome, PrefixOutcome::kHit);
          // The longest snapshot on this prefix (53 once taken) is what a lookup restores.
          ASSERT_GE(lookup.hit_tokens, prefix_len);
          const std::vector<float> got = Feed(*warm, *seq, ids, lookup.hit_tokens, chunk, other);
          const size_t vocab = expected.size() / (ids.size() - prefix_len);
          ExpectSameBits(
              std::vector<float>(expected.begin() + (lookup.hit_tokens - prefix_len) * vocab,
                                 expected.end()),
              got, "warm vs cold");
          ASSERT_TRUE(warm->RemoveSequence(*seq).ok());
          if (other) {
            ASSERT_TRUE(warm->RemoveSequence(*other).ok());
          }
        }
      }
    }
  }
  // Everything given back: no page in use, the cache holds what it snapshotted.
  EXPECT_EQ(warm->Stats().kv_pages_used, 0);
  EXPECT_EQ(warm->Stats().state_slots_used, 0);
  EXPECT_GT(warm->PrefixStats().snapshots, 0);
}

TEST(PrefixCacheEngine, WarmEqualsColdTiny) { CheckWarmEqualsCold("tiny", 1); }
TEST(PrefixCacheEngine, WarmEqualsColdSmall) { CheckWarmEqualsCold("small", 1); }
TEST(PrefixCacheEngine, WarmEqualsColdTensorParallel) { CheckWarmEqualsCold("tiny", 2); }
TEST(PrefixCacheEngine, WarmEqualsColdQ8Kv) { CheckWarmEqualsCold("tiny", 1, KvCacheDtype::kQ8); }
TEST(PrefixCacheEngine, WarmEqualsColdQ4KvTensorParallel) {
  CheckWarmEqualsCold("tiny", 2, KvCacheDtype::kQ4);
}

TEST(PrefixCacheEngine, RunningSequencesWinOverTheCacheAndNothingLeaks) {
  testing::SyntheticEngine f("tiny");
  // 12 pages of 16: two cached prefixes of 3 pages, then sequences that need every page.
  auto e = f.Make({}, {.kv_pages = 12, .prefix_caching = true});
  auto cold = f.Make({}, {.prefix_caching = false});
  const std::vector<int32_t> a = f.Tokens(40, 1), b = f.Tokens(40, 2);
  Warm(*e, a);
  Warm(*e, b);
  EXPECT_EQ(e->Stats().kv_pages_used, 0);
  EXPECT_EQ(e->PrefixStats().pages, 4);
  EXPECT_EQ(e->PrefixStats().snapshots, 2);
  // Two sequences of 90 tokens need 12 pages: the cache gives all of its pages back.
  std::vector<SequenceId> big;
  for (uint32_t s : {3u, 4u}) {
    auto seq = e->AddSequence();
    ASSERT_TRUE(seq.ok());
    big.push_back(*seq);
    Feed(*e, *seq, f.Tokens(90, s), 0, 30);
  }
  EXPECT_EQ(e->Stats().kv_pages_used, 12);
  EXPECT_EQ(e->PrefixStats().snapshots, 0);
  // A miss now, and the restored run after new snapshots still equals cold.
  for (SequenceId s : big) ASSERT_TRUE(e->RemoveSequence(s).ok());
  PrefixLookup lookup;
  std::vector<int32_t> ids = a;
  ids.push_back(5);
  auto seq = e->AddSequence(ids, &lookup);
  ASSERT_TRUE(seq.ok());
  EXPECT_NE(lookup.outcome, PrefixOutcome::kHit);
  ASSERT_TRUE(e->RemoveSequence(*seq).ok());
  Warm(*e, a);
  seq = e->AddSequence(ids, &lookup);
  ASSERT_EQ(lookup.outcome, PrefixOutcome::kHit);
  ExpectSameBits(Cold(*cold, ids, 40), Feed(*e, *seq, ids, 40, 1), "after eviction");
  ASSERT_TRUE(e->RemoveSequence(*seq).ok());
  EXPECT_EQ(e->Stats().kv_pages_used, 0);
  EXPECT_EQ(e->Stats().state_slots_used, 0);
  EXPECT_GT(e->PrefixStats().page_evictions, 0);
  EXPECT_GT(e->PrefixStats().snapshot_evictions, 0);
}

TEST(PrefixCacheEngine, ConcurrentSequencesSharePagesAndEachFreesOnlyItsOwn) {
  testing::SyntheticEngine f("tiny");
  auto e = f.Make({}, {.prefix_caching = true});
  const std::vector<int32_t> ids = f.Tokens(64, 9);
  std::vector<SequenceId> seqs;
  for (int i = 0; i < 3; ++i) seqs.push_back(*e->AddSequence());
  // Fed in the same steps: each fills its own pages, then all share the first one's.
  for (size_t at = 0; at < ids.size(); at += 16) {
    std::vector<SequenceInput> batch;
    for (SequenceId s : seqs) {
      batch.push_back({s, std::vector<int32_t>(ids.begin() + at, ids.begin() + at + 16), false});
    }
    ASSERT_TRUE(e->Forward(batch).ok());
  }
  EXPECT_EQ(e->Stats().kv_pages_used, 4);  // four shared pages, not twelve
  ASSERT_TRUE(e->RemoveSequence(seqs[0]).ok());
  EXPECT_EQ(e->Stats().kv_pages_used, 4);
  auto more = e->Forward({{seqs[1], {1, 2, 3}, false}});
  ASSERT_TRUE(more.ok());
  EXPECT_EQ(e->Stats().kv_pages_used, 5);
  ASSERT_TRUE(e->RemoveSequence(seqs[1]).ok());
  ASSERT_TRUE(e->RemoveSequence(seqs[2]).ok());
  EXPECT_EQ(e->Stats().kv_pages_used, 0);
  EXPECT_EQ(e->PrefixStats().pages, 4);
}

// Admission's count: the pages a new sequence's hit would share with a running sequence are in
// use already; once no sequence holds them they are reclaimable, counted free, and shared no
// more.
TEST(PrefixCacheEngine, SharedPagesInUseCountsOnlyPagesARunningSequenceHolds) {
  testing::SyntheticEngine f("tiny");
  auto e = f.Make({}, {.prefix_caching = true});
  const std::vector<int32_t> doc = f.Tokens(64, 1);
  std::vector<int32_t> a = doc, b = doc;
  for (int32_t t : f.Tokens(5, 2)) a.push_back(t);
  for (int32_t t : f.Tokens(7, 3)) b.push_back(t);
  EXPECT_EQ(e->kv().SharedPagesInUse(b), 0);  // nothing cached
  PrefixLookup lookup;
  auto seq = e->AddSequence(a, &lookup);
  ASSERT_TRUE(seq.ok());
  ASSERT_TRUE(e->Forward({{*seq, doc, false}}).ok());
  auto taken = e->Snapshot(*seq);  // at 64: four full pages
  ASSERT_TRUE(taken.ok() && *taken);
  ASSERT_TRUE(e->Forward({{*seq, std::vector<int32_t>(a.begin() + 64, a.end()), false}}).ok());
  EXPECT_EQ(e->kv().SharedPagesInUse(b), 4);
  EXPECT_EQ(e->kv().SharedPagesInUse(std::vector<int32_t>(doc.begin(), doc.begin() + 40)), 0);
  ASSERT_TRUE(e->RemoveSequence(*seq).ok());
  EXPECT_EQ(e->kv().SharedPagesInUse(b), 0);
  EXPECT_EQ(e->Stats().kv_pages_used, 0);
}

TEST(PrefixCacheEngine, OffMeansNoSharingAndNoLookups) {
  testing::SyntheticEngine f("tiny");
  auto e = f.Make({}, {.prefix_caching = false});
  EXPECT_FALSE(e->prefix_caching());
  const std::vector<int32_t> ids = f.Tokens(40, 1);
  PrefixLookup lookup;
  auto seq = e->AddSequence(ids, &lookup);
  ASSERT_TRUE(seq.ok());
  EXPECT_EQ(lookup.outcome, PrefixOutcome::kOff);
  auto taken = e->Snapshot(*seq);
  ASSERT_TRUE(taken.ok());
  EXPECT_FALSE(*taken);
}

}  // namespace
}  // namespace walsh
