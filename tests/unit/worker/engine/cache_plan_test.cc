// How cache memory is shared out (cache_plan.h): budgets, exact counts, and a device's room.
#include "worker/engine/cache_plan.h"

#include "gtest/gtest.h"

namespace walsh {
namespace {

constexpr int64_t kPage = 1000, kSlot = 3000;

TEST(PlanCaches, BudgetsBecomeWholePagesAndSlots) {
  auto p = PlanCaches({.kv_cache_bytes = 10'500, .state_bytes = 9'999, .snapshot_bytes = 6'000},
                      kPage, kSlot);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->pages, 10);
  EXPECT_EQ(p->slots, 3);
  EXPECT_EQ(p->snapshot_slots, 2);
  // Exact counts win over the budgets.
  p = PlanCaches({.kv_cache_bytes = 10'500, .state_bytes = 9'999, .kv_pages = 4, .state_slots = 7},
                 kPage, kSlot);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->pages, 4);
  EXPECT_EQ(p->slots, 7);
  EXPECT_EQ(p->snapshot_slots, 0);
}

TEST(PlanCaches, ADeviceWithLessRoomCutsPagesThenSnapshots) {
  const CacheBudget budget{
      .kv_cache_bytes = 10'000, .state_bytes = 6'000, .snapshot_bytes = 9'000, .room = 13'500};
  auto p = PlanCaches(budget, kPage, kSlot);  // the slots take 6,000: 7 pages fit, no snapshot
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->slots, 2);
  EXPECT_EQ(p->pages, 7);
  EXPECT_EQ(p->snapshot_slots, 0);
  CacheBudget roomier = budget;
  roomier.room = 22'000;  // all 10 pages, and 2 of the 3 snapshot slots in the 6,000 left
  p = PlanCaches(roomier, kPage, kSlot);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->pages, 10);
  EXPECT_EQ(p->snapshot_slots, 2);
}

TEST(PlanCaches, ABudgetThatHoldsNothingIsNamed) {
  auto p = PlanCaches({.kv_cache_bytes = 999, .state_bytes = 6'000}, kPage, kSlot);
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(p.status().message(),
            "KV cache budget of 999 bytes holds no page (a page is 1000 bytes)");
  p = PlanCaches({.kv_cache_bytes = 5'000, .state_bytes = 2'999}, kPage, kSlot);
  EXPECT_EQ(p.status().message(),
            "state budget of 2999 bytes holds no slot (a slot is 3000 bytes)");
  p = PlanCaches({.kv_cache_bytes = 5'000, .state_bytes = 6'000, .room = 6'500}, kPage, kSlot);
  EXPECT_EQ(p.status().message(),
            "KV cache budget of 5000 bytes holds no page (a page is 1000 bytes; the device has "
            "6500 bytes for caches)");
  p = PlanCaches({.kv_cache_bytes = 5'000, .state_bytes = 9'000, .room = 8'000}, kPage, kSlot);
  EXPECT_EQ(p.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(p.status().message(),
            "the state budget's 3 slots need 9000 bytes; the device has 8000 bytes for caches");
}

}  // namespace
}  // namespace walsh
