// Tensor parallelism over CPU ranks: logits at TP = 2, 4, 8 bit-identical to TP = 1 (tiny,
// small and a shortened 27B-shape model; prefill and decode; uneven FFN shards), the
// communicator's collectives and timeouts, and a stalled rank failing the step, never hanging.
#include <cstring>
#include <thread>

#include "gtest/gtest.h"
#include "tests/util/test_util.h"
#include "tools/mkmodel/synthetic_model.h"
#include "worker/engine/engine.h"
#include "worker/parallel/cpu_communicator.h"
#include "worker/parallel/shard_plan.h"

namespace walsh {
namespace {

std::unique_ptr<Engine> MakeEngine(const std::string& path, EngineOptions opts) {
  auto file = LoadModelFile(path);
  EXPECT_TRUE(file.ok()) << file.status();
  auto bound = Model::Bind(std::move(*file));
  EXPECT_TRUE(bound.ok());
  auto e = Engine::Create(std::move(*bound), opts);
  EXPECT_TRUE(e.ok()) << e.status();
  return std::move(*e);
}

// Prefill `prompt` (all positions), then 3 greedy decode steps; every logit row, in order.
std::vector<float> Run(Engine& e, const std::vector<int32_t>& prompt) {
  auto seq = e.AddSequence();
  std::vector<float> all;
  auto out = e.Forward({{*seq, prompt, true}});
  EXPECT_TRUE(out.ok()) << out.status();
  all = out->logits;
  int32_t next =
      static_cast<int32_t>(std::max_element(out->RowLogits(prompt.size() - 1),
                                            out->RowLogits(prompt.size() - 1) + out->vocab) -
                           out->RowLogits(prompt.size() - 1));
  for (int i = 0; i < 3; ++i) {
    auto step = e.Forward({{*seq, {next}}});
    EXPECT_TRUE(step.ok()) << step.status();
    all.insert(all.end(), step->logits.begin(), step->logits.end());
    next = static_cast<int32_t>(std::max_element(step->logits.begin(), step->logits.end()) -
                                step->logits.begin());
  }
  (void)e.RemoveSequence(*seq);
  return all;
}

void CheckBitIdentical(const SyntheticModelOptions& opts, const std::vector<int32_t>& prompt) {
  auto m = SyntheticModel::Create(opts);
  ASSERT_TRUE(m.ok()) << m.status();
  testing::TempDir dir;
  const std::string path = dir.File("m.gguf");
  ASSERT_TRUE((*m)->WritePacked(path).ok());
  const std::vector<float> reference = Run(*MakeEngine(path, {}), prompt);
  for (int tp : {2, 4, 8}) {
    const std::vector<float> got = Run(*MakeEngine(path, {.tp = tp}), prompt);
    ASSERT_EQ(got.size(), reference.size());
    EXPECT_EQ(0, std::memcmp(got.data(), reference.data(), got.size() * sizeof(float)))
        << opts.preset << " tp=" << tp;
  }
}

TEST(TensorParallel, TinyBitIdentical) {
  CheckBitIdentical({.preset = "tiny"}, {5, 9, 200, 31, 7, 400});
}
TEST(TensorParallel, SmallBitIdentical) {
  CheckBitIdentical({.preset = "small", .format = WeightFormat::kPtq1_0}, {5, 9, 200, 31, 7, 4000});
}
TEST(TensorParallel, Bonsai27bShapeBitIdentical) {
  // The real widths 5120 / 6144 / 17408 (17 FFN rotation blocks: uneven over 2, 4, 8 ranks).
  CheckBitIdentical({.preset = "27b", .signs = SignSource::kReal, .layers = 4}, {17, 248045, 9000});
}

TEST(ShardPlan, SplitsOnWholeUnitsAndCoversEveryRow) {
  auto m = SyntheticModel::Create({.preset = "27b", .signs = SignSource::kReal, .layers = 4});
  testing::TempDir dir;
  ASSERT_TRUE((*m)->WritePacked(dir.File("m.gguf")).ok());
  auto file = LoadModelFile(dir.File("m.gguf"));
  ASSERT_TRUE(file.ok());
  for (int tp : {1, 2, 4, 8}) {
    const ShardPlan plan = ShardPlan::Build(*file, tp);
    for (const auto& [name, w] : plan.weights()) {
      int64_t covered = 0;
      for (int r = 0; r < tp; ++r) {
        EXPECT_EQ(w.ranks[r].begin, covered) << name;
        EXPECT_EQ(w.ranks[r].begin % w.unit, 0) << name;
        covered = w.ranks[r].end;
      }
      EXPECT_EQ(covered, w.rows) << name;
    }
    const WeightShards* up = plan.Find("blk.0.ffn_up.weight");
    ASSERT_NE(up, nullptr);
    EXPECT_EQ(up->unit, 1024);  // whole rotation blocks of the FFN width
    const WeightShards* q = plan.Find("blk.3.attn_q.weight");
    EXPECT_EQ(q->unit, 512);  // a query head with its gate
  }
  const ShardPlan four = ShardPlan::Build(*file, 4);
  EXPECT_EQ(four.Find("blk.0.ffn_up.weight")->ranks[0].size(), 4 * 1024);  // 17 blocks: 4,4,4,5
  EXPECT_EQ(four.Find("blk.0.ffn_up.weight")->ranks[3].size(), 5 * 1024);
}

TEST(CpuCommunicator, CollectivesAndTimeouts) {
  CpuCommunicator comm(3);
  std::vector<std::vector<float>> bufs = {{1, 2}, {10, 20}, {100, 200}};
  std::vector<std::thread> threads;
  std::vector<absl::Status> status(3);
  for (int r = 0; r < 3; ++r) {
    threads.emplace_back([&, r] {
      status[r] = comm.AllReduceSum(r, bufs[r].data(), 2, std::chrono::seconds(5));
      int32_t value = r == 1 ? 42 : 0;
      if (status[r].ok())
        status[r] = comm.Broadcast(r, 1, &value, sizeof value, std::chrono::seconds(5));
      if (status[r].ok() && value != 42) status[r] = absl::InternalError("broadcast");
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < 3; ++r) {
    ASSERT_TRUE(status[r].ok()) << status[r];
    EXPECT_EQ(bufs[r], (std::vector<float>{111, 222}));
  }
  // Rank 2 never comes: the others fail within the timeout, and the group stays broken.
  const auto start = std::chrono::steady_clock::now();
  std::thread a([&] { status[0] = comm.Barrier(0, std::chrono::milliseconds(200)); });
  std::thread b([&] { status[1] = comm.Barrier(1, std::chrono::milliseconds(200)); });
  a.join();
  b.join();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
  EXPECT_FALSE(status[0].ok() && status[1].ok());
  EXPECT_TRUE(comm.broken());
  EXPECT_FALSE(comm.Barrier(2, std::chrono::seconds(5)).ok());  // fails at once, no hang
}

TEST(TensorParallel, AStalledRankFailsTheStepWithinTheTimeout) {
  auto m = SyntheticModel::Create({.preset = "tiny"});
  testing::TempDir dir;
  ASSERT_TRUE((*m)->WritePacked(dir.File("m.gguf")).ok());
  auto e = MakeEngine(
      dir.File("m.gguf"),
      {.tp = 2, .collective_timeout = std::chrono::milliseconds(300), .debug_stall_rank = 1});
  auto seq = e->AddSequence();
  const auto start = std::chrono::steady_clock::now();
  absl::Status failure = absl::OkStatus();
  for (int i = 0; i < 100 && failure.ok(); ++i) failure = e->Forward({{*seq, {1, 2, 3}}}).status();
  EXPECT_FALSE(failure.ok());
  EXPECT_EQ(failure.code(), absl::StatusCode::kDeadlineExceeded) << failure;
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(20));
  EXPECT_TRUE(e->broken());
  EXPECT_FALSE(e->Forward({{*seq, {4}}}).ok());
}

}  // namespace
}  // namespace walsh
