// Where prefill stops for prefix-cache snapshots: a pure function of the lookup.
#include "worker/server/snapshot_policy.h"

#include "gtest/gtest.h"

namespace walsh {
namespace {

std::vector<int64_t> Positions(int64_t tokens, PrefixLookup lookup, int64_t min_tokens = 32) {
  std::vector<int64_t> out;
  for (const SnapshotPoint& p : PlanSnapshots(tokens, lookup, 16, min_tokens)) {
    out.push_back(p.position);
  }
  return out;
}

TEST(SnapshotPolicy, APromptPastTheThresholdIsSnapshottedBeforeItsLastToken) {
  EXPECT_EQ(Positions(100, {PrefixOutcome::kNoPrefix, 0, 0}), (std::vector<int64_t>{99}));
  EXPECT_EQ(Positions(20, {PrefixOutcome::kNoPrefix, 0, 0}), (std::vector<int64_t>{}));
  EXPECT_EQ(Positions(100, {PrefixOutcome::kOff, 0, 0}), (std::vector<int64_t>{}));
}

TEST(SnapshotPolicy, CachedPagesWithoutASnapshotGetOneWhereTheyEnd) {
  // A shared document of 80 cached tokens, a new question after it.
  const auto p = PlanSnapshots(100, {PrefixOutcome::kNoSnapshot, 80, 0}, 16, 32);
  ASSERT_EQ(p.size(), 2u);
  EXPECT_EQ(p[0].position, 80);
  EXPECT_STREQ(p[0].at, "branch");
  EXPECT_EQ(p[1].position, 99);
  EXPECT_STREQ(p[1].at, "prompt");
  // A hit at the branch already: only the prompt's end is new.
  EXPECT_EQ(Positions(100, {PrefixOutcome::kHit, 80, 80}), (std::vector<int64_t>{99}));
  // Every page cached: the branch is the last page boundary before the last token.
  EXPECT_EQ(Positions(98, {PrefixOutcome::kNoSnapshot, 96, 0}), (std::vector<int64_t>{96, 97}));
  // The same prompt again: nothing new.
  EXPECT_EQ(Positions(100, {PrefixOutcome::kHit, 96, 99}), (std::vector<int64_t>{}));
  // Short shared prefixes are not worth a snapshot.
  EXPECT_EQ(Positions(100, {PrefixOutcome::kNoSnapshot, 16, 0}), (std::vector<int64_t>{99}));
}

TEST(SnapshotPolicy, LongPrefillsAreSnapshottedEveryIntervalOfWholePages) {
  // 200 tokens, nothing cached, every 64: 64, 128, 192, then the prompt's end.
  auto p = PlanSnapshots(200, {PrefixOutcome::kNoPrefix, 0, 0}, 16, 32, 64);
  ASSERT_EQ(p.size(), 4u);
  EXPECT_EQ(p[0].position, 64);
  EXPECT_STREQ(p[0].at, "interval");
  EXPECT_EQ(p[2].position, 192);
  EXPECT_EQ(p[3].position, 199);
  EXPECT_STREQ(p[3].at, "prompt");
  // An interval that is not whole pages rounds down to them (70 -> 64); below the threshold
  // (min_tokens 100) none is taken.
  std::vector<int64_t> got;
  for (const SnapshotPoint& s : PlanSnapshots(200, {PrefixOutcome::kNoPrefix, 0, 0}, 16, 100, 70))
    got.push_back(s.position);
  EXPECT_EQ(got, (std::vector<int64_t>{128, 192, 199}));
  // From a hit at 128 the next interval is 192; a branch at 160 stays a branch, in order.
  p = PlanSnapshots(200, {PrefixOutcome::kHit, 160, 128}, 16, 32, 64);
  ASSERT_EQ(p.size(), 3u);
  EXPECT_EQ(p[0].position, 160);
  EXPECT_STREQ(p[0].at, "branch");
  EXPECT_EQ(p[1].position, 192);
  EXPECT_STREQ(p[1].at, "interval");
  EXPECT_EQ(p[2].position, 199);
  // An interval point that is the branch is taken once, as the branch.
  p = PlanSnapshots(200, {PrefixOutcome::kNoSnapshot, 192, 0}, 16, 32, 64);
  ASSERT_EQ(p.size(), 4u);
  EXPECT_EQ(p[2].position, 192);
  EXPECT_STREQ(p[2].at, "branch");
  // 0: no interval.
  EXPECT_EQ(PlanSnapshots(200, {PrefixOutcome::kNoPrefix, 0, 0}, 16, 32, 0).size(), 1u);
}

TEST(SnapshotPolicy, AFinishedRequestIsSnapshottedAtItsEnd) {
  EXPECT_TRUE(SnapshotAtFinish({PrefixOutcome::kNoPrefix, 0, 0}, 40, 32));
  EXPECT_FALSE(SnapshotAtFinish({PrefixOutcome::kNoPrefix, 0, 0}, 20, 32));
  EXPECT_FALSE(SnapshotAtFinish({PrefixOutcome::kOff, 0, 0}, 40, 32));
}

}  // namespace
}  // namespace walsh
