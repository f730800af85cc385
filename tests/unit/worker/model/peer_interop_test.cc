// fixtures/peer/model.gguf, written by PrismML's llama.cpp fork tooling, is read and accepted.
#include "gtest/gtest.h"
#include "tests/util/test_util.h"
#include "worker/model/ggml_types.h"
#include "worker/model/model_file.h"

namespace walsh {
namespace {

TEST(PeerInterop, PeerModelIsAccepted) {
  auto m = LoadModelFile(testing::TestDataPath("peer/model.gguf"));
  ASSERT_TRUE(m.ok()) << m.status();
  const Qwen35Config& c = m->config;
  EXPECT_EQ(c.embedding_length, 256);
  EXPECT_EQ(c.block_count, 4);
  EXPECT_EQ(c.feed_forward_length, 512);
  EXPECT_EQ(c.head_count, 2);
  EXPECT_EQ(c.head_count_kv, 1);
  EXPECT_EQ(c.key_length, 128);
  EXPECT_EQ(c.ssm_group_count, 1);
  EXPECT_EQ(c.ssm_time_step_rank, 2);
  EXPECT_EQ(c.vocab_size, 256);
  EXPECT_TRUE(c.IsFullAttention(3));
  EXPECT_FALSE(c.IsFullAttention(2));
  const PrismContract& p = m->contract;
  EXPECT_EQ(p.version, 1);
  EXPECT_EQ(p.block_size, 128);
  EXPECT_EQ(p.sign_widths, (std::vector<int64_t>{256, 512}));
  EXPECT_EQ(p.folded.size(), 26u);
  EXPECT_FALSE(p.gdn_v_grouped);
  EXPECT_EQ(p.inverse, std::vector<std::string>{"token_embd.weight"});
  ASSERT_NE(p.FindFolded("blk.0.ffn_down.weight"), nullptr);
  EXPECT_EQ(p.FindFolded("blk.0.ffn_down.weight")->width, 512);
  EXPECT_EQ(p.FindFolded("token_embd.weight"), nullptr);
  EXPECT_EQ(m->gguf->FindTensor("output.weight")->type, kGgmlPq2_0);
  EXPECT_EQ(m->gguf->alignment(), 32u);
}

}  // namespace
}  // namespace walsh
