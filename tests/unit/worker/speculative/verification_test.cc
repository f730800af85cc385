// The speculative step's pieces (worker/speculative/verification.h): guesses cut to the
// vocabulary and the ask, the token budget shared after every decode's own token, a verified
// member sampling while its drafts hold (and only then), and the accepted count, including a
// run a stop rule ends on a matching draft.
#include "worker/speculative/verification.h"

#include <vector>

#include "gtest/gtest.h"

namespace walsh {
namespace {

TEST(Verification, ADraftIsCutAtItsFirstBadTokenAndAtTheAsk) {
  EXPECT_EQ(TrimDraft({1, 2, 3, 4}, 10, 3), (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(TrimDraft({1, 10, 3}, 10, 5), (std::vector<int32_t>{1}));
  EXPECT_EQ(TrimDraft({-1, 2}, 10, 5), (std::vector<int32_t>{}));
  EXPECT_EQ(TrimDraft({1, 2}, 10, 0), (std::vector<int32_t>{}));
}

TEST(Verification, DraftsShareWhatTheDecodesLeave) {
  std::vector<std::vector<int32_t>> drafts = {{1, 2, 3}, {}, {4, 5, 6}, {7}};
  // Budget 6: three decodes take 3, the drafts share 3 in order.
  const std::vector<int64_t> kept = ShareDraftBudget(6, {true, false, true, true}, drafts);
  EXPECT_EQ(kept, (std::vector<int64_t>{3, 0, 0, 0}));
  EXPECT_EQ(drafts[0].size(), 3u);
  EXPECT_TRUE(drafts[2].empty() && drafts[3].empty());
  std::vector<std::vector<int32_t>> none = {{1, 2}};
  EXPECT_EQ(ShareDraftBudget(1, {true}, none), (std::vector<int64_t>{0}));
}

// Logits whose greedy sample at row j is want[j].
std::vector<float> Rows(const std::vector<int32_t>& want, int64_t vocab) {
  std::vector<float> l(want.size() * vocab, 0.0f);
  for (size_t j = 0; j < want.size(); ++j) l[j * vocab + want[j]] = 5.0f;
  return l;
}

Generation Greedy(int64_t max_tokens, std::vector<int32_t> stop_ids = {}) {
  GenerationRequest req;
  req.prompt = {1, 2};
  req.sampling.temperature = 0;
  req.stop.max_tokens = max_tokens;
  req.stop.stop_ids = std::move(stop_ids);
  return Generation(nullptr, std::move(req));
}

TEST(Verification, SamplesWhileTheDraftsHold) {
  constexpr int64_t kVocab = 8;
  // Drafts 3, 4, 5; the model's own samples 3, 4, 6, 7: two accepted, the third differs.
  Generation g = Greedy(100);
  std::vector<GeneratedToken> sampled;
  const std::vector<float> logits = Rows({3, 4, 6, 7}, kVocab);
  ASSERT_TRUE(SampleWhileDraftsHold(g, logits.data(), kVocab, 4, {3, 4, 5}, &sampled).ok());
  ASSERT_EQ(sampled.size(), 3u);
  EXPECT_EQ(sampled[2].id, 6);
  EXPECT_EQ(AcceptedDrafts(sampled, {3, 4, 5}), 2u);

  // Every draft right: each row sampled, the last (after the drafts) too.
  Generation all = Greedy(100);
  sampled.clear();
  const std::vector<float> right = Rows({3, 4, 5, 1}, kVocab);
  ASSERT_TRUE(SampleWhileDraftsHold(all, right.data(), kVocab, 4, {3, 4, 5}, &sampled).ok());
  EXPECT_EQ(sampled.size(), 4u);
  EXPECT_EQ(AcceptedDrafts(sampled, {3, 4, 5}), 3u);

  // A stop token the draft guessed ends the run on a matching draft: it counts as accepted.
  Generation stops = Greedy(100, {4});
  sampled.clear();
  ASSERT_TRUE(SampleWhileDraftsHold(stops, right.data(), kVocab, 4, {3, 4, 5}, &sampled).ok());
  ASSERT_EQ(sampled.size(), 2u);
  EXPECT_NE(sampled[1].finish, FinishReason::kNone);
  EXPECT_EQ(AcceptedDrafts(sampled, {3, 4, 5}), 2u);
  EXPECT_EQ(AcceptedDrafts({}, {3}), 0u);
}

}  // namespace
}  // namespace walsh
