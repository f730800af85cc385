// Prompt-lookup drafting (ngram_drafter.h): what is drafted, from where, and what is refused.
#include "worker/speculative/ngram_drafter.h"

#include "gtest/gtest.h"

namespace walsh {
namespace {

using Tokens = std::vector<int32_t>;

TEST(NgramDrafter, DraftsWhatFollowedTheMostRecentEarlierOccurrence) {
  const NgramDraftOptions o{.min_match = 1, .max_match = 3, .max_tokens = 3};
  // "7 8" occurred twice before; the later one was followed by 4 5 6.
  EXPECT_EQ(DraftNgram(Tokens{7, 8, 1, 2, 9, 7, 8, 4, 5, 6, 0, 7, 8}, o), (Tokens{4, 5, 6}));
  // At most max_tokens, and no further than the sequence goes.
  EXPECT_EQ(DraftNgram(Tokens{1, 2, 3, 1, 2}, o), (Tokens{3, 1, 2}));
  EXPECT_EQ(DraftNgram(Tokens{5, 6, 5}, o), (Tokens{6, 5}));
}

TEST(NgramDrafter, TheLongestMatchingSuffixWins) {
  const NgramDraftOptions o{.min_match = 1, .max_match = 2, .max_tokens = 2};
  // The one-token suffix "3" last occurred before 9; the two-token "2 3" before 4.
  EXPECT_EQ(DraftNgram(Tokens{2, 3, 4, 4, 3, 9, 2, 3}, o), (Tokens{4, 4}));
}

TEST(NgramDrafter, NothingRecursNothingDrafted) {
  const NgramDraftOptions o{.min_match = 2, .max_match = 4, .max_tokens = 3};
  EXPECT_TRUE(DraftNgram(Tokens{1, 2, 3, 4, 5}, o).empty());
  EXPECT_TRUE(DraftNgram(Tokens{1, 2, 1}, o).empty());  // one token recurs; two are needed
  EXPECT_TRUE(DraftNgram(Tokens{}, o).empty());
  EXPECT_TRUE(DraftNgram(Tokens{4}, o).empty());
}

TEST(NgramDrafter, BadOptionsAreNamed) {
  EXPECT_TRUE(ValidateNgramDraftOptions({}).ok());
  EXPECT_EQ(ValidateNgramDraftOptions({.min_match = 0}).message(),
            "the n-gram drafter's minimum match is 0; it must be >= 1");
  EXPECT_EQ(ValidateNgramDraftOptions({.min_match = 3, .max_match = 2}).message(),
            "the n-gram drafter's maximum match (2) is below its minimum (3)");
  EXPECT_EQ(ValidateNgramDraftOptions({.max_tokens = 0}).message(),
            "the n-gram drafter drafts 0 tokens; it must be >= 1");
}

}  // namespace
}  // namespace walsh
