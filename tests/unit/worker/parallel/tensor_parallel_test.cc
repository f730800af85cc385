// Tensor parallelism over CPU ranks: logits at TP = 2, 4, 8 bit-identical to TP = 1 (tiny,
// small and a shortened 27B-shape model, both formats; prefill, decode and mixed batches), the
// plan's head, KV and state split and balance, the communicator's collectives and timeouts, and
// a stalled rank failing the step, never hanging.
#include <cstring>
#include <thread>

#include "gtest/gtest.h"
#include "tests/util/test_util.h"
#include "tools/mkmodel/synthetic_model.h"
#include "worker/engine/solo_runner.h"
#include "worker/parallel/cpu_communicator.h"
#include "worker/parallel/shard_plan.h"

namespace walsh {
namespace {

// The engine, or null after a test failure naming why.
std::unique_ptr<SoloRunner> MakeEngine(const std::string& path, EngineOptions opts,
                                       EngineFaults faults = {}) {
  auto file = LoadModelFile(path);
  EXPECT_TRUE(file.ok()) << file.status();
  if (!file.ok()) return nullptr;
  auto bound = Model::Bind(std::move(*file));
  EXPECT_TRUE(bound.ok()) << bound.status();
  if (!bound.ok()) return nullptr;
  auto e = SoloRunner::Create(std::move(*bound), opts, {}, faults);
  EXPECT_TRUE(e.ok()) << e.status();
  return e.ok() ? std::move(*e) : nullptr;
}

// Prefill `prompt` (all positions), then 3 greedy decode steps; every logit row, in order.
std::vector<float> Run(SequenceRunner& e, const std::vector<int32_t>& prompt) {
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

// Three sequences stepping together in uneven chunks (prefill and decode mixed); every logit
// row of each, in order.
std::vector<std::vector<float>> RunMixed(SequenceRunner& e, const std::vector<int32_t>& prompt) {
  std::vector<SequenceId> seqs;
  for (int s = 0; s < 3; ++s) seqs.push_back(*e.AddSequence());
  std::vector<std::vector<float>> got(3);
  std::vector<size_t> fed(3, 0);
  const size_t chunk[3] = {1, 2, 5};
  for (bool more = true; more;) {
    more = false;
    std::vector<SequenceInput> batch;
    std::vector<int> who;
    for (int s = 0; s < 3; ++s) {
      if (fed[s] == prompt.size()) continue;
      const size_t n = std::min(prompt.size() - fed[s], chunk[s]);
      batch.push_back({seqs[s], {prompt.begin() + fed[s], prompt.begin() + fed[s] + n}, true});
      who.push_back(s);
      fed[s] += n;
      more = true;
    }
    if (!more) break;
    auto out = e.Forward(batch);
    EXPECT_TRUE(out.ok()) << out.status();
    if (!out.ok()) break;
    size_t row = 0;
    for (size_t i = 0; i < batch.size(); ++i) {
      for (size_t k = 0; k < batch[i].tokens.size(); ++k, ++row) {
        got[who[i]].insert(got[who[i]].end(), out->RowLogits(row),
                           out->RowLogits(row) + out->vocab);
      }
    }
  }
  for (SequenceId id : seqs) (void)e.RemoveSequence(id);
  return got;
}

void CheckBitIdentical(const std::string& path, const std::vector<int32_t>& prompt,
                       const std::string& what, KvCacheDtype kv = KvCacheDtype::kFp16) {
  auto one = MakeEngine(path, {.kv_cache_dtype = kv});
  ASSERT_NE(one, nullptr);
  const std::vector<float> reference = Run(*one, prompt);
  const std::vector<std::vector<float>> mixed_reference = RunMixed(*one, prompt);
  for (int tp : {2, 4, 8}) {
    auto engine = MakeEngine(path, {.kv_cache_dtype = kv, .tp = tp});
    ASSERT_NE(engine, nullptr);
    const std::vector<float> got = Run(*engine, prompt);
    ASSERT_EQ(got.size(), reference.size());
    EXPECT_EQ(0, std::memcmp(got.data(), reference.data(), got.size() * sizeof(float)))
        << what << " tp=" << tp;
    const std::vector<std::vector<float>> mixed = RunMixed(*engine, prompt);
    for (int s = 0; s < 3; ++s) {
      ASSERT_EQ(mixed[s].size(), mixed_reference[s].size());
      EXPECT_EQ(0, std::memcmp(mixed[s].data(), mixed_reference[s].data(), mixed[s].size() * 4))
          << what << " tp=" << tp << " mixed batch, sequence " << s;
    }
  }
}

void CheckBitIdentical(const SyntheticModelOptions& opts, const std::vector<int32_t>& prompt) {
  auto m = SyntheticModel::Create(opts);
  ASSERT_TRUE(m.ok()) << m.status();
  testing::TempDir dir;
  const std::string path = dir.File("m.gguf");
  ASSERT_TRUE((*m)->WritePacked(path).ok());
  CheckBitIdentical(path, prompt,
                    opts.preset + (opts.format == TernaryFormat::kPq2_0 ? " pq2_0" : " ptq1_0"));
}

TEST(TensorParallel, TinyBitIdentical) {
  CheckBitIdentical({.preset = "tiny"}, {5, 9, 200, 31, 7, 400});
  CheckBitIdentical({.preset = "tiny", .format = TernaryFormat::kPtq1_0}, {5, 9, 200, 31, 7, 400});
}
TEST(TensorParallel, PeerModelBitIdentical) {
  // Value heads not grouped by the contract: ssm_out's input is gathered and reordered.
  CheckBitIdentical(testing::TestDataPath("peer/model.gguf"), {1, 17, 200, 5, 42, 90, 3}, "peer");
}
TEST(TensorParallel, PeerModelBitIdenticalWithQuantizedKv) {
  // Each rank quantizes its own heads' rows, 32 values of one head at a time: as TP = 1 does.
  for (KvCacheDtype kv : {KvCacheDtype::kQ8, KvCacheDtype::kQ4}) {
    CheckBitIdentical(testing::TestDataPath("peer/model.gguf"), {1, 17, 200, 5, 42, 90, 3},
                      std::string("peer, KV ") + KvCacheDtypeName(kv), kv);
  }
}
TEST(TensorParallel, SmallBitIdentical) {
  CheckBitIdentical({.preset = "small", .format = TernaryFormat::kPtq1_0},
                    {5, 9, 200, 31, 7, 4000});
}
TEST(TensorParallel, Bonsai27bShapeBitIdentical) {
  // The real widths 5120 / 6144 / 17408 (17 FFN rotation blocks: uneven over 2, 4, 8 ranks).
  CheckBitIdentical({.preset = "27b", .signs = SignSource::kReal, .layers = 4}, {17, 248045, 9000});
  CheckBitIdentical({.preset = "27b", .format = TernaryFormat::kPtq1_0, .layers = 4}, {3, 100000});
}

void ExpectPartition(const std::vector<Span>& parts, int64_t total, const char* what) {
  int64_t covered = 0;
  for (const Span& s : parts) {
    EXPECT_EQ(s.begin, covered) << what;
    EXPECT_GE(s.end, s.begin) << what;
    covered = s.end;
  }
  EXPECT_EQ(covered, total) << what;
}

TEST(ShardPlan, SplitsHeadsKvAndStateAndStaysBalanced) {
  auto m = SyntheticModel::Create({.preset = "27b", .signs = SignSource::kReal, .layers = 4});
  testing::TempDir dir;
  ASSERT_TRUE((*m)->WritePacked(dir.File("m.gguf")).ok());
  auto file = LoadModelFile(dir.File("m.gguf"));
  ASSERT_TRUE(file.ok());
  const RankCost one = ShardPlan::Build(*file, 1)->Cost(0);
  for (int tp : {2, 4, 8}) {
    SCOPED_TRACE(tp);
    auto plan = ShardPlan::Build(*file, tp);
    ASSERT_TRUE(plan.ok()) << plan.status();
    std::vector<Span> q, values, ffn, vocab;
    int64_t most = 0, total = 0;
    for (int r = 0; r < tp; ++r) {
      q.push_back(plan->rank(r).q_heads);
      values.push_back(plan->rank(r).value_heads);
      ffn.push_back(plan->rank(r).ffn_blocks);
      vocab.push_back(plan->rank(r).vocab);
      const RankCost c = plan->Cost(r);
      // KV by heads (the 4 KV heads are shared by pairs of ranks at TP = 8, as vLLM does), the
      // GatedDeltaNet state by heads.
      EXPECT_LE(c.kv_bytes_per_token, one.kv_bytes_per_token / std::min(tp, 4));
      EXPECT_LE(c.state_bytes_per_sequence, one.state_bytes_per_sequence / tp);
      most = std::max(most, c.weight_bytes);
      total += c.weight_bytes;
    }
    ExpectPartition(q, 24, "query heads");
    ExpectPartition(values, 48, "value heads");
    ExpectPartition(ffn, 17, "FFN blocks");
    ExpectPartition(vocab, 248320, "vocabulary");
    const double imbalance = static_cast<double>(most) * tp / static_cast<double>(total);
    if (tp == 2) {
      EXPECT_LE(imbalance, 1.10);
    }
    if (tp == 4) {
      EXPECT_LE(imbalance, 1.20);
    }
    EXPECT_LE(plan->CollectivesPerLayer(), 3);
    if (tp == 2) {
      EXPECT_EQ(plan->CollectivesPerLayer(), 2);  // both mixer outputs in whole slices
    }
  }
  const auto three = ShardPlan::Build(*file, 3);
  EXPECT_EQ(three.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(three.status().message().find("1, 2, 4 or 8"), std::string::npos);
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
  auto e = MakeEngine(dir.File("m.gguf"),
                      {.tp = 2, .collective_timeout = std::chrono::milliseconds(300)},
                      {.stall_rank = 1});
  ASSERT_NE(e, nullptr);
  auto seq = e->AddSequence();
  const auto start = std::chrono::steady_clock::now();
  absl::Status failure = absl::OkStatus();
  for (int i = 0; i < 100 && failure.ok(); ++i) failure = e->Forward({{*seq, {1, 2, 3}}}).status();
  EXPECT_FALSE(failure.ok());
  EXPECT_EQ(failure.code(), absl::StatusCode::kDeadlineExceeded) << failure;
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(20));
  EXPECT_TRUE(e->engine().broken());
  EXPECT_FALSE(e->Forward({{*seq, {4}}}).ok());
}

}  // namespace
}  // namespace walsh
