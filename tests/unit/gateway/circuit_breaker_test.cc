// The per-worker circuit breaker's state machine on a clock the test moves.
#include "gateway/circuit_breaker.h"

#include "gtest/gtest.h"

namespace walsh {
namespace {

using State = CircuitBreaker::State;
using std::chrono::milliseconds;

class BreakerTest : public testing::Test {
 protected:
  CircuitBreaker::Clock::time_point now_{};
  CircuitBreaker breaker_{
      {.failures = 3, .cool_down = milliseconds(500), .clock = [this] { return now_; }}};
};

TEST_F(BreakerTest, OpensAfterConsecutiveFailuresOnly) {
  breaker_.RecordFailure();
  breaker_.RecordFailure();
  breaker_.RecordSuccess();  // the count is of consecutive failures
  breaker_.RecordFailure();
  breaker_.RecordFailure();
  EXPECT_EQ(breaker_.state(), State::kClosed);
  EXPECT_TRUE(breaker_.Allow());
  breaker_.RecordFailure();
  EXPECT_EQ(breaker_.state(), State::kOpen);
  EXPECT_FALSE(breaker_.Allow());
}

TEST_F(BreakerTest, AfterTheCoolDownOneTrialAtATime) {
  for (int i = 0; i < 3; ++i) breaker_.RecordFailure();
  now_ += milliseconds(499);
  EXPECT_EQ(breaker_.state(), State::kOpen);
  EXPECT_FALSE(breaker_.Allow());
  now_ += milliseconds(1);
  EXPECT_EQ(breaker_.state(), State::kHalfOpen);
  EXPECT_TRUE(breaker_.Allow());   // the trial
  EXPECT_FALSE(breaker_.Allow());  // no second call while it runs
  breaker_.RecordSuccess();
  EXPECT_EQ(breaker_.state(), State::kClosed);
  EXPECT_TRUE(breaker_.Allow());
  EXPECT_TRUE(breaker_.Allow());
}

TEST_F(BreakerTest, AFailedTrialOpensItAgainForAWholeCoolDown) {
  for (int i = 0; i < 3; ++i) breaker_.RecordFailure();
  now_ += milliseconds(500);
  ASSERT_TRUE(breaker_.Allow());
  breaker_.RecordFailure();  // one failure is enough when half-open
  EXPECT_EQ(breaker_.state(), State::kOpen);
  now_ += milliseconds(499);
  EXPECT_FALSE(breaker_.Allow());
  now_ += milliseconds(1);
  EXPECT_TRUE(breaker_.Allow());
}

TEST_F(BreakerTest, AReleasedTrialLetsTheNextCallBeTheTrial) {
  for (int i = 0; i < 3; ++i) breaker_.RecordFailure();
  now_ += milliseconds(500);
  ASSERT_TRUE(breaker_.Allow());
  EXPECT_FALSE(breaker_.Allow());
  breaker_.ReleaseTrial();  // the trial said nothing of the worker (its client cancelled)
  EXPECT_EQ(breaker_.state(), State::kHalfOpen);
  EXPECT_TRUE(breaker_.Allow());
}

TEST_F(BreakerTest, AnAnswerClosesAHalfOpenBreakerAndCountsNothingElse) {
  // A worker that answers, then fails: the answers do not reset the count of failures.
  for (int i = 0; i < 3; ++i) {
    breaker_.RecordAnswer();
    breaker_.RecordFailure();
  }
  EXPECT_EQ(breaker_.state(), State::kOpen);
  breaker_.RecordAnswer();  // an older stream answering: still open
  EXPECT_EQ(breaker_.state(), State::kOpen);
  now_ += milliseconds(500);
  EXPECT_TRUE(breaker_.Allow());  // the trial
  breaker_.RecordAnswer();        // its first response
  EXPECT_EQ(breaker_.state(), State::kClosed);
  EXPECT_TRUE(breaker_.Allow());
  EXPECT_TRUE(breaker_.Allow());
}

TEST(BreakerOptions, AThresholdOfOneOpensAtTheFirstFailure) {
  CircuitBreaker::Clock::time_point now{};
  CircuitBreaker breaker(
      {.failures = 1, .cool_down = milliseconds(0), .clock = [&] { return now; }});
  breaker.RecordFailure();
  EXPECT_EQ(breaker.state(), State::kHalfOpen);  // a zero cool-down: straight to a trial
  EXPECT_TRUE(breaker.Allow());
}

TEST(BreakerStateName, NamesEveryState) {
  EXPECT_STREQ(BreakerStateName(State::kClosed), "closed");
  EXPECT_STREQ(BreakerStateName(State::kOpen), "open");
  EXPECT_STREQ(BreakerStateName(State::kHalfOpen), "half_open");
}

}  // namespace
}  // namespace walsh
