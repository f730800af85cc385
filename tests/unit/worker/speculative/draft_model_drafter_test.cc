// A draft model's sequences follow their requests exactly: a checkpoint restored is as if the
// steps after it had never run (bit for bit), and a drafter whose draft model is the target
// itself drafts the target's own greedy tokens at every step, whatever the target accepted
// before. A draft model whose vocabulary differs is refused, naming the difference.
#include "worker/speculative/draft_model_drafter.h"

#include <cstring>

#include "gtest/gtest.h"
#include "kernels/cpu/ops.h"
#include "tests/util/synthetic_engine.h"

namespace walsh {
namespace {

// A draft model's memory: no prefix caching.
constexpr CacheOptions kNoPrefixCaching{.prefix_caching = false};

void CheckRestoreIsExact(int tp) {
  testing::SyntheticEngine f("tiny");
  auto engine = f.Make({.tp = tp}, kNoPrefixCaching);
  const std::vector<int32_t> prompt = f.Tokens(21, 3), next = f.Tokens(9, 4);
  auto reference = [&] {
    auto seq = engine->AddSequence();
    EXPECT_TRUE(seq.ok());
    EXPECT_TRUE(engine->Forward({{*seq, prompt}}).ok());
    auto out = engine->Forward({{*seq, next, /*all_logits=*/true}});
    EXPECT_TRUE(out.ok());
    EXPECT_TRUE(engine->RemoveSequence(*seq).ok());
    return out->logits;
  }();
  auto seq = engine->AddSequence();
  ASSERT_TRUE(seq.ok());
  ASSERT_TRUE(engine->Forward({{*seq, prompt}}).ok());
  for (int round = 0; round < 3; ++round) {  // steps of any size after the checkpoint, undone
    ASSERT_TRUE(engine->Checkpoint(*seq).ok());
    EXPECT_EQ(engine->Stats().state_slots_used, 2);
    for (int step = 0; step <= round; ++step) {
      ASSERT_TRUE(engine->Forward({{*seq, f.Tokens(1 + 7 * step, 10 + round)}}).ok());
    }
    ASSERT_TRUE(engine->RestoreCheckpoint(*seq).ok());
    EXPECT_EQ(*engine->SequenceLength(*seq), 21);
    EXPECT_EQ(engine->Stats().state_slots_used, 1);
    EXPECT_EQ(engine->Stats().kv_pages_used, 2);  // 21 positions in pages of 16
  }
  auto out = engine->Forward({{*seq, next, /*all_logits=*/true}});
  ASSERT_TRUE(out.ok());
  ASSERT_EQ(out->logits.size(), reference.size());
  EXPECT_EQ(0, std::memcmp(out->logits.data(), reference.data(), reference.size() * 4));
  // A checkpoint dropped keeps the steps after it.
  ASSERT_TRUE(engine->Checkpoint(*seq).ok());
  ASSERT_TRUE(engine->Forward({{*seq, {5}}}).ok());
  ASSERT_TRUE(engine->DropCheckpoint(*seq).ok());
  EXPECT_EQ(*engine->SequenceLength(*seq), 31);
  ASSERT_TRUE(engine->RemoveSequence(*seq).ok());
  EXPECT_EQ(engine->Stats().state_slots_used, 0);
  EXPECT_EQ(engine->Stats().kv_pages_used, 0);
}

TEST(Checkpoint, RestoreIsAsIfTheStepsNeverRan) { CheckRestoreIsExact(1); }
TEST(Checkpoint, RestoreIsAsIfTheStepsNeverRanOnTwoRanks) { CheckRestoreIsExact(2); }

TEST(Checkpoint, MisuseIsRefused) {
  testing::SyntheticEngine f("tiny");
  auto cached = f.Make();
  auto a = cached->AddSequence();
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(cached->Checkpoint(*a).code(), absl::StatusCode::kFailedPrecondition);
  auto engine = f.Make({}, kNoPrefixCaching);
  auto b = engine->AddSequence();
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(engine->RestoreCheckpoint(*b).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(engine->DropCheckpoint(*b).code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(engine->Checkpoint(*b).ok());
  EXPECT_EQ(engine->Checkpoint(*b).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(engine->Checkpoint(*b + 1).code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(engine->RemoveSequence(*b).ok());  // the checkpoint's slot goes with it
  EXPECT_EQ(engine->Stats().state_slots_used, 0);
}

// The target's greedy continuation of `prompt`, n tokens.
std::vector<int32_t> Greedy(SequenceRunner& e, std::vector<int32_t> tokens, int n) {
  auto seq = e.AddSequence();
  EXPECT_TRUE(seq.ok());
  std::vector<int32_t> input = tokens;
  for (int i = 0; i < n; ++i) {
    auto out = e.Forward({{*seq, input}});
    EXPECT_TRUE(out.ok());
    input = {static_cast<int32_t>(Argmax(out->RowLogits(0), out->vocab))};
    tokens.push_back(input[0]);
  }
  EXPECT_TRUE(e.RemoveSequence(*seq).ok());
  return tokens;
}

TEST(DraftModelDrafter, TheTargetAsDraftModelDraftsItsGreedyTokensWhateverWasAccepted) {
  testing::SyntheticEngine f("tiny");
  auto target = f.Make();
  const std::vector<int32_t> p1 = f.Tokens(30, 1), p2 = f.Tokens(700, 2);
  const std::vector<int32_t> g1 = Greedy(*target, p1, 40), g2 = Greedy(*target, p2, 40);
  auto drafter = DraftModelDrafter::Create(f.Make({}, kNoPrefixCaching), target->model(),
                                           target->max_context(), /*max_step_tokens=*/256);
  ASSERT_TRUE(drafter.ok()) << drafter.status();
  constexpr int64_t k = 4;
  size_t n1 = p1.size() + 1, n2 = p2.size() + 1;  // each with its first sampled token
  auto ask = [&](uint64_t key, const std::vector<int32_t>& g, size_t n, int64_t max_tokens) {
    return DraftRequest{
        .key = key, .tokens = absl::MakeConstSpan(g).first(n), .max_tokens = max_tokens};
  };
  // The long prompt catches up one chunk of 256 tokens per step, drafting nothing until then.
  for (int step = 0; step < 2; ++step) {
    const auto drafts = (*drafter)->Draft({ask(2, g2, n2, k)});
    EXPECT_TRUE(drafts[0].empty()) << step;
  }
  for (int step = 0; n1 + k < g1.size() && n2 + k < g2.size(); ++step) {
    const int64_t k2 = step % 3 + 1;
    const auto drafts = (*drafter)->Draft({ask(1, g1, n1, k), ask(2, g2, n2, k2)});
    ASSERT_EQ(drafts.size(), 2u);
    EXPECT_EQ(drafts[0], std::vector<int32_t>(g1.begin() + n1, g1.begin() + n1 + k)) << step;
    EXPECT_EQ(drafts[1], std::vector<int32_t>(g2.begin() + n2, g2.begin() + n2 + k2)) << step;
    // The target keeps some drafts (none, some, all) and adds its own token.
    n1 += static_cast<size_t>(step % (k + 1)) + 1;
    n2 += static_cast<size_t>(step % 2) + 1;
  }
  EXPECT_EQ((*drafter)->sequences(), 2);
  // Asked again for the same tokens (the drafts were dropped before verification), it undoes
  // them and drafts the same again, feeding only the drafts: no catch-up from scratch.
  const auto first = (*drafter)->Draft({ask(1, g1, n1, k)});
  const int64_t fed = (*drafter)->tokens_fed();
  EXPECT_EQ((*drafter)->Draft({ask(1, g1, n1, k)}), first);
  EXPECT_EQ((*drafter)->tokens_fed(), fed + k - 1);
  (*drafter)->Forget(1);
  (*drafter)->Forget(2);
  EXPECT_EQ((*drafter)->runner().Stats().state_slots_used, 0);
  EXPECT_EQ((*drafter)->runner().Stats().kv_pages_used, 0);
}

// Where the draft engine has no room (no page for a request's catch-up, no slot for its
// checkpoint), the request drafts less or nothing at that step, and its track stays usable.
TEST(DraftModelDrafter, NoRoomMeansFewerDraftsNotAFailure) {
  testing::SyntheticEngine f("tiny");
  auto target = f.Make();
  const std::vector<int32_t> g = Greedy(*target, f.Tokens(20, 5), 20);
  CacheOptions o = kNoPrefixCaching;
  o.kv_pages = 2;     // 32 positions
  o.state_slots = 1;  // no slot for a checkpoint
  auto drafter =
      DraftModelDrafter::Create(f.Make({}, o), target->model(), target->max_context(), 256);
  ASSERT_TRUE(drafter.ok()) << drafter.status();
  const auto span = absl::MakeConstSpan(g);
  auto one = (*drafter)->Draft({{.key = 1, .tokens = span.first(21), .max_tokens = 3}});
  EXPECT_EQ(one[0], std::vector<int32_t>(g.begin() + 21, g.begin() + 22));  // no checkpoint
  // A second request finds no slot at all, and the first one's catch-up past 32 positions no page.
  auto none = (*drafter)->Draft({{.key = 2, .tokens = span.first(21), .max_tokens = 3},
                                 {.key = 1, .tokens = span.first(32), .max_tokens = 1}});
  EXPECT_TRUE(none[0].empty());
  EXPECT_EQ(none[1], std::vector<int32_t>(g.begin() + 32, g.begin() + 33));
  none = (*drafter)->Draft({{.key = 1, .tokens = span.first(33), .max_tokens = 1}});
  EXPECT_TRUE(none[0].empty());
  EXPECT_EQ((*drafter)->sequences(), 1);
}

TEST(DraftModelDrafter, AnotherVocabularyIsRefusedByName) {
  testing::SyntheticEngine f("tiny");
  auto target = f.Make();
  // The same model with one token spelled differently.
  auto other = SyntheticModel::Create({.preset = "tiny", .seed = 8});
  ASSERT_TRUE(other.ok());
  auto tokens = target->model().gguf().GetStringArray("tokenizer.ggml.tokens");
  ASSERT_TRUE(tokens.ok());
  (*tokens)[300] += "x";
  (*other)->mutable_writer().SetKv("tokenizer.ggml.tokens", GgufValue::StringArray(*tokens));
  testing::TempDir dir;
  ASSERT_TRUE((*other)->WritePacked(dir.File("other.gguf")).ok());
  auto file = LoadModelFile(dir.File("other.gguf"));
  ASSERT_TRUE(file.ok()) << file.status();
  auto model = Model::Bind(std::move(*file));
  ASSERT_TRUE(model.ok());
  const absl::Status s = CheckSameVocabulary(target->model(), **model);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("tokenizer.ggml.tokens"), absl::string_view::npos) << s;
  EXPECT_NE(s.message().find("token 300 is"), absl::string_view::npos) << s;
  EXPECT_TRUE(CheckSameVocabulary(target->model(), target->model()).ok());
  // Another preset: another vocab_size.
  testing::SyntheticEngine small("small");
  auto drafter = DraftModelDrafter::Create(small.Make({}, kNoPrefixCaching), target->model(),
                                           target->max_context(), 256);
  ASSERT_FALSE(drafter.ok());
  EXPECT_NE(drafter.status().message().find("vocab_size"), absl::string_view::npos)
      << drafter.status();
  // A draft engine that caches prefixes cannot take checkpoints.
  EXPECT_FALSE(
      DraftModelDrafter::Create(f.Make(), target->model(), target->max_context(), 256).ok());
}

}  // namespace
}  // namespace walsh
