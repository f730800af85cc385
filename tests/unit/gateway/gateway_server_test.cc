// GatewayServer in-process: every flag's range refused by name, a bad key file refused naming
// its flag, and a started gateway that serves streams from scripted workers and drains: a
// stream in flight when Drain begins ends whole, a stream after it is refused.
#include "gateway/gateway_server.h"

#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "grpc/health/v1/health.grpc.pb.h"
#include "gtest/gtest.h"
#include "tests/util/eventually.h"
#include "tests/util/scripted_worker.h"

namespace walsh {
namespace {

using testing::ScriptedToken;
using testing::ScriptedWorker;

GatewayServer::Options Valid() {
  GatewayServer::Options o;
  o.workers = "127.0.0.1:1";
  o.listen = "127.0.0.1:0";
  o.metrics_listen = "127.0.0.1:0";
  return o;
}

TEST(GatewayServerOptions, EveryRangeIsRefusedNamingItsFlag) {
  EXPECT_TRUE(Valid().Validate().ok());
  const std::vector<std::pair<std::string, std::function<void(GatewayServer::Options&)>>> bad = {
      {"--workers or --workers-dns", [](auto& o) { o.workers.clear(); }},
      {"--max-inflight", [](auto& o) { o.max_inflight = 0; }},
      {"--max-queue", [](auto& o) { o.max_queue = -1; }},
      {"--max-buffered-bytes", [](auto& o) { o.buffers.max_bytes = 10; }},
      {"--max-retries", [](auto& o) { o.max_retries = -1; }},
      {"--max-migrations", [](auto& o) { o.max_migrations = -1; }},
      {"--retry-rounds", [](auto& o) { o.retry_rounds = -1; }},
      {"--worker-wait-ms", [](auto& o) { o.worker_wait_ms = -1; }},
      {"--max-worker-waits", [](auto& o) { o.max_worker_waits = -1; }},
      {"--unary-timeout-ms", [](auto& o) { o.unary_timeout_ms = 0; }},
      {"--breaker-failures", [](auto& o) { o.breaker_failures = 0; }},
      {"--breaker-cool-down-ms", [](auto& o) { o.breaker_cool_down_ms = -1; }},
      {"--worker-check-timeout-ms", [](auto& o) { o.worker_check_timeout_ms = 0; }},
      {"--worker-check-misses", [](auto& o) { o.worker_check_misses = 0; }},
      {"--poll-interval-ms", [](auto& o) { o.poll_ms = 0; }},
      {"--dns-interval-ms", [](auto& o) { o.dns_ms = 0; }},
      {"--max-streams-per-key", [](auto& o) { o.max_streams_per_key = -1; }},
      {"--max-streams-per-connection", [](auto& o) { o.max_streams_per_connection = -1; }},
      {"--rate-limit", [](auto& o) { o.rate_limit = -1; }},
      {"--rate-burst", [](auto& o) { o.rate_burst = -0.5; }},
      {"--drain-grace-seconds", [](auto& o) { o.drain_grace_seconds = -1; }},
      {"--worker-keepalive-ms", [](auto& o) { o.worker_keepalive_ms = 500; }},
  };
  for (const auto& [flag, spoil] : bad) {
    GatewayServer::Options o = Valid();
    spoil(o);
    const absl::Status s = o.Validate();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << flag;
    EXPECT_NE(s.message().find(flag), absl::string_view::npos) << flag << ": " << s;
  }
}

TEST(GatewayServer, ABadKeyFileIsRefusedNamingItsFlag) {
  GatewayServer::Options o = Valid();
  o.api_key_file = "/nonexistent/keys";
  auto started = GatewayServer::Start(o);
  ASSERT_FALSE(started.ok());
  EXPECT_EQ(started.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(started.status().message().find("--api-key-file"), absl::string_view::npos)
      << started.status();
}

TEST(GatewayServer, ServesThenDrainsTheStreamInFlightWhole) {
  ScriptedWorker a({.token_interval = std::chrono::milliseconds(10)}), b;
  GatewayServer::Options o = Valid();
  o.workers = a.target() + "," + b.target();
  o.policy = "round-robin";
  o.poll_ms = 20;
  o.drain_grace_seconds = 20;
  auto started = GatewayServer::Start(o);
  ASSERT_TRUE(started.ok()) << started.status();
  GatewayServer& gateway = **started;
  auto channel = grpc::CreateChannel("127.0.0.1:" + std::to_string(gateway.grpc_port()),
                                     grpc::InsecureChannelCredentials());
  auto stub = v1::Generator::NewStub(channel);
  auto health = grpc::health::v1::Health::NewStub(channel);
  ASSERT_TRUE(testing::Eventually(
      [&] {
        grpc::ClientContext ctx;
        grpc::health::v1::HealthCheckResponse r;
        return health->Check(&ctx, {}, &r).ok() &&
               r.status() == grpc::health::v1::HealthCheckResponse::SERVING;
      },
      std::chrono::seconds(4), std::chrono::milliseconds(20)));

  // A slow stream (about 0.4 s on worker a), in flight when the drain begins.
  b.set_script({.refuse = grpc::StatusCode::UNAVAILABLE});  // so the stream runs on a
  v1::GenerateRequest request;
  request.set_text("x");
  request.mutable_sampling()->set_seed(3);
  request.mutable_stopping()->set_max_tokens(40);
  grpc::ClientContext ctx;
  auto reader = stub->Generate(&ctx, request);
  v1::GenerateResponse r;
  ASSERT_TRUE(reader->Read(&r));  // Started
  std::thread drain([&] { gateway.Drain(15); });
  std::vector<int32_t> ids;
  while (reader->Read(&r)) {
    for (const auto& t : r.tokens().tokens()) ids.push_back(t.id());
  }
  const grpc::Status s = reader->Finish();
  drain.join();
  EXPECT_TRUE(s.ok()) << s.error_message();
  ASSERT_EQ(ids.size(), 40u);
  for (size_t i = 0; i < ids.size(); ++i) EXPECT_EQ(ids[i], ScriptedToken(3, i)) << i;
  // Drained: a new stream is refused.
  grpc::ClientContext late;
  late.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  auto refused = stub->Generate(&late, request);
  while (refused->Read(&r)) {
  }
  EXPECT_FALSE(refused->Finish().ok());
}

}  // namespace
}  // namespace walsh
