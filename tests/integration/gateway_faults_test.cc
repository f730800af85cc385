// walsh-gateway against faulty workers: one that accepts streams and never answers, and one
// whose process is stopped (SIGSTOP) mid-stream. Real processes on loopback.
#include <signal.h>

#include <thread>

#include "gtest/gtest.h"
#include "tests/integration/gateway_fixture.h"
#include "tests/integration/worker_fixture.h"
#include "tests/util/eventually.h"
#include "tests/util/scripted_worker.h"

namespace walsh {
namespace {

using testing::GatewayProcess;
using testing::ScriptedWorker;
using testing::WorkerProcess;

v1::GenerateRequest Request(const std::string& text, uint32_t max_tokens, uint64_t seed) {
  v1::GenerateRequest r;
  r.set_text(text);
  r.mutable_stopping()->set_max_tokens(max_tokens);
  r.mutable_stopping()->set_ignore_eos(true);
  r.mutable_sampling()->set_temperature(0.8f);
  r.mutable_sampling()->set_seed(seed);
  return r;
}

// A thousand streams held open by a worker that never answers cost the gateway no thread each;
// cancelled ones free their places at once and the rest end at their deadline, every gauge
// back to zero.
TEST(GatewayFaults, AThousandStreamsOnAMuteWorkerCostNoThreadsAndMeetTheirDeadlines) {
  ScriptedWorker mute({.mute = true});
  GatewayProcess gw({mute.target()}, {"--max-inflight", "1000"});
  ASSERT_TRUE(gw.WaitForWorkers(1));
  const int idle_threads = testing::ThreadCount(gw.process().pid());
  constexpr int kStreams = 1000;
  const auto deadline = std::chrono::system_clock::now() + std::chrono::seconds(8);
  std::vector<v1::GenerateRequest> requests;
  for (int i = 0; i < kStreams; ++i) requests.push_back(Request("held", 64, i));
  testing::UnreadStreams streams(testing::Connections(gw.target(), 8), requests, deadline);
  ASSERT_TRUE(gw.WaitForMetric("walsh_gateway_inflight_streams", kStreams));
  EXPECT_TRUE(testing::Eventually([&] { return mute.counts().open.load() >= kStreams; }));
  EXPECT_EQ(mute.counts().open.load(), kStreams);
  const int busy_threads = testing::ThreadCount(gw.process().pid());
  std::printf("gateway threads: %d idle, %d with %d streams open\n", idle_threads, busy_threads,
              kStreams);
  EXPECT_LT(busy_threads, idle_threads + 64);

  for (int i = 0; i < kStreams / 2; ++i) streams.Cancel(i);
  EXPECT_TRUE(gw.WaitForMetric("walsh_gateway_inflight_streams", kStreams / 2));
  EXPECT_TRUE(testing::Eventually([&] { return mute.counts().open.load() <= kStreams / 2; }));
  EXPECT_EQ(mute.counts().open.load(), kStreams / 2);

  std::map<grpc::StatusCode, int> codes = streams.Finish();
  EXPECT_EQ(codes[grpc::StatusCode::CANCELLED], kStreams / 2);
  EXPECT_EQ(codes[grpc::StatusCode::DEADLINE_EXCEEDED], kStreams / 2);
  EXPECT_TRUE(gw.WaitForMetric("walsh_gateway_inflight_streams", 0));
  EXPECT_TRUE(gw.WaitForMetric("walsh_gateway_queue_depth", 0));
  EXPECT_TRUE(
      gw.WaitForMetric("walsh_gateway_worker_inflight{worker=\"" + mute.target() + "\"}", 0));
  EXPECT_TRUE(testing::Eventually([&] { return mute.counts().open.load() == 0; }));
  // Every client cancel is timed (a deadline the upstream call met first is not a cancel).
  EXPECT_GE(gw.Metric("walsh_gateway_cancel_to_free_seconds_count").value_or(0), kStreams / 2);
}

// A worker stopped mid-stream (SIGSTOP: its connections stay open, nothing answers) fails its
// keepalive ping; its streams migrate and every client gets exactly the tokens one worker alone
// gives. Once it continues it serves again.
TEST(GatewayFaults, AStoppedWorkersStreamsMigrateExactly) {
  WorkerProcess a, b;
  ASSERT_TRUE(a.ok() && b.ok());
  GatewayProcess gw({a.target(), b.target()}, {"--worker-keepalive-ms", "1000"});
  ASSERT_TRUE(gw.WaitForWorkers(2));
  constexpr int kStreams = 6;
  // Long enough to be mid-stream when `a` stops; ASan decodes about 5x slower, so fewer suffice.
  constexpr int kTokens = testing::kUnderAddressSanitizer ? 400 : 1500;
  std::vector<v1::GenerateRequest> requests;
  std::vector<testing::StreamResult> expected;
  for (int i = 0; i < kStreams; ++i) {
    requests.push_back(Request("a stream to stop " + std::to_string(i), kTokens, 100 + i));
    expected.push_back(testing::RunGenerate(*b.Generator(), requests.back()));
    ASSERT_TRUE(expected.back().status.ok());
  }
  std::vector<testing::StreamResult> got(kStreams);
  std::vector<std::thread> clients;
  auto stub = gw.Stub();
  for (int i = 0; i < kStreams; ++i) {
    clients.emplace_back([&, i] { got[i] = testing::RunGenerate(*stub, requests[i]); });
  }
  // Stop `a` once every stream has its first token and `a` holds some of them.
  const std::string a_series = "walsh_gateway_worker_inflight{worker=\"" + a.target() + "\"}";
  EXPECT_TRUE(testing::Eventually(
      [&] { return gw.Metric("walsh_gateway_time_to_first_token_seconds_count") == kStreams; }));
  ASSERT_GE(gw.Metric(a_series).value_or(0), 1);
  a.process().Signal(SIGSTOP);
  for (auto& t : clients) t.join();
  a.process().Signal(SIGCONT);
  for (int i = 0; i < kStreams; ++i) {
    ASSERT_TRUE(got[i].status.ok()) << i << ": " << got[i].status.error_message();
    EXPECT_EQ(got[i].ids, expected[i].ids) << i;
  }
  EXPECT_GE(gw.Metric("walsh_gateway_migrations_total").value_or(0), 1);
  EXPECT_TRUE(gw.WaitForWorkers(2));
  EXPECT_TRUE(testing::RunGenerate(*stub, Request("after", 4, 1)).status.ok());
}

}  // namespace
}  // namespace walsh
