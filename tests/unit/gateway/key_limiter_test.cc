// KeyLimiter in-process, on a fake clock: the rate bucket per key refills at --rate-limit up to
// --rate-burst, a key's stream slots come back when their handles go, and every refusal is
// RESOURCE_EXHAUSTED naming its flag.
#include "gateway/key_limiter.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace walsh {
namespace {

using std::chrono::milliseconds;

struct FakeClock {
  std::chrono::steady_clock::time_point now =
      std::chrono::steady_clock::time_point() + std::chrono::hours(1);
  KeyLimiter::Clock Fn() {
    return [this] { return now; };
  }
};

TEST(KeyLimiter, TheBucketHoldsTheBurstThenRefillsAtTheRate) {
  FakeClock clock;
  KeyLimiter limiter(/*max_streams_per_key=*/0, /*rate=*/2, /*burst=*/3, clock.Fn());
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(limiter.AdmitCall("a").ok()) << i;
  const absl::Status refused = limiter.AdmitCall("a");
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(refused.message().find("--rate-limit"), absl::string_view::npos) << refused;
  // Another key has its own bucket.
  EXPECT_TRUE(limiter.AdmitCall("b").ok());
  // Half a token after 250 ms at 2/s: still refused; a whole one at 500 ms.
  clock.now += milliseconds(250);
  EXPECT_FALSE(limiter.AdmitCall("a").ok());
  clock.now += milliseconds(250);
  EXPECT_TRUE(limiter.AdmitCall("a").ok());
  EXPECT_FALSE(limiter.AdmitCall("a").ok());
  // A long pause refills no more than the burst.
  clock.now += std::chrono::hours(1);
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(limiter.AdmitCall("a").ok()) << i;
  EXPECT_FALSE(limiter.AdmitCall("a").ok());
}

TEST(KeyLimiter, StreamSlotsComeBackWhenTheirHandlesGo) {
  FakeClock clock;
  KeyLimiter limiter(/*max_streams_per_key=*/2, /*rate=*/0, /*burst=*/1, clock.Fn());
  std::shared_ptr<void> a1, a2, a3, b1;
  ASSERT_TRUE(limiter.AdmitStream("a", &a1).ok());
  ASSERT_TRUE(limiter.AdmitStream("a", &a2).ok());
  const absl::Status refused = limiter.AdmitStream("a", &a3);
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(refused.message().find("--max-streams-per-key"), absl::string_view::npos) << refused;
  EXPECT_EQ(a3, nullptr);
  EXPECT_TRUE(limiter.AdmitStream("b", &b1).ok());
  a1.reset();
  EXPECT_TRUE(limiter.AdmitStream("a", &a3).ok());
  // Calls that are not streams take no slot.
  EXPECT_TRUE(limiter.AdmitCall("a").ok());
}

TEST(KeyLimiter, AStreamTakesARateTokenToo) {
  FakeClock clock;
  KeyLimiter limiter(/*max_streams_per_key=*/0, /*rate=*/1, /*burst=*/1, clock.Fn());
  std::shared_ptr<void> s1, s2;
  ASSERT_TRUE(limiter.AdmitStream("a", &s1).ok());
  const absl::Status refused = limiter.AdmitStream("a", &s2);
  EXPECT_NE(refused.message().find("--rate-limit"), absl::string_view::npos) << refused;
  clock.now += std::chrono::seconds(1);
  EXPECT_TRUE(limiter.AdmitStream("a", &s2).ok());
}

TEST(KeyLimiter, ZeroTurnsBothLimitsOff) {
  KeyLimiter limiter(0, 0, 1);
  std::vector<std::shared_ptr<void>> slots(1000);
  for (auto& s : slots) ASSERT_TRUE(limiter.AdmitStream("a", &s).ok());
  for (int i = 0; i < 1000; ++i) ASSERT_TRUE(limiter.AdmitCall("a").ok());
}

// A flood of new clients leaves the table flat: an entry with no stream and a full bucket is
// forgotten (it is the same as a new one), so 100,000 clients each spending one token, a
// millisecond apart, keep at most a few thousand tracked at 1 request per second.
TEST(KeyLimiter, ManyClientsKeepTheTableBounded) {
  FakeClock clock;
  KeyLimiter limiter(/*max_streams_per_key=*/4, /*rate=*/1, /*burst=*/2, clock.Fn());
  int64_t most = 0;
  for (int i = 0; i < 100'000; ++i) {
    std::shared_ptr<void> slot;
    ASSERT_TRUE(limiter.AdmitStream("peer:" + std::to_string(i), &slot).ok()) << i;
    clock.now += milliseconds(1);
    most = std::max(most, limiter.tracked());
  }
  EXPECT_LE(most, 4096);
}

// Past --rate-limit-max-clients busy clients a new one is refused, naming the flag; a client
// with a stream open is never forgotten, and once the others' buckets refill there is room.
TEST(KeyLimiter, ATableOfBusyClientsRefusesNewOnesByName) {
  FakeClock clock;
  KeyLimiter limiter(/*max_streams_per_key=*/0, /*rate=*/1, /*burst=*/1, clock.Fn(),
                     /*max_clients=*/3);
  std::shared_ptr<void> held;
  ASSERT_TRUE(limiter.AdmitStream("a", &held).ok());
  ASSERT_TRUE(limiter.AdmitCall("b").ok());
  ASSERT_TRUE(limiter.AdmitCall("c").ok());
  const absl::Status refused = limiter.AdmitCall("d");
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(refused.message().find("--rate-limit-max-clients"), absl::string_view::npos) << refused;
  EXPECT_FALSE(limiter.AdmitCall("b").ok());  // a known client keeps its (empty) bucket
  clock.now += std::chrono::seconds(1);
  EXPECT_TRUE(limiter.AdmitCall("d").ok());  // b and c refilled: forgotten, room made
  EXPECT_EQ(limiter.tracked(), 2);           // a (its stream) and d
  held.reset();
  EXPECT_TRUE(limiter.AdmitCall("a").ok());
}

}  // namespace
}  // namespace walsh
