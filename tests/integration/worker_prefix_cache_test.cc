// Prefix caching as clients see it: a worker with the cache on answers every request with the
// tokens and log-probabilities, bit for bit, of a worker with it off (--no-prefix-caching),
// whether the request hit, missed, shared its pages with concurrent ones, lost its cache to KV
// pressure, was cancelled, or was resumed; and when all is done no page is left in use and the
// gauges say what GetLoad says.
#include <cstring>
#include <random>
#include <thread>

#include "gtest/gtest.h"
#include "tests/integration/gateway_fixture.h"
#include "tests/integration/worker_fixture.h"

namespace walsh {
namespace {

using testing::MetricIn;
using testing::WorkerProcess;

struct Outcome {
  grpc::Status status;
  std::vector<int32_t> ids;
  std::vector<float> logprobs;  // each token's, then its top-5, token after token
  std::string finish;
};

v1::GenerateRequest Request(const std::vector<int32_t>& prompt, uint32_t max_tokens,
                            float temperature, uint64_t seed) {
  v1::GenerateRequest r;
  for (int32_t id : prompt) r.mutable_tokens()->add_ids(id);
  r.mutable_stopping()->set_max_tokens(max_tokens);
  r.mutable_stopping()->set_ignore_eos(true);
  r.mutable_sampling()->set_temperature(temperature);
  r.mutable_sampling()->set_seed(seed);
  r.set_logprobs(5);
  return r;
}

Outcome Read(grpc::ClientReaderInterface<v1::GenerateResponse>& reader, int cancel_after = -1,
             grpc::ClientContext* ctx = nullptr) {
  Outcome run;
  v1::GenerateResponse resp;
  while (reader.Read(&resp)) {
    if (resp.has_tokens()) {
      for (const v1::Token& t : resp.tokens().tokens()) {
        run.ids.push_back(t.id());
        run.logprobs.push_back(t.logprob());
        for (const auto& top : t.top_logprobs()) run.logprobs.push_back(top.logprob());
      }
      if (cancel_after >= 0 && static_cast<int>(run.ids.size()) >= cancel_after) {
        ctx->TryCancel();
      }
    }
    if (resp.has_finished()) run.finish = resp.finished().reason();
  }
  run.status = reader.Finish();
  return run;
}

Outcome Generate(v1::Generator::Stub& stub, const v1::GenerateRequest& r, int cancel_after = -1) {
  grpc::ClientContext ctx;
  auto reader = stub.Generate(&ctx, r);
  return Read(*reader, cancel_after, &ctx);
}

void ExpectSame(const Outcome& cold, const Outcome& warm, const std::string& what) {
  ASSERT_TRUE(cold.status.ok()) << what << ": " << cold.status.error_message();
  ASSERT_TRUE(warm.status.ok()) << what << ": " << warm.status.error_message();
  EXPECT_EQ(cold.ids, warm.ids) << what;
  ASSERT_EQ(cold.logprobs.size(), warm.logprobs.size()) << what;
  EXPECT_EQ(0, std::memcmp(cold.logprobs.data(), warm.logprobs.data(), cold.logprobs.size() * 4))
      << what << ": log-probabilities differ";
}

std::vector<int32_t> Tokens(int n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::vector<int32_t> ids(n);
  for (int32_t& t : ids) t = static_cast<int32_t>(gen() % 600);  // regular tokens of tiny
  return ids;
}

std::vector<int32_t> Concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

double WorkerMetric(const WorkerProcess& w, const std::string& series) {
  return MetricIn(testing::HttpGet(w.metrics_port(), "/metrics"), series).value_or(-1);
}

// After everything ended: no page or slot in use, and the gauges agree with GetLoad.
void ExpectAllGivenBack(WorkerProcess& w) {
  const v1::Load load = testing::WaitForIdle(*w.Worker());
  EXPECT_EQ(load.kv_pages_used(), 0u);
  EXPECT_EQ(load.state_slots_used(), 0u);
  EXPECT_EQ(WorkerMetric(w, "walsh_worker_kv_pages_used"), 0);
  EXPECT_EQ(WorkerMetric(w, "walsh_worker_state_slots_used"), 0);
}

class PrefixCacheWorkers : public ::testing::Test {
 protected:
  PrefixCacheWorkers()
      : on_({"--prefix-cache-min-tokens", "32", "--max-batch-tokens", "48"}),
        off_({"--no-prefix-caching", "--max-batch-tokens", "48"}) {}
  Outcome Cold(const v1::GenerateRequest& r) { return Generate(*off_.Generator(), r); }
  Outcome Warm(const v1::GenerateRequest& r) { return Generate(*on_.Generator(), r); }
  double Hits() { return WorkerMetric(on_, "vllm:prefix_cache_hits_total"); }

