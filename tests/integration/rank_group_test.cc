// A tensor-parallel group over walsh-worker processes, one rank each, joined over gloo on
// loopback (docs/worker.md, "Ranks in separate processes"): the leader serves what one rank
// would, bit for bit (tokens and log-probabilities); a follower that dies ends the leader's
// streams UNAVAILABLE and turns it NOT_SERVING, and the gateway resumes them elsewhere exactly;
// a follower with another model is refused by name; draining the leader ends its followers.
#include <signal.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/integration/gateway_fixture.h"
#include "tests/integration/worker_fixture.h"
#include "tests/util/eventually.h"
#include "tools/mkmodel/synthetic_model.h"

namespace walsh {
namespace {

using testing::ChildProcess;
using testing::TextRequest;
using testing::WorkerProcess;

std::vector<std::string> GroupFlags(int rank, int size, int port) {
  return {
      "--tp",        std::to_string(size), "--nnodes",         std::to_string(size),
      "--node-rank", std::to_string(rank), "--dist-init-addr", "127.0.0.1:" + std::to_string(port),
      "--dist-host", "127.0.0.1"};
}

// A follower process (--node-rank 1..), and the metrics port it logged once it joined.
struct Follower {
  Follower(const std::string& model, int rank, int size, int port,
           std::vector<std::string> extra = {}) {
    std::vector<std::string> argv = {WALSH_WORKER_BIN, "--model", model, "--metrics-listen",
                                     "127.0.0.1:0"};
    for (std::string& f : GroupFlags(rank, size, port)) argv.push_back(std::move(f));
    argv.insert(argv.end(), extra.begin(), extra.end());
    process = std::make_unique<ChildProcess>(argv);
  }
  // Waits for the group to form; the follower's metrics port, or 0.
  int WaitJoined() {
    auto line = process->WaitForStderrLine(
        [](const std::string& l) { return l.find("\"event\":\"following\"") != std::string::npos; },
        std::chrono::seconds(30));
    if (!line) return 0;
    const size_t at = line->find("\"metrics_port\":");
    return at == std::string::npos ? 0 : std::stoi(line->substr(at + 15));
  }
  std::unique_ptr<ChildProcess> process;
};

// A leader and its followers; the leader serves once every follower joined.
struct Group {
  explicit Group(int size, std::vector<std::string> leader_extra = {}) {
    const int port = testing::FreePort();
    for (int r = 1; r < size; ++r) {
      followers.push_back(std::make_unique<Follower>(testing::TinyModelPath(), r, size, port));
    }
    std::vector<std::string> flags = GroupFlags(0, size, port);
    flags.insert(flags.end(), leader_extra.begin(), leader_extra.end());
    leader = std::make_unique<WorkerProcess>(flags);
  }
  std::unique_ptr<WorkerProcess> leader;
  std::vector<std::unique_ptr<Follower>> followers;
};

// Every token's id, log-probability and top-5 (id and log-probability), in order.
struct Scored {
  grpc::Status status;
  std::vector<int32_t> ids;
  std::vector<float> logprobs;
};

Scored RunScored(v1::Generator::Stub& stub, const v1::GenerateRequest& req) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  auto reader = stub.Generate(&ctx, req);
  v1::GenerateResponse resp;
  Scored out;
  while (reader->Read(&resp)) {
    for (const auto& t : resp.tokens().tokens()) {
      out.ids.push_back(t.id());
      out.logprobs.push_back(t.logprob());
      for (const auto& top : t.top_logprobs()) {
        out.ids.push_back(top.id());
        out.logprobs.push_back(top.logprob());
      }
    }
  }
  out.status = reader->Finish();
  return out;
}

TEST(RankGroup, TwoProcessesServeTheBitsOfOne) {
  Group group(2);
  ASSERT_TRUE(group.leader->ok()) << group.leader->process().stderr_text();
  const int follower_metrics = group.followers[0]->WaitJoined();
  ASSERT_GT(follower_metrics, 0) << group.followers[0]->process->stderr_text();
  WorkerProcess one;
  ASSERT_TRUE(one.ok());
  for (const auto& [text, temperature] : std::vector<std::pair<std::string, float>>{
           {"the group of two", 0.0f}, {"sampled, with a seed", 0.9f}}) {
    const v1::GenerateRequest req = TextRequest(text, 48, temperature, 17, 5);
    const Scored want = RunScored(*one.Generator(), req);
    const Scored got = RunScored(*group.leader->Generator(), req);
    ASSERT_TRUE(want.status.ok()) << want.status.error_message();
    ASSERT_TRUE(got.status.ok()) << got.status.error_message();
    EXPECT_EQ(got.ids, want.ids) << text;
    ASSERT_EQ(got.logprobs.size(), want.logprobs.size());
    EXPECT_EQ(0, std::memcmp(got.logprobs.data(), want.logprobs.data(),
                             want.logprobs.size() * sizeof(float)))
        << text;
  }
  // The follower ran the leader's steps and says so.
  const auto steps = testing::MetricIn(testing::HttpGet(follower_metrics, "/metrics"),
                                       "walsh_follower_steps_total");
  ASSERT_TRUE(steps.has_value());
  EXPECT_GE(*steps, 96);
}

TEST(RankGroup, AFollowerThatDiesEndsStreamsUnavailableAndStopsTheLeaderServing) {
  Group group(2);
  ASSERT_TRUE(group.leader->ok()) << group.leader->process().stderr_text();
  auto stub = group.leader->Generator();
  grpc::ClientContext ctx;
  auto reader = stub->Generate(&ctx, TextRequest("a long one", 4000, 0.0f, 1, 5));
  v1::GenerateResponse resp;
  int tokens = 0;
  while (tokens < 5 && reader->Read(&resp)) tokens += resp.tokens().tokens_size();
  ASSERT_GE(tokens, 5);
  group.followers[0]->process->Signal(SIGKILL);
  while (reader->Read(&resp)) {
  }
  const grpc::Status s = reader->Finish();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE) << s.error_message();
  EXPECT_NE(s.error_message().find("rank 0 of 2"), std::string::npos) << s.error_message();
  auto health = group.leader->Health();
  EXPECT_TRUE(testing::Eventually(
      [&] {
        grpc::ClientContext hctx;
        grpc::health::v1::HealthCheckRequest in;
        grpc::health::v1::HealthCheckResponse out;
        return health->Check(&hctx, in, &out).ok() &&
               out.status() == grpc::health::v1::HealthCheckResponse::NOT_SERVING;
      },
      std::chrono::seconds(10)));
  // What comes later is refused as the worker's failure, not the request's.
  const Scored later = RunScored(*stub, TextRequest("after", 4, 0.0f, 1, 5));
  EXPECT_EQ(later.status.error_code(), grpc::StatusCode::UNAVAILABLE);
}

