// A draft model's sequences follow their requests exactly: a checkpoint restored is as if the
// steps after it had never run (bit for bit), and a drafter whose draft model is the target
// itself drafts the target's own greedy tokens at every step, whatever the target accepted
// before. A draft model whose vocabulary differs is refused, naming the difference.
#include "worker/engine/draft_model_drafter.h"

#include <cstring>

#include "gtest/gtest.h"
#include "tests/util/synthetic_engine.h"

namespace walsh {
namespace {

EngineOptions NoPrefixCaching(int tp = 1) {
  EngineOptions o;
  o.prefix_caching = false;
  o.tp = tp;
  return o;
}

void CheckRestoreIsExact(int tp) {
  testing::SyntheticEngine f("tiny");
  auto engine = f.Make(NoPrefixCaching(tp));
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
  auto engine = f.Make(NoPrefixCaching());
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

int32_t Argmax(const float* row, int64_t vocab) {
  return static_cast<int32_t>(std::max_element(row, row + vocab) - row);
}

// The target's greedy continuation of `prompt`, n tokens.
std::vector<int32_t> Greedy(Engine& e, std::vector<int32_t> tokens, int n) {
  auto seq = e.AddSequence();
  EXPECT_TRUE(seq.ok());
  std::vector<int32_t> input = tokens;
  for (int i = 0; i < n; ++i) {
    auto out = e.Forward({{*seq, input}});
    EXPECT_TRUE(out.ok());
    input = {Argmax(out->RowLogits(0), out->vocab)};
    tokens.push_back(input[0]);
  }
  EXPECT_TRUE(e.RemoveSequence(*seq).ok());
  return tokens;
}

TEST(DraftModelDrafter, TheTargetAsDraftModelDraftsItsGreedyTokensWhateverWasAccepted) {
  testing::SyntheticEngine f("tiny");
  auto target = f.Make();
  const std::vector<int32_t> p1 = f.Tokens(30, 1), p2 = f.Tokens(700, 2);  // p2: chunked
  const std::vector<int32_t> g1 = Greedy(*target, p1, 40), g2 = Greedy(*target, p2, 40);
  auto drafter = DraftModelDrafter::Create(f.Make(NoPrefixCaching()), target->model(),
                                           target->max_context(), /*max_step_tokens=*/256);
  ASSERT_TRUE(drafter.ok()) << drafter.status();
  constexpr int64_t k = 4;
  size_t n1 = p1.size() + 1, n2 = p2.size() + 1;  // each with its first sampled token
  for (int step = 0; n1 + k < g1.size() && n2 + k < g2.size(); ++step) {
    const std::vector<DraftRequest> asks = {
        {.key = 1, .tokens = absl::MakeConstSpan(g1).first(n1), .max_tokens = k},
        {.key = 2, .tokens = absl::MakeConstSpan(g2).first(n2), .max_tokens = step % 3 + 1}};
    const auto drafts = (*drafter)->Draft(asks);
    ASSERT_EQ(drafts.size(), 2u);
    EXPECT_EQ(drafts[0], std::vector<int32_t>(g1.begin() + n1, g1.begin() + n1 + k)) << step;
    EXPECT_EQ(drafts[1], std::vector<int32_t>(g2.begin() + n2, g2.begin() + n2 + step % 3 + 1))
        << step;
    // The target keeps some drafts (none, some, all) and adds its own token.
    n1 += static_cast<size_t>(step % (k + 1)) + 1;
    n2 += static_cast<size_t>(step % 2) + 1;
  }
  EXPECT_EQ((*drafter)->sequences(), 2);
  (*drafter)->Forget(1);
  (*drafter)->Forget(2);
  EXPECT_EQ((*drafter)->engine().Stats().state_slots_used, 0);
  EXPECT_EQ((*drafter)->engine().Stats().kv_pages_used, 0);
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
  auto drafter = DraftModelDrafter::Create(small.Make(NoPrefixCaching()), target->model(),
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
