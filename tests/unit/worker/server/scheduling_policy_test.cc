// The scheduler's decisions, driven directly: no engine, no threads, no sockets.
#include "worker/server/scheduling_policy.h"

#include <algorithm>
#include <vector>

#include "gtest/gtest.h"

namespace walsh {
namespace {

TEST(AdmissionOrder, HigherPriorityFirstThenEarlierArrival) {
  std::vector<QueuePosition> queue = {{0, 3}, {5, 4}, {0, 1}, {5, 2}, {-1, 0}};
  std::stable_sort(queue.begin(), queue.end(), AdmittedBefore);
  const std::vector<std::pair<int32_t, uint64_t>> want = {{5, 2}, {5, 4}, {0, 1}, {0, 3}, {-1, 0}};
  ASSERT_EQ(queue.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(queue[i].priority, want[i].first) << i;
    EXPECT_EQ(queue[i].arrival, want[i].second) << i;
  }
  EXPECT_FALSE(AdmittedBefore({1, 7}, {1, 7}));  // a strict order: equal is not before
}

Capacity Roomy() {
  return {.running = 0,
          .max_running = 4,
          .state_slots_free = 4,
          .kv_pages_free = 10,
          .kv_pages_total = 10,
          .page_size = 16,
          .uses_kv = true};
}

TEST(DecideAdmission, CountsTheTokenItWillSample) {
  EXPECT_EQ(PagesToAdmit(15, 16), 1);
  EXPECT_EQ(PagesToAdmit(16, 16), 2);  // 16 tokens and the 17th it samples
  EXPECT_EQ(PagesToAdmit(0, 16), 1);
}

TEST(DecideAdmission, AdmitsWhatFits) {
  EXPECT_EQ(DecideAdmission(100, Roomy()), Admission::kAdmit);
  EXPECT_EQ(DecideAdmission(159, Roomy()), Admission::kAdmit);  // exactly the 10 pages
}

TEST(DecideAdmission, WaitsForABatchPlaceAStateSlotOrPages) {
  Capacity full_batch = Roomy();
  full_batch.running = full_batch.max_running;
  EXPECT_EQ(DecideAdmission(10, full_batch), Admission::kWait);
  Capacity no_slot = Roomy();
  no_slot.state_slots_free = 0;
  EXPECT_EQ(DecideAdmission(10, no_slot), Admission::kWait);
  Capacity few_pages = Roomy();
  few_pages.kv_pages_free = 2;
  few_pages.running = 1;
  EXPECT_EQ(DecideAdmission(31, few_pages), Admission::kAdmit);  // 31 + 1 tokens: 2 pages
  EXPECT_EQ(DecideAdmission(32, few_pages), Admission::kWait);
}

TEST(DecideAdmission, PagesSharedWithRunningSequencesNeedNotBeFree) {
  Capacity c = Roomy();
  c.running = 1;
  c.kv_pages_free = 2;
  EXPECT_EQ(DecideAdmission(100, c), Admission::kWait);  // 7 pages, 2 free
  c.shared_pages = 5;                                    // a document another request holds
  EXPECT_EQ(DecideAdmission(100, c), Admission::kAdmit);
  c.shared_pages = 4;
  EXPECT_EQ(DecideAdmission(100, c), Admission::kWait);
  // Sharing never makes a sequence larger than the whole cache fit.
  c.shared_pages = 11;
  EXPECT_EQ(DecideAdmission(160, c), Admission::kNeverFits);
}

TEST(Reservation, IsWhatARunningRequestStillTakesBeforeItsNextToken) {
  EXPECT_EQ(PagesStillToTake(100, 0, 16), 7);  // admitted, nothing computed yet
  EXPECT_EQ(PagesStillToTake(100, 4, 16), 3);  // part of its prefill done
  EXPECT_EQ(PagesStillToTake(100, 7, 16), 0);  // every page it needs is held
  EXPECT_EQ(PagesStillToTake(112, 7, 16), 1);  // its sampled tokens reached a new page
  EXPECT_EQ(PagesStillToTake(20, 9, 16), 0);   // shared pages count as held: never negative
}

TEST(DecideAdmission, LeavesTheRunningRequestsReservationsFree) {
  Capacity c = Roomy();
  c.running = 1;
  c.kv_pages_free = 9;
  EXPECT_EQ(DecideAdmission(100, c), Admission::kAdmit);  // 7 of 9
  c.kv_pages_reserved = 3;                                // promised to the running request
  EXPECT_EQ(DecideAdmission(100, c), Admission::kWait);
  c.shared_pages = 1;  // what it shares with running sequences is not taken from the pool
  EXPECT_EQ(DecideAdmission(100, c), Admission::kAdmit);
  // A reservation never turns a request that fits the cache into one that never fits.
  c.kv_pages_reserved = 9;
  EXPECT_EQ(DecideAdmission(159, c), Admission::kWait);
}

TEST(DecideAdmission, RefusesWhatTheWholeCacheCannotHold) {
  EXPECT_EQ(DecideAdmission(160, Roomy()), Admission::kNeverFits);  // 11 pages of a 10-page cache
  Capacity busy = Roomy();
  busy.running = 4;  // even while the batch is full: waiting would never help
  busy.kv_pages_free = 0;
  EXPECT_EQ(DecideAdmission(1000, busy), Admission::kNeverFits);
}

TEST(DecideAdmission, AModelWithoutAttentionNeedsNoPages) {
  Capacity c = Roomy();
  c.uses_kv = false;
  c.kv_pages_free = c.kv_pages_total = 0;
  EXPECT_EQ(DecideAdmission(100000, c), Admission::kAdmit);
  c.state_slots_free = 0;
  EXPECT_EQ(DecideAdmission(1, c), Admission::kWait);
}

TEST(PreemptionVictim, TheLastToArriveGivesWay) {
  const std::vector<uint64_t> arrivals = {4, 9, 2, 7};
  EXPECT_EQ(PreemptionVictim(arrivals), 1);
}

TEST(PreemptionVictim, OneRequestAloneIsNeverPreempted) {
  EXPECT_EQ(PreemptionVictim(std::vector<uint64_t>{}), -1);
  EXPECT_EQ(PreemptionVictim(std::vector<uint64_t>{3}), -1);
}

TEST(PreemptionVictim, TiesGoToTheFirstInTheBatch) {
  const std::vector<uint64_t> arrivals = {5, 8, 8};
  EXPECT_EQ(PreemptionVictim(arrivals), 1);
}

TEST(PlanBatch, DecodesFirstThenPrefillsInOrderWithinTheBudget) {
  const std::vector<BatchCandidate> c = {{.remaining = 40},
                                         {.remaining = 1, .decode = true},
                                         {.remaining = 30},
                                         {.remaining = 1, .decode = true}};
  EXPECT_EQ(PlanBatch(c, 64), (std::vector<int64_t>{40, 1, 22, 1}));
  EXPECT_EQ(PlanBatch(c, 2), (std::vector<int64_t>{0, 1, 0, 1}));
  EXPECT_EQ(PlanBatch(c, 1), (std::vector<int64_t>{0, 1, 0, 0}));
  EXPECT_EQ(PlanBatch(c, 0), (std::vector<int64_t>{0, 0, 0, 0}));
}

TEST(PlanBatch, APrefillChunkEndsAtASnapshotPoint) {
  const std::vector<BatchCandidate> c = {{.remaining = 100, .until_snapshot = 32},
                                         {.remaining = 10}};
  EXPECT_EQ(PlanBatch(c, 512), (std::vector<int64_t>{32, 10}));
}

TEST(PlanBatch, SkipsWhatHasNothingToFeed) {
  const std::vector<BatchCandidate> c = {{.remaining = 0}, {.remaining = 5}};
  EXPECT_EQ(PlanBatch(c, 8), (std::vector<int64_t>{0, 5}));
}

TEST(PlanBatch, NeverExceedsTheBudget) {
  std::vector<BatchCandidate> c;
  for (int i = 0; i < 20; ++i) {
    c.push_back({.remaining = 1 + (i * 7) % 13,
                 .decode = i % 3 == 0,
                 .until_snapshot = i % 4 == 0 ? 3 : -1});
  }
  for (int64_t budget = 0; budget < 80; ++budget) {
    const std::vector<int64_t> take = PlanBatch(c, budget);
    int64_t sum = 0;
    for (size_t i = 0; i < c.size(); ++i) {
      EXPECT_LE(take[i], c[i].remaining);
      if (c[i].until_snapshot > 0) {
        EXPECT_LE(take[i], c[i].until_snapshot);
      }
      sum += take[i];
    }
    EXPECT_LE(sum, budget);
  }
}

}  // namespace
}  // namespace walsh
