// A speculative step verifies drafted tokens in one forward pass, then rolls the sequence back
// to what was accepted (SequenceRunner::Rollback): KV positions past it are dropped and the
// GatedDeltaNet state comes from the plane kept after the last accepted token. Every logit of
// every accepted position must be bit-identical to plain greedy decoding, whatever was drafted
// (all right, all wrong, anything between), on one rank or two, and the prefix cache must hold
// only what was accepted.
#include <cstring>

#include "gtest/gtest.h"
#include "tests/util/synthetic_engine.h"
#include "worker/engine/engine.h"

namespace walsh {
namespace {

int32_t Argmax(const float* row, int64_t vocab) {
  int32_t best = 0;
  for (int32_t i = 1; i < vocab; ++i) {
    if (row[i] > row[best]) best = i;
  }
  return best;
}

// Plain greedy decoding: the prompt and `n` generated tokens, and the logits at every position.
struct Greedy {
  std::vector<int32_t> tokens;
  std::vector<float> logits;  // tokens.size() rows
};

Greedy Decode(SequenceRunner& e, const std::vector<int32_t>& prompt, int n) {
  Greedy g{prompt, {}};
  auto seq = e.AddSequence();
  EXPECT_TRUE(seq.ok());
  std::vector<int32_t> next = prompt;
  for (int i = 0; i <= n; ++i) {
    auto out = e.Forward({{*seq, next, /*all_logits=*/true}});
    EXPECT_TRUE(out.ok()) << out.status();
    g.logits.insert(g.logits.end(), out->logits.begin(), out->logits.end());
    next = {Argmax(out->RowLogits(out->rows.size() - 1), out->vocab)};
    if (i < n) g.tokens.push_back(next[0]);
  }
  EXPECT_TRUE(e.RemoveSequence(*seq).ok());
  g.logits.resize(g.tokens.size() * static_cast<size_t>(e.model().config().vocab_size));
  return g;
}

// Decodes `ref`'s continuation speculatively, k drafts a step: the first `right(step)` drafts
// are the reference's tokens, the rest are wrong. Checks every accepted row against `ref`.
void CheckSpeculation(SequenceRunner& e, const Greedy& ref, size_t prompt_len, int k,
                      const std::function<int(int)>& right) {
  const int64_t vocab = e.model().config().vocab_size;
  auto seq = e.AddSequence();
  ASSERT_TRUE(seq.ok());
  const std::vector<int32_t> head(ref.tokens.begin(), ref.tokens.begin() + prompt_len - 1);
  ASSERT_TRUE(e.Forward({{*seq, head, false}}).ok());
  int32_t last = ref.tokens[prompt_len - 1];
  for (int step = 0;; ++step) {
    const int64_t pos = *e.SequenceLength(*seq);  // where `last` goes
    if (pos + 1 >= static_cast<int64_t>(ref.tokens.size())) break;
    std::vector<int32_t> input = {last};
    for (int j = 0; j < k; ++j) {
      const size_t at = static_cast<size_t>(pos) + 1 + j;
      const int32_t truth = at < ref.tokens.size() ? ref.tokens[at] : 0;
      input.push_back(j < right(step) ? truth : static_cast<int32_t>((truth + 1) % vocab));
    }
    auto out = e.Forward({{*seq, input, /*all_logits=*/true, /*keep_states=*/true}});
    ASSERT_TRUE(out.ok()) << out.status();
    int accepted = 0;
    while (accepted < k && Argmax(out->RowLogits(accepted), vocab) == input[accepted + 1]) {
      ++accepted;
    }
    for (int j = 0; j <= accepted; ++j) {
      const size_t at = static_cast<size_t>(pos) + j;
      if (at >= ref.tokens.size()) break;
      EXPECT_EQ(
          0, std::memcmp(out->RowLogits(j), ref.logits.data() + at * vocab, vocab * sizeof(float)))
          << "position " << at << ", step " << step;
    }
    last = Argmax(out->RowLogits(accepted), vocab);
    ASSERT_TRUE(e.Rollback(*seq, pos + 1 + accepted).ok());
    EXPECT_EQ(*e.SequenceLength(*seq), pos + 1 + accepted);
  }
  EXPECT_EQ(e.Stats().state_slots_used, 1);  // the planes went back
  ASSERT_TRUE(e.RemoveSequence(*seq).ok());
  EXPECT_EQ(e.Stats().kv_pages_used, 0);
  EXPECT_EQ(e.Stats().state_slots_used, 0);
}

void CheckRollbackIsExact(EngineOptions options) {
  testing::SyntheticEngine f("tiny");
  auto engine = f.Make(options);
  const std::vector<int32_t> prompt = f.Tokens(37, 4);
  const Greedy ref = Decode(*engine, prompt, 40);
  for (int k : {1, 3, 5}) {
    SCOPED_TRACE("k = " + std::to_string(k));
    CheckSpeculation(*engine, ref, prompt.size(), k, [](int) { return 0; });   // all wrong
    CheckSpeculation(*engine, ref, prompt.size(), k, [k](int) { return k; });  // all right
    CheckSpeculation(*engine, ref, prompt.size(), k, [k](int s) { return s % (k + 1); });
  }
  // What the cache kept after all that holds only accepted tokens: a new sequence that shares
  // those pages decodes the reference's logits.
  const Greedy again = Decode(*engine, prompt, 40);
  EXPECT_EQ(again.tokens, ref.tokens);
  EXPECT_EQ(0,
            std::memcmp(again.logits.data(), ref.logits.data(), ref.logits.size() * sizeof(float)));
}

TEST(SpeculativeStep, RollbackIsBitIdenticalToPlainDecoding) { CheckRollbackIsExact({}); }
TEST(SpeculativeStep, RollbackIsBitIdenticalOnTwoRanks) { CheckRollbackIsExact({.tp = 2}); }
TEST(SpeculativeStep, RollbackIsBitIdenticalWithQ8Kv) {
  CheckRollbackIsExact({.kv_cache_dtype = KvCacheDtype::kQ8});
}

TEST(SpeculativeStep, MisuseIsRefusedAndChangesNothing) {
  testing::SyntheticEngine f("tiny");
  auto engine = f.Make({}, {.state_slots = 3});
  auto seq = engine->AddSequence();
  ASSERT_TRUE(seq.ok());
  ASSERT_TRUE(engine->Forward({{*seq, f.Tokens(10, 1), false}}).ok());
  EXPECT_EQ(engine->Rollback(*seq, 10).code(), absl::StatusCode::kFailedPrecondition);
  // Three drafts need three planes; two slots are free.
  auto too_many = engine->Forward({{*seq, f.Tokens(4, 2), false, /*keep_states=*/true}});
  EXPECT_EQ(too_many.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(*engine->SequenceLength(*seq), 10);
  EXPECT_EQ(engine->Stats().state_slots_used, 1);
  ASSERT_TRUE(engine->Forward({{*seq, f.Tokens(3, 2), false, /*keep_states=*/true}}).ok());
  EXPECT_EQ(engine->Stats().state_slots_used, 3);
  // Its next step waits for the rollback, which stays within the step.
  EXPECT_EQ(engine->Forward({{*seq, {1}, false}}).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_FALSE(engine->Snapshot(*seq).ok());
  EXPECT_EQ(engine->Rollback(*seq, 10).code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(engine->Rollback(*seq, 14).code(), absl::StatusCode::kOutOfRange);
  ASSERT_TRUE(engine->Rollback(*seq, 11).ok());
  EXPECT_EQ(*engine->SequenceLength(*seq), 11);
  EXPECT_EQ(engine->Stats().state_slots_used, 1);
  EXPECT_TRUE(engine->Forward({{*seq, {1}, false}}).ok());
}

}  // namespace
}  // namespace walsh