TEST(RankGroup, TheGatewayResumesALostGroupsStreamsExactly) {
  Group group(2);
  ASSERT_TRUE(group.leader->ok()) << group.leader->process().stderr_text();
  WorkerProcess one;
  ASSERT_TRUE(one.ok());
  testing::GatewayProcess gw({group.leader->target(), one.target()}, {"--policy", "round-robin"});
  ASSERT_TRUE(gw.WaitForWorkers(2));
  auto stub = gw.Stub();
  bool killed = false;
  for (int attempt = 0; attempt < 6 && !killed; ++attempt) {
    const v1::GenerateRequest req =
        TextRequest("resume me " + std::to_string(attempt), 80, 0.8f, 5, 5);
    const Scored want = RunScored(*one.Generator(), req);
    ASSERT_TRUE(want.status.ok());
    grpc::ClientContext ctx;
    auto reader = stub->Generate(&ctx, req);
    v1::GenerateResponse resp;
    std::vector<int32_t> ids;
    std::vector<float> logprobs;
    while (reader->Read(&resp)) {
      for (const auto& t : resp.tokens().tokens()) {
        ids.push_back(t.id());
        logprobs.push_back(t.logprob());
        for (const auto& top : t.top_logprobs()) {
          ids.push_back(top.id());
          logprobs.push_back(top.logprob());
        }
      }
      const auto& md = ctx.GetServerInitialMetadata();
      auto it = md.find("x-walsh-worker");
      if (!killed && ids.size() >= 6 * 10 && it != md.end() &&
          std::string(it->second.data(), it->second.size()) == group.leader->target()) {
        group.followers[0]->process->Signal(SIGKILL);
        killed = true;
      }
    }
    const grpc::Status s = reader->Finish();
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(ids, want.ids) << "attempt " << attempt;
    EXPECT_EQ(logprobs, want.logprobs) << "attempt " << attempt;
  }
  ASSERT_TRUE(killed) << "no stream went to the group's leader";
  EXPECT_GE(gw.Metric("walsh_gateway_migrations_total").value_or(0), 1);
}

TEST(RankGroup, AFollowerWithAnotherModelIsRefusedByName) {
  testing::TempDir dir;
  const std::string other = dir.File("other.gguf");
  auto m = SyntheticModel::Create({.preset = "tiny", .seed = 99});
  ASSERT_TRUE(m.ok());
  ASSERT_TRUE((*m)->WritePacked(other).ok());
  const int port = testing::FreePort();
  Follower follower(other, 1, 2, port);
  std::vector<std::string> argv = {
      WALSH_WORKER_BIN,   "--model",     testing::TinyModelPath(), "--listen", "127.0.0.1:0",
      "--metrics-listen", "127.0.0.1:0", "--dist-timeout-seconds", "60"};
  for (std::string& f : GroupFlags(0, 2, port)) argv.push_back(std::move(f));
  ChildProcess leader(argv);
  EXPECT_EQ(follower.process->Wait(std::chrono::seconds(30)), 1);
  EXPECT_NE(follower.process->stderr_text().find("model's fingerprint"), std::string::npos)
      << follower.process->stderr_text();
  // The refusal ends the leader's wait at once, long before its 60 s.
  EXPECT_EQ(leader.Wait(std::chrono::seconds(30)), 1);
  const std::string log = leader.stderr_text();
  EXPECT_NE(log.find("rank_group_failed"), std::string::npos) << log;
  EXPECT_NE(log.find("rank(s) 1 did not join: rank 1 cannot join: its model's fingerprint"),
            std::string::npos)
      << log;
}

TEST(RankGroup, DrainingTheLeaderEndsItsFollowers) {
  Group group(2);
  ASSERT_TRUE(group.leader->ok()) << group.leader->process().stderr_text();
  ASSERT_GT(group.followers[0]->WaitJoined(), 0);
  group.leader->process().Signal(SIGTERM);
  EXPECT_EQ(group.leader->process().Wait(std::chrono::seconds(30)), 0);
  EXPECT_EQ(group.followers[0]->process->Wait(std::chrono::seconds(30)), 0);
  EXPECT_NE(group.followers[0]->process->stderr_text().find("rank_group_closed"),
            std::string::npos);
}

}  // namespace
}  // namespace walsh
