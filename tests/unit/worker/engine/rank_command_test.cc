// The leader's commands to its followers (rank_command.h): every field of every kind survives
// the round trip, and damaged bytes (cut anywhere, a byte flipped, a wrong magic or kind, lengths
// that disagree) are a DATA_LOSS error, never a read past the end or a plan the graph would
// index out of range.
#include "worker/engine/rank_command.h"

#include <cstring>
#include <memory>
#include <vector>

#include "gtest/gtest.h"

namespace walsh {
namespace {

RankCommand Step() {
  RankCommand c{.kind = RankCommand::Kind::kStep};
  StepPlan& p = c.plan;
  p.tokens = {5, -3, 7, 9};
  p.seq_of_token = {0, 0, 1, 1};
  p.pos_of_token = {10, 11, 0, 1};
  p.seq_slots = {2, 4};
  p.seq_pages = {{0, 3}, {7}};
  p.logit_tokens = {1, 3};
  p.plane_of_token = {-1, 6, -1, -1};
  p.rope_of_token = {10, 10, 10, 11, 12, 13, 0, 0, 0, 1, 1, 1};
  p.embedding_of_token = {-1, 0, -1, -1};
  p.embedding_rows = std::make_shared<std::vector<float>>(std::vector<float>{0.5f, -0.0f, 1e30f});
  return c;
}

TEST(RankCommand, EveryKindRoundTrips) {
  const RankCommand step = Step();
  auto got = DecodeRankCommand(EncodeRankCommand(step));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->kind, RankCommand::Kind::kStep);
  EXPECT_EQ(got->plan.tokens, step.plan.tokens);
  EXPECT_EQ(got->plan.seq_of_token, step.plan.seq_of_token);
  EXPECT_EQ(got->plan.pos_of_token, step.plan.pos_of_token);
  EXPECT_EQ(got->plan.seq_slots, step.plan.seq_slots);
  EXPECT_EQ(got->plan.seq_pages, step.plan.seq_pages);
  EXPECT_EQ(got->plan.logit_tokens, step.plan.logit_tokens);
  EXPECT_EQ(got->plan.plane_of_token, step.plan.plane_of_token);
  EXPECT_EQ(got->plan.rope_of_token, step.plan.rope_of_token);
  EXPECT_EQ(got->plan.embedding_of_token, step.plan.embedding_of_token);
  ASSERT_NE(got->plan.embedding_rows, nullptr);
  EXPECT_EQ(0, std::memcmp(got->plan.embedding_rows->data(), step.plan.embedding_rows->data(),
                           3 * sizeof(float)));  // -0.0f keeps its sign

  RankCommand text = Step();
  text.plan.rope_of_token.clear();
  text.plan.embedding_of_token.clear();
  text.plan.plane_of_token.clear();
  text.plan.embedding_rows = nullptr;
  got = DecodeRankCommand(EncodeRankCommand(text));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->plan.embedding_rows, nullptr);
  EXPECT_TRUE(got->plan.rope_of_token.empty());

  const RankCommand alloc{.kind = RankCommand::Kind::kAllocateCaches,
                          .pages = 12,
                          .page_size = 16,
                          .slots = 5,
                          .kv_dtype = KvCacheDtype::kQ4};
  got = DecodeRankCommand(EncodeRankCommand(alloc));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->kind, RankCommand::Kind::kAllocateCaches);
  EXPECT_EQ(got->pages, 12);
  EXPECT_EQ(got->page_size, 16);
  EXPECT_EQ(got->slots, 5);
  EXPECT_EQ(got->kv_dtype, KvCacheDtype::kQ4);

  const RankCommand copy{.kind = RankCommand::Kind::kCopy,
                         .copy = {.from_slot = 1, .to_slot = 2, .from_page = 3, .to_page = 4}};
  got = DecodeRankCommand(EncodeRankCommand(copy));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->copy.from_slot, 1);
  EXPECT_EQ(got->copy.to_slot, 2);
  EXPECT_EQ(got->copy.from_page, 3);
  EXPECT_EQ(got->copy.to_page, 4);

  got = DecodeRankCommand(EncodeRankCommand({.kind = RankCommand::Kind::kStop}));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->kind, RankCommand::Kind::kStop);
}

TEST(RankCommand, EveryCutIsDataLoss) {
  const std::string bytes = EncodeRankCommand(Step());
  for (size_t n = 0; n < bytes.size(); ++n) {
    auto got = DecodeRankCommand(bytes.substr(0, n));
    ASSERT_FALSE(got.ok()) << "cut at " << n;
    EXPECT_EQ(got.status().code(), absl::StatusCode::kDataLoss) << got.status();
  }
  auto longer = DecodeRankCommand(bytes + "x");
  EXPECT_EQ(longer.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(longer.status().message().find("left over"), std::string::npos);
}

TEST(RankCommand, DamageIsRefusedNamingWhat) {
  std::string bytes = EncodeRankCommand(Step());
  std::string magic = bytes;
  magic[0] ^= 1;
  EXPECT_NE(DecodeRankCommand(magic).status().message().find("not a walsh rank command"),
            std::string::npos);
  std::string kind = bytes;
  kind[4] = 9;
  EXPECT_NE(DecodeRankCommand(kind).status().message().find("unknown kind"), std::string::npos);

  RankCommand bad = Step();
  bad.plan.seq_of_token[2] = 2;  // a third sequence that has no slot
  EXPECT_NE(DecodeRankCommand(EncodeRankCommand(bad)).status().message().find("sequence 2 of 2"),
            std::string::npos);
  bad = Step();
  bad.plan.logit_tokens = {4};
  EXPECT_NE(DecodeRankCommand(EncodeRankCommand(bad)).status().message().find("logits of token"),
            std::string::npos);
  bad = Step();
  bad.plan.pos_of_token.pop_back();
  EXPECT_EQ(DecodeRankCommand(EncodeRankCommand(bad)).status().code(), absl::StatusCode::kDataLoss);
  bad = Step();
  bad.plan.seq_pages.pop_back();
  EXPECT_NE(DecodeRankCommand(EncodeRankCommand(bad)).status().message().find("page tables"),
            std::string::npos);
  RankCommand alloc{.kind = RankCommand::Kind::kAllocateCaches, .pages = 1, .page_size = 0};
  EXPECT_NE(DecodeRankCommand(EncodeRankCommand(alloc)).status().message().find("out of range"),
            std::string::npos);

  // Every single flipped byte decodes or is refused; none crashes (run under the sanitizers).
  for (size_t i = 0; i < bytes.size(); ++i) {
    for (int bit : {0, 7}) {
      std::string flipped = bytes;
      flipped[i] = static_cast<char>(flipped[i] ^ (1 << bit));
      (void)DecodeRankCommand(flipped);
    }
  }
}

}  // namespace
}  // namespace walsh