  WorkerProcess on_, off_;
};

TEST_F(PrefixCacheWorkers, TheSamePromptTwiceHitsAndIsExact) {
  ASSERT_TRUE(on_.ok() && off_.ok());
  const v1::GenerateRequest r = Request(Tokens(150, 1), 24, 0.0f, 0);
  const Outcome cold = Cold(r);
  ExpectSame(cold, Warm(r), "first (a miss)");
  EXPECT_EQ(Hits(), 0);
  ExpectSame(cold, Warm(r), "second (a hit)");
  EXPECT_EQ(Hits(), 149);
  EXPECT_EQ(WorkerMetric(on_, "vllm:prefix_cache_queries_total"), 300);
  EXPECT_EQ(WorkerMetric(on_, "walsh_worker_prefix_cache_lookups_total{outcome=\"hit\"}"), 1);
  // Sampled with a seed: also exact.
  const v1::GenerateRequest sampled = Request(Tokens(150, 1), 24, 0.9f, 77);
  ExpectSame(Cold(sampled), Warm(sampled), "sampled");
  ExpectAllGivenBack(on_);
  // The off worker never looks anything up.
  EXPECT_EQ(WorkerMetric(off_, "vllm:prefix_cache_queries_total"), 0);
}

TEST_F(PrefixCacheWorkers, ASharedDocumentWithDifferentQuestions) {
  ASSERT_TRUE(on_.ok() && off_.ok());
  const std::vector<int32_t> doc = Tokens(200, 2);
  for (uint32_t q = 0; q < 4; ++q) {
    const v1::GenerateRequest r = Request(Concat(doc, Tokens(10 + q, 50 + q)), 16, 0.0f, 0);
    ExpectSame(Cold(r), Warm(r), "question " + std::to_string(q));
  }
  // The second question finds the document's pages and snapshots where they end (192 tokens,
  // whole pages); the third and fourth start there.
  EXPECT_EQ(WorkerMetric(on_, "walsh_worker_prefix_cache_lookups_total{outcome=\"no_snapshot\"}"),
            1);
  EXPECT_EQ(WorkerMetric(on_, "walsh_worker_prefix_cache_snapshots_total{at=\"branch\"}"), 1);
  EXPECT_EQ(Hits(), 2 * 192);
  ExpectAllGivenBack(on_);
}

// With interval snapshots the first question already snapshots the document every 64 tokens,
// so the second question hits at the last boundary before it branches (192), bit for bit.
TEST(PrefixCacheWorker, IntervalSnapshotsLetTheSecondQuestionHit) {
  WorkerProcess on({"--prefix-cache-min-tokens", "32", "--max-batch-tokens", "48",
                    "--prefix-cache-snapshot-interval", "64"});
  WorkerProcess off({"--no-prefix-caching", "--max-batch-tokens", "48"});
  ASSERT_TRUE(on.ok() && off.ok());
  const std::vector<int32_t> doc = Tokens(200, 2);
  for (uint32_t q = 0; q < 4; ++q) {
    const v1::GenerateRequest r = Request(Concat(doc, Tokens(10 + q, 50 + q)), 16, 0.0f, 0);
    ExpectSame(Generate(*off.Generator(), r), Generate(*on.Generator(), r),
               "question " + std::to_string(q));
    if (q == 1) {
      EXPECT_EQ(WorkerMetric(on, "vllm:prefix_cache_hits_total"), 192);
    }
  }
  EXPECT_EQ(WorkerMetric(on, "walsh_worker_prefix_cache_lookups_total{outcome=\"no_snapshot\"}"),
            -1);  // never: every question after the first hits
  EXPECT_EQ(WorkerMetric(on, "walsh_worker_prefix_cache_snapshots_total{at=\"interval\"}"), 3);
  EXPECT_EQ(WorkerMetric(on, "vllm:prefix_cache_hits_total"), 3 * 192);
  ExpectAllGivenBack(on);
}

TEST_F(PrefixCacheWorkers, MultiTurnResumesWhereTheLastTurnEnded) {
  ASSERT_TRUE(on_.ok() && off_.ok());
  std::vector<int32_t> conversation = Tokens(60, 3);
  for (int turn = 0; turn < 3; ++turn) {
    const v1::GenerateRequest r = Request(conversation, 20, 0.0f, 0);
    const Outcome cold = Cold(r);
    ExpectSame(cold, Warm(r), "turn " + std::to_string(turn));
    // The next turn: this one's prompt, its answer, and a new user message.
    conversation = Concat(Concat(conversation, cold.ids), Tokens(12, 90 + turn));
  }
  // Turns 2 and 3 start where the previous turn's sequence ended: its prompt and all but the
  // last answer token (the one never fed).
  EXPECT_EQ(Hits(), (60 + 19) + (60 + 20 + 12 + 19));
  ExpectAllGivenBack(on_);
}

TEST_F(PrefixCacheWorkers, ConcurrentRequestsWithTheSamePrefix) {
  ASSERT_TRUE(on_.ok() && off_.ok());
  const std::vector<int32_t> doc = Tokens(120, 4);
  std::vector<v1::GenerateRequest> reqs;
  for (uint32_t i = 0; i < 12; ++i) {
    reqs.push_back(Request(Concat(doc, Tokens(1 + i % 4, 200 + i)), 16, i % 2 ? 0.8f : 0.0f, i));
  }
  std::vector<Outcome> cold, warm(reqs.size());
  for (const auto& r : reqs) cold.push_back(Cold(r));
  for (int round = 0; round < 2; ++round) {  // the first round cold, the second warm
    std::vector<std::thread> threads;
    for (size_t i = 0; i < reqs.size(); ++i) {
      threads.emplace_back([&, i] { warm[i] = Warm(reqs[i]); });
    }
    for (auto& t : threads) t.join();
    for (size_t i = 0; i < reqs.size(); ++i) {
      ExpectSame(cold[i], warm[i],
                 "round " + std::to_string(round) + " request " + std::to_string(i));
    }
  }
  EXPECT_GT(Hits(), 0);
  ExpectAllGivenBack(on_);
}

TEST_F(PrefixCacheWorkers, CancellingRequestsThatSharePagesFreesOnlyTheirOwn) {
  ASSERT_TRUE(on_.ok() && off_.ok());
  const std::vector<int32_t> doc = Tokens(100, 5);
  const v1::GenerateRequest r = Request(Concat(doc, {7}), 40, 0.0f, 0);
  const Outcome cold = Cold(r);
  ExpectSame(cold, Warm(r), "warm-up");
  std::vector<Outcome> runs(10);
  std::vector<std::thread> threads;
  for (int i = 0; i < 10; ++i) {
    // Even ones are cancelled after a few tokens, while the others hold the same pages.
    threads.emplace_back([&, i] { runs[i] = Generate(*on_.Generator(), r, i % 2 ? -1 : 1 + i); });
  }
  for (auto& t : threads) t.join();
  for (int i = 0; i < 10; ++i) {
    if (i % 2 == 0) {
      EXPECT_EQ(runs[i].status.error_code(), grpc::StatusCode::CANCELLED) << i;
    } else {
      ExpectSame(cold, runs[i], "survivor " + std::to_string(i));
    }
  }
  ExpectSame(cold, Warm(r), "after the cancels");
  ExpectAllGivenBack(on_);
}

TEST(PrefixCacheWorker, EvictionUnderKvPressureKeepsEveryStreamExact) {
  // 1 MB of KV cache is 128 pages of 16 for the tiny model; six 300-token documents with
  // 150-token answers run six at a time need more than that, so the cache gives way.
  WorkerProcess on({"--kv-cache-mb", "1", "--prefix-cache-min-tokens", "32", "--max-running", "6",
                    "--max-batch-tokens", "256"});
  WorkerProcess off({"--no-prefix-caching"});
  ASSERT_TRUE(on.ok() && off.ok());
  std::vector<v1::GenerateRequest> reqs;
  for (uint32_t i = 0; i < 12; ++i) reqs.push_back(Request(Tokens(300, 300 + i % 6), 150, 0.0f, 0));
  std::vector<Outcome> cold;
  for (const auto& r : reqs) cold.push_back(Generate(*off.Generator(), r));
  std::vector<Outcome> warm(reqs.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < reqs.size(); ++i) {
    threads.emplace_back([&, i] { warm[i] = Generate(*on.Generator(), reqs[i]); });
  }
  for (auto& t : threads) t.join();
  for (size_t i = 0; i < reqs.size(); ++i) ExpectSame(cold[i], warm[i], std::to_string(i));
  EXPECT_GT(WorkerMetric(on, "walsh_worker_prefix_cache_evictions_total{kind=\"page\"}") +
                WorkerMetric(on, "walsh_worker_prefix_cache_evictions_total{kind=\"snapshot\"}"),
            0);
  ExpectAllGivenBack(on);
}

TEST_F(PrefixCacheWorkers, ResumeWorksWithAndWithoutAHit) {
  ASSERT_TRUE(on_.ok() && off_.ok());
  const v1::GenerateRequest r = Request(Tokens(90, 6), 30, 0.7f, 5);
  const Outcome cold = Cold(r);
  ASSERT_EQ(cold.ids.size(), 30u);
  for (int attempt = 0; attempt < 2; ++attempt) {  // a miss, then a hit on the replayed tokens
    v1::ResumeRequest resume;
    *resume.mutable_request() = r;
    for (int32_t id : r.tokens().ids()) resume.add_prompt_ids(id);
    for (int i = 0; i < 12; ++i) resume.add_emitted_ids(cold.ids[i]);
    grpc::ClientContext ctx;
    auto reader = on_.Worker()->Resume(&ctx, resume);
    const Outcome rest = Read(*reader);
    ASSERT_TRUE(rest.status.ok()) << rest.status.error_message();
    EXPECT_EQ(rest.ids, std::vector<int32_t>(cold.ids.begin() + 12, cold.ids.end())) << attempt;
  }
  EXPECT_GT(Hits(), 0);
  ExpectAllGivenBack(on_);
}

}  // namespace
}  // namespace walsh
