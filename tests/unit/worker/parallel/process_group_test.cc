// Ranks that meet only over gloo's TCP transport on loopback, each on a thread of its own as it
// would be in a process of its own: the communicator's collectives give the in-process
// communicator's bits and fail naming the rank and the collective when a peer leaves or goes
// silent; and a leader engine with followers (rank_follower.h) that carry out its commands gives
// logits bit-identical to one rank through prefill, decode, mixed batches, prefix-cache restores
// and speculative rollbacks. The walsh-worker processes are driven in
// tests/integration/rank_group_test.cc.
#include <cstring>
#include <functional>
#include <future>
#include <memory>
#include <thread>
#include <vector>

#include "gloo/rendezvous/hash_store.h"
#include "gtest/gtest.h"
#include "tests/util/synthetic_engine.h"
#include "worker/engine/engine.h"
#include "worker/engine/rank_follower.h"
#include "worker/parallel/cpu_communicator.h"
#include "worker/parallel/gloo_communicator.h"

namespace walsh {
namespace {

using std::chrono::milliseconds;

// `ranks` communicators joined through one in-memory store, each connected on its own thread.
std::vector<std::unique_ptr<GlooCommunicator>> Join(gloo::rendezvous::HashStore& store, int ranks) {
  std::vector<std::future<absl::StatusOr<std::unique_ptr<GlooCommunicator>>>> joining;
  for (int r = 0; r < ranks; ++r) {
    joining.push_back(std::async(std::launch::async, [&store, r, ranks] {
      return GlooCommunicator::Connect(store, r, ranks, "127.0.0.1", milliseconds(20000));
    }));
  }
  std::vector<std::unique_ptr<GlooCommunicator>> comms;
  for (auto& j : joining) {
    auto c = j.get();
    EXPECT_TRUE(c.ok()) << c.status();
    comms.push_back(c.ok() ? *std::move(c) : nullptr);
  }
  return comms;
}

// Runs work(rank) on a thread per rank; every rank's status.
std::vector<absl::Status> OnEveryRank(int ranks, const std::function<absl::Status(int)>& work) {
  std::vector<std::future<absl::Status>> running;
  for (int r = 0; r < ranks; ++r) running.push_back(std::async(std::launch::async, work, r));
  std::vector<absl::Status> out;
  for (auto& f : running) out.push_back(f.get());
  return out;
}

TEST(GlooCommunicator, CollectivesGiveTheInProcessBits) {
  constexpr int kRanks = 4;
  gloo::rendezvous::HashStore store;
  auto gloo = Join(store, kRanks);
  ASSERT_EQ(gloo.size(), static_cast<size_t>(kRanks));
  for (const auto& c : gloo) ASSERT_NE(c, nullptr);
  CpuCommunicator local(kRanks);
  // Sums whose bits depend on the order they are added in.
  auto values = [](int r) {
    return std::vector<float>{1e8f * (r % 2 ? -1.0f : 1.0f), 0.1f * static_cast<float>(r + 1),
                              r == 3 ? -0.0f : 3.0f + static_cast<float>(r), 1e-7f};
  };
  std::vector<std::vector<float>> reduced_gloo(kRanks), reduced_local(kRanks);
  std::vector<std::vector<float>> gathered_gloo(kRanks), gathered_local(kRanks);
  std::vector<std::vector<char>> broadcast(kRanks);
  // Uneven parts, one of them empty, laid out rank after rank from offset 3.
  const std::vector<size_t> counts = {2, 0, 5, 1}, offsets = {3, 5, 5, 10};
  auto run = [&](Communicator& comm, int r, std::vector<float>& reduced,
                 std::vector<float>& gathered) -> absl::Status {
    reduced = values(r);
    if (absl::Status s = comm.AllReduceSum(r, reduced.data(), reduced.size(), milliseconds(20000));
        !s.ok()) {
      return s;
    }
    gathered.assign(12, -1.0f);
    for (size_t i = 0; i < counts[r]; ++i) gathered[offsets[r] + i] = 100.0f * r + i;
    return comm.AllGatherInPlace(r, gathered.data(), offsets, counts, milliseconds(20000));
  };
  auto gloo_status = OnEveryRank(kRanks, [&](int r) -> absl::Status {
    if (absl::Status s = run(*gloo[r], r, reduced_gloo[r], gathered_gloo[r]); !s.ok()) return s;
    broadcast[r].assign(5, static_cast<char>('a' + r));
    if (absl::Status s = gloo[r]->Broadcast(r, 2, broadcast[r].data(), 5, milliseconds(20000));
        !s.ok()) {
      return s;
    }
    return gloo[r]->Barrier(r, milliseconds(20000));
  });
  auto local_status = OnEveryRank(
      kRanks, [&](int r) { return run(local, r, reduced_local[r], gathered_local[r]); });
  for (int r = 0; r < kRanks; ++r) {
    ASSERT_TRUE(gloo_status[r].ok()) << gloo_status[r];
    ASSERT_TRUE(local_status[r].ok()) << local_status[r];
    EXPECT_EQ(0, std::memcmp(reduced_gloo[r].data(), reduced_local[r].data(), 4 * sizeof(float)))
        << "rank " << r;
    EXPECT_EQ(0, std::memcmp(gathered_gloo[r].data(), gathered_local[r].data(), 12 * sizeof(float)))
        << "rank " << r;
    EXPECT_EQ(std::string(broadcast[r].begin(), broadcast[r].end()), "ccccc");
  }
  EXPECT_EQ(gathered_gloo[1][3], 0.0f);
  EXPECT_EQ(gathered_gloo[0][10], 300.0f);
  EXPECT_EQ(gathered_gloo[0][0], -1.0f);  // outside the parts: untouched
}

TEST(GlooCommunicator, APeerThatLeavesBreaksTheGroupNamingTheCollective) {
  gloo::rendezvous::HashStore store;
  auto comms = Join(store, 2);
  ASSERT_NE(comms[0], nullptr);
  ASSERT_NE(comms[1], nullptr);
  comms[1].reset();  // its sockets close, as a process's do when it dies
  std::vector<float> buffer(8, 1.0f);
  const absl::Status s =
      comms[0]->AllGatherInPlace(0, buffer.data(), {0, 4}, {4, 4}, milliseconds(5000));
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_NE(s.message().find("rank 0 of 2: all-gather failed"), std::string::npos) << s;
  EXPECT_TRUE(comms[0]->broken());
  const absl::Status later = comms[0]->Barrier(0, milliseconds(5000));
  EXPECT_NE(later.message().find("broken by an earlier failure"), std::string::npos) << later;
}

TEST(GlooCommunicator, ASilentPeerTimesOut) {
  gloo::rendezvous::HashStore store;
  auto comms = Join(store, 2);
  ASSERT_NE(comms[0], nullptr);
  const auto start = std::chrono::steady_clock::now();
  const absl::Status s = comms[0]->Barrier(0, milliseconds(300));  // rank 1 never comes
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_NE(s.message().find("barrier failed"), std::string::npos) << s;
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(20));
  EXPECT_TRUE(comms[0]->broken());
}

TEST(GlooCommunicator, RefusesAPlaceOutsideTheGroup) {
  gloo::rendezvous::HashStore store;
  EXPECT_EQ(GlooCommunicator::Connect(store, 2, 2, "127.0.0.1", milliseconds(100)).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// A leader engine and its followers, each rank on its own thread over loopback TCP.
class LoopbackGroup {
 public:
  LoopbackGroup(testing::SyntheticEngine& model, EngineOptions options,
                const CacheOptions& caches) {
    options.tp = options.tp < 2 ? 2 : options.tp;
    auto comms = Join(store_, options.tp);
    for (int r = 1; r < options.tp; ++r) {
      auto follower =
          RankFollower::Create(model.Load(), options, {.rank = r, .comm = std::move(comms[r])});
      EXPECT_TRUE(follower.ok()) << follower.status();
      if (!follower.ok()) return;
      serving_.push_back(
          std::async(std::launch::async, [f = *std::move(follower)] { return f->Serve(); }));
    }
    auto engine = SoloRunner::Create(model.Load(), options, caches, {},
                                     {.rank = 0, .comm = std::move(comms[0])});
    EXPECT_TRUE(engine.ok()) << engine.status();
    if (engine.ok()) leader_ = *std::move(engine);
  }
  SoloRunner* leader() { return leader_.get(); }
  // Closes the group: the leader tells its followers to stop; how each follower's Serve ended.
  std::vector<absl::Status> Close() {
    leader_.reset();
    std::vector<absl::Status> out;
    for (auto& f : serving_) out.push_back(f.get());
    serving_.clear();
    return out;
  }
  ~LoopbackGroup() { Close(); }

 private:
  gloo::rendezvous::HashStore store_;
  std::unique_ptr<SoloRunner> leader_;
  std::vector<std::future<absl::Status>> serving_;
};

int32_t Argmax(const float* row, int64_t vocab) {
  return static_cast<int32_t>(std::max_element(row, row + vocab) - row);
}

// One script of everything that reaches a rank's backend; every logit row it read, in order.
std::vector<float> Script(SequenceRunner& e, testing::SyntheticEngine& m) {
  std::vector<float> all;
  auto take = [&](const absl::StatusOr<ForwardResult>& out) {
    EXPECT_TRUE(out.ok()) << out.status();
    if (out.ok()) all.insert(all.end(), out->logits.begin(), out->logits.end());
    return out.ok() ? Argmax(out->RowLogits(out->rows.size() - 1), out->vocab) : 0;
  };
  const std::vector<int32_t> prompt = m.Tokens(40, 3);
  // Prefill in two chunks, then greedy decode; a snapshot at the end for the prefix cache.
  auto a = e.AddSequence();
  EXPECT_TRUE(a.ok());
  take(e.Forward({{*a, {prompt.begin(), prompt.begin() + 17}, true}}));
  int32_t next = take(e.Forward({{*a, {prompt.begin() + 17, prompt.end()}, true}}));
  std::vector<int32_t> history = prompt;
  for (int i = 0; i < 4; ++i) {
    history.push_back(next);
    next = take(e.Forward({{*a, {next}}}));
  }
  EXPECT_TRUE(e.Snapshot(*a).ok());
  // A second sequence restored from the cache, stepping beside a third fed in uneven chunks.
  std::vector<int32_t> longer = history;
  longer.push_back(next);
  longer.push_back(5);
  PrefixLookup lookup;
  auto b = e.AddSequence(longer, &lookup);
  EXPECT_TRUE(b.ok());
  const int64_t restored = *e.SequenceLength(*b);
  EXPECT_GT(restored, 0);  // the leader's copy commands reached every rank
  auto c = e.AddSequence();
  const std::vector<int32_t> other = m.Tokens(9, 4);
  take(e.Forward({{*b, {longer.begin() + restored, longer.end()}, true}, {*c, {other[0]}}}));
  take(e.Forward({{*c, {other.begin() + 1, other.end()}, true}}));
  // A speculative step that keeps two of its four tokens.
  const int64_t at = *e.SequenceLength(*a);
  take(e.Forward({{*a, {next, 1, 2, 3}, true, /*keep_states=*/true}}));
  EXPECT_TRUE(e.Rollback(*a, at + 2).ok());
  take(e.Forward({{*a, {7}, true}}));
  EXPECT_TRUE(e.RemoveSequence(*c).ok());
  for (SequenceId id : {*a, *b}) EXPECT_TRUE(e.RemoveSequence(id).ok());
  return all;
}

// Without prefix caching: a checkpoint, steps after it undone, then the same steps again.
std::vector<float> CheckpointScript(SequenceRunner& e, testing::SyntheticEngine& m) {
  std::vector<float> all;
  auto take = [&](const absl::StatusOr<ForwardResult>& out) {
    EXPECT_TRUE(out.ok()) << out.status();
    if (out.ok()) all.insert(all.end(), out->logits.begin(), out->logits.end());
  };
  const std::vector<int32_t> prompt = m.Tokens(19, 6);
  auto a = e.AddSequence();
  EXPECT_TRUE(a.ok());
  take(e.Forward({{*a, prompt, true}}));
  EXPECT_TRUE(e.Checkpoint(*a).ok());
  take(e.Forward({{*a, {3, 4}, true}}));
  EXPECT_TRUE(e.RestoreCheckpoint(*a).ok());
  take(e.Forward({{*a, {3, 4}, true}}));
  EXPECT_TRUE(e.Checkpoint(*a).ok());
  take(e.Forward({{*a, {5}}}));
  EXPECT_TRUE(e.DropCheckpoint(*a).ok());
  EXPECT_TRUE(e.RemoveSequence(*a).ok());
  return all;
}

void CheckBitIdentical(int ranks) {
  testing::SyntheticEngine model("tiny");
  const CacheOptions caches{.page_size = 8};
  auto one = model.Make({}, caches);
  const std::vector<float> want = Script(*one, model);
  LoopbackGroup group(model, {.tp = ranks}, caches);
  ASSERT_NE(group.leader(), nullptr);
  const std::vector<float> got = Script(*group.leader(), model);
  ASSERT_EQ(got.size(), want.size());
  EXPECT_EQ(0, std::memcmp(got.data(), want.data(), want.size() * sizeof(float)));
  EXPECT_FALSE(group.leader()->engine().broken());
  for (const absl::Status& s : group.Close()) EXPECT_TRUE(s.ok()) << s;

  const CacheOptions uncached{.page_size = 8, .prefix_caching = false};
  auto plain = model.Make({}, uncached);
  const std::vector<float> want_restored = CheckpointScript(*plain, model);
  LoopbackGroup checkpoints(model, {.tp = ranks}, uncached);
  ASSERT_NE(checkpoints.leader(), nullptr);
  const std::vector<float> restored = CheckpointScript(*checkpoints.leader(), model);
  ASSERT_EQ(restored.size(), want_restored.size());
  EXPECT_EQ(0, std::memcmp(restored.data(), want_restored.data(), restored.size() * 4));
}

TEST(ProcessGroup, TwoRanksGiveTheBitsOfOne) { CheckBitIdentical(2); }
TEST(ProcessGroup, FourRanksGiveTheBitsOfOne) { CheckBitIdentical(4); }

TEST(ProcessGroup, ALeaderWhoseFollowerLeftFailsNamingTheBroadcast) {
  testing::SyntheticEngine model("tiny");
  gloo::rendezvous::HashStore store;
  auto comms = Join(store, 2);
  ASSERT_NE(comms[1], nullptr);
  comms[1].reset();
  auto engine =
      SoloRunner::Create(model.Load(), {.tp = 2}, {}, {}, {.rank = 0, .comm = std::move(comms[0])});
  ASSERT_FALSE(engine.ok());
  EXPECT_EQ(engine.status().code(), absl::StatusCode::kUnavailable) << engine.status();
  EXPECT_NE(engine.status().message().find("broadcast failed"), std::string::npos)
      << engine.status();
}

TEST(ProcessGroup, PlacesThatDoNotFitAreRefused) {
  testing::SyntheticEngine model("tiny");
  gloo::rendezvous::HashStore store;
  auto comms = Join(store, 2);
  auto follower =
      SoloRunner::Create(model.Load(), {.tp = 2}, {}, {}, {.rank = 1, .comm = std::move(comms[1])});
  EXPECT_NE(follower.status().message().find("follows its group's leader"), std::string::npos)
      << follower.status();
  auto wrong_tp =
      SoloRunner::Create(model.Load(), {.tp = 4}, {}, {}, {.rank = 0, .comm = std::move(comms[0])});
  EXPECT_NE(wrong_tp.status().message().find("cannot serve --tp 4"), std::string::npos)
      << wrong_tp.status();
}

}  // namespace
}  // namespace walsh
