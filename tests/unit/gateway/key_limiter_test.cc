// KeyLimiter in-process, on a fake clock: the rate bucket per key refills at --rate-limit up to
// --rate-burst, a key's stream slots come back when their handles go, and every refusal is
// RESOURCE_EXHAUSTED naming its flag.
#include "gateway/key_limiter.h"

#include <chrono>
#include <memory>
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

}  // namespace
}  // namespace walsh
