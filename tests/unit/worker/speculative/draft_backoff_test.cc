// A request's drafting back-off (draft_backoff.h): rejected drafts pause it for 4, 8, ... 64
// decode steps; accepted ones keep it drafting, and a recovered rate ends the run of pauses.
#include "worker/speculative/draft_backoff.h"

#include "gtest/gtest.h"

namespace walsh {
namespace {

// Decode steps until the request drafts again (0: it drafts at once).
int StepsPaused(DraftBackoff& b) {
  int paused = 0;
  while (!DraftsThisStep(b)) ++paused;
  return paused;
}

TEST(DraftBackoff, RejectedDraftsPauseForLongerAndLongerPauses) {
  DraftBackoff b;
  // From a rate of 1, three verifications that keep nothing bring it below 0.5.
  RecordVerification(b, 3, 0, 0.5);
  EXPECT_EQ(StepsPaused(b), 0);
  RecordVerification(b, 3, 0, 0.5);
  EXPECT_EQ(StepsPaused(b), 0);
  RecordVerification(b, 3, 0, 0.5);
  EXPECT_EQ(StepsPaused(b), 4);
  // It drafts again from the minimum: one more bad verification pauses it twice as long.
  for (int want : {8, 16, 32, 64, 64}) {
    RecordVerification(b, 3, 0, 0.5);
    EXPECT_EQ(StepsPaused(b), want);
  }
}

TEST(DraftBackoff, AcceptedDraftsEndTheRunOfPauses) {
  DraftBackoff b;
  for (int i = 0; i < 3; ++i) RecordVerification(b, 4, 0, 0.5);
  EXPECT_EQ(StepsPaused(b), 4);
  for (int i = 0; i < 4; ++i) RecordVerification(b, 4, 4, 0.5);  // back above 0.75
  EXPECT_EQ(StepsPaused(b), 0);
  int paused = 0;
  for (int i = 0; i < 10 && paused == 0; ++i) {
    RecordVerification(b, 4, 0, 0.5);
    paused = StepsPaused(b);
  }
  EXPECT_EQ(paused, 4);  // a new run of pauses starts short again
}

TEST(DraftBackoff, AMinimumOfZeroNeverPauses) {
  DraftBackoff b;
  for (int i = 0; i < 100; ++i) {
    RecordVerification(b, 5, 0, 0);
    EXPECT_TRUE(DraftsThisStep(b));
  }
  RecordVerification(b, 0, 0, 0.9);  // nothing drafted: nothing learned
  EXPECT_TRUE(DraftsThisStep(b));
}

}  // namespace
}  // namespace walsh
