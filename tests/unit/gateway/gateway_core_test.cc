// The gateway's core in one process: GatewayService, WorkerPool, ProxiedStream, admission and
// the breakers, in front of scripted workers (scripted_worker.h), with the breakers on a fake
// clock. Retry before the first token, exact migration at every point of a stream, a client's
// cancel racing its worker's end, breaker trials, and the byte bound of a stream whose client
// does not read.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "common/buffer_budget.h"
#include "common/metrics.h"
#include "gateway/circuit_breaker.h"
#include "gateway/gateway_metrics.h"
#include "gateway/gateway_service.h"
#include "gateway/routing/routing_policy.h"
#include "gateway/worker_pool.h"
#include "gtest/gtest.h"
#include "tests/util/eventually.h"
#include "tests/util/scripted_worker.h"

namespace walsh {
namespace {

using std::chrono::milliseconds;
using testing::Script;
using testing::ScriptedToken;
using testing::ScriptedWorker;

// Breakers that never open: tests of migration fail workers on purpose, again and again.
BreakerOptions NeverOpen() {
  BreakerOptions b;
  b.failures = 1 << 30;
  return b;
}

// Breakers read this clock; tests move it.
struct FakeClock {
  std::atomic<int64_t> ms{1'000'000};
  std::chrono::steady_clock::time_point now() const {
    return std::chrono::steady_clock::time_point(milliseconds(ms.load()));
  }
};

class InProcessGateway {
 public:
  InProcessGateway(const std::vector<ScriptedWorker*>& workers, GatewayOptions options,
                   BreakerOptions breaker = {})
      : budget_("the gateway", 64 << 20) {
    WorkerPoolOptions po;
    for (ScriptedWorker* w : workers) po.static_workers.push_back(w->target());
    po.poll_interval = milliseconds(20);
    po.breaker = std::move(breaker);
    pool_ = std::make_unique<WorkerPool>(po);
    policy_ = *MakeRoutingPolicy("round-robin");
    metrics_ = std::make_unique<GatewayMetrics>(registry_, pool_.get(), &budget_);
    options.stream_buffers.budget = &budget_;
    service_ =
        std::make_unique<GatewayService>(pool_.get(), policy_.get(), metrics_.get(), options);
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    testing::Eventually([&] { return pool_->Candidates().size() >= workers.size(); });
  }
  ~InProcessGateway() {
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
    server_->Wait();
  }

  bool ready(size_t n) { return pool_->Candidates().size() == n; }
  std::string target() const { return "127.0.0.1:" + std::to_string(port_); }
  std::unique_ptr<v1::Generator::Stub> Stub(const grpc::ChannelArguments& args = {}) const {
    auto channel = grpc::CreateCustomChannel(target(), grpc::InsecureChannelCredentials(), args);
    channel->WaitForConnected(std::chrono::system_clock::now() + std::chrono::seconds(10));
    return v1::Generator::NewStub(channel);
  }
  GatewayMetrics& metrics() { return *metrics_; }
  GatewayService& service() { return *service_; }
  BufferBudget& budget() { return budget_; }

 private:
  MetricsRegistry registry_;
  BufferBudget budget_;
  std::unique_ptr<WorkerPool> pool_;
  std::unique_ptr<RoutingPolicy> policy_;
  std::unique_ptr<GatewayMetrics> metrics_;
  std::unique_ptr<GatewayService> service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

v1::GenerateRequest Request(uint64_t seed, uint32_t max_tokens) {
  v1::GenerateRequest r;
  r.set_text("scripted");
  r.mutable_sampling()->set_seed(seed);
  r.mutable_stopping()->set_max_tokens(max_tokens);
  return r;
}

std::vector<int32_t> Expected(uint64_t seed, uint32_t max_tokens) {
  std::vector<int32_t> ids;
  for (uint32_t i = 0; i < max_tokens; ++i) ids.push_back(ScriptedToken(seed, i));
  return ids;
}

struct Outcome {
  grpc::Status status;
  std::vector<int32_t> ids;
  std::string finish;
};

Outcome RunStream(v1::Generator::Stub& stub, const v1::GenerateRequest& request,
                  grpc::ClientContext* context = nullptr) {
  grpc::ClientContext own;
  grpc::ClientContext& ctx = context != nullptr ? *context : own;
  auto reader = stub.Generate(&ctx, request);
  Outcome o;
  v1::GenerateResponse r;
  while (reader->Read(&r)) {
    for (const auto& t : r.tokens().tokens()) o.ids.push_back(t.id());
    if (r.has_finished()) o.finish = r.finished().reason();
  }
  o.status = reader->Finish();
  return o;
}

using testing::Eventually;

TEST(GatewayCore, AWorkerFaultBeforeTheFirstTokenIsRetriedElsewhere) {
  ScriptedWorker failing({.refuse = grpc::StatusCode::UNAVAILABLE}), good;
  InProcessGateway gw({&failing, &good}, {});
  ASSERT_TRUE(gw.ready(2));
  auto stub = gw.Stub();
  for (uint64_t seed = 1; seed <= 8; ++seed) {
    const Outcome o = RunStream(*stub, Request(seed, 6));
    ASSERT_TRUE(o.status.ok()) << o.status.error_message();
    EXPECT_EQ(o.ids, Expected(seed, 6));
    EXPECT_EQ(o.finish, "length");
  }
  // Round-robin sent some first attempts to the failing worker; each was retried, none migrated.
  EXPECT_GE(failing.counts().generates.load(), 1);
  EXPECT_EQ(gw.metrics().retries.value(), failing.counts().generates.load());
  EXPECT_EQ(gw.metrics().migrations.value(), 0);
  EXPECT_EQ(good.counts().resumes.load(), 0);
}

TEST(GatewayCore, TheRequestsOwnFaultIsNeverRetried) {
  ScriptedWorker refusing({.refuse = grpc::StatusCode::INVALID_ARGUMENT});
  InProcessGateway gw({&refusing}, {});
  ASSERT_TRUE(gw.ready(1));
  const Outcome o = RunStream(*gw.Stub(), Request(1, 6));
  EXPECT_EQ(o.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(o.status.error_message(), "prompt: refused by the script");
  EXPECT_EQ(refusing.counts().generates.load(), 1);
  EXPECT_EQ(gw.metrics().retries.value(), 0);
}

TEST(GatewayCore, AStreamMigratesExactlyFromEveryPointOfIt) {
  constexpr uint32_t kTokens = 10;
  ScriptedWorker a, b;
  InProcessGateway gw({&a, &b}, {}, NeverOpen());
  ASSERT_TRUE(gw.ready(2));
  auto stub = gw.Stub();
  for (int k = 0; k < static_cast<int>(kTokens); ++k) {
    // Whichever worker starts the stream fails after k tokens; the other resumes it.
    a.set_script({.fail_after_tokens = k});
    b.set_script({.fail_after_tokens = k});
    const double migrations = gw.metrics().migrations.value();
    const Outcome o = RunStream(*stub, Request(100 + k, kTokens));
    ASSERT_TRUE(o.status.ok()) << "failed after " << k << ": " << o.status.error_message();
    EXPECT_EQ(o.ids, Expected(100 + k, kTokens)) << "failed after " << k;
    EXPECT_EQ(o.finish, "length");
    EXPECT_EQ(gw.metrics().migrations.value(), migrations + 1) << k;
  }
  std::vector<size_t> at = a.resumed_at(), resumed_b = b.resumed_at();
  at.insert(at.end(), resumed_b.begin(), resumed_b.end());
  std::sort(at.begin(), at.end());
  std::vector<size_t> every(kTokens);
  for (size_t k = 0; k < kTokens; ++k) every[k] = k;
  EXPECT_EQ(at, every);
  EXPECT_EQ(a.counts().bad_resumes.load() + b.counts().bad_resumes.load(), 0);
}

TEST(GatewayCore, MigrationsAreBoundedAndTheEndNamesThem) {
  ScriptedWorker a({.fail_after_tokens = 1, .resume_fail_after_tokens = 1}),
      b({.fail_after_tokens = 1, .resume_fail_after_tokens = 1});
  GatewayOptions options;
  options.max_migrations = 3;
  InProcessGateway gw({&a, &b}, options, NeverOpen());
  ASSERT_TRUE(gw.ready(2));
  const Outcome o = RunStream(*gw.Stub(), Request(7, 20));
  EXPECT_EQ(o.status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_NE(o.status.error_message().find("failed 4 times"), std::string::npos)
      << o.status.error_message();
  // Every token sent before the end was the stream's own, in order.
  ASSERT_EQ(o.ids.size(), 4u);
  EXPECT_EQ(o.ids, std::vector<int32_t>(Expected(7, 4)));
}

TEST(GatewayCore, AClientCancelRacingTheWorkersEndFreesEverySlot) {
  ScriptedWorker a({.token_interval = milliseconds(1)}), b({.token_interval = milliseconds(1)});
  InProcessGateway gw({&a, &b}, {});
  ASSERT_TRUE(gw.ready(2));
  auto stub = gw.Stub();
  // Cancels land from the stream's start to twice its length, so about half race its end.
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(RunStream(*stub, Request(1, 12)).status.ok());
  const int64_t span =
      1 +
      2 * std::chrono::duration_cast<milliseconds>(std::chrono::steady_clock::now() - t0).count();
  std::mt19937 rng(5);
  std::atomic<int> ok{0}, cancelled{0}, wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, seed = rng()] {
      std::mt19937 r(seed);
      for (int i = 0; i < 40; ++i) {
        grpc::ClientContext ctx;
        std::thread canceller([&ctx, delay = static_cast<int64_t>(r() % span)] {
          std::this_thread::sleep_for(milliseconds(delay));
          ctx.TryCancel();
        });
        const uint64_t s = r();
        const Outcome o = RunStream(*stub, Request(s, 12), &ctx);
        canceller.join();
        if (o.status.ok() && o.ids == Expected(s, 12)) {
          ++ok;
        } else if (o.status.error_code() == grpc::StatusCode::CANCELLED) {
          ++cancelled;
        } else {
          ++wrong;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_GT(ok.load(), 0);
  EXPECT_GT(cancelled.load(), 0);
  EXPECT_TRUE(Eventually([&] { return gw.service().inflight() == 0; }));
  EXPECT_TRUE(Eventually([&] { return a.counts().open == 0 && b.counts().open == 0; }));
  EXPECT_EQ(gw.metrics().migrations.value(), 0);
}

TEST(GatewayCore, AnOpenBreakerLetsOneTrialThroughAfterItsCoolDown) {
  FakeClock clock;
  BreakerOptions breaker;
  breaker.failures = 2;
  breaker.cool_down = std::chrono::seconds(10);
  breaker.clock = [&clock] { return clock.now(); };
  ScriptedWorker flaky({.refuse = grpc::StatusCode::UNAVAILABLE}), good;
  InProcessGateway gw({&flaky, &good}, {}, breaker);
  ASSERT_TRUE(gw.ready(2));
  auto stub = gw.Stub();
  int seed = 0;
  auto run_streams = [&](int n) {
    for (int i = 0; i < n; ++i) {
      const Outcome o = RunStream(*stub, Request(++seed, 4));
      ASSERT_TRUE(o.status.ok()) << o.status.error_message();
      ASSERT_EQ(o.ids, Expected(seed, 4));
    }
  };
  // Two failures open it; then no stream reaches it, however many.
  for (int i = 0; i < 20 && flaky.counts().generates < 2; ++i) run_streams(1);
  ASSERT_EQ(flaky.counts().generates.load(), 2);
  run_streams(6);
  EXPECT_EQ(flaky.counts().generates.load(), 2);
  // After the cool-down one trial goes through; it fails, and the breaker opens again.
  clock.ms += 10'000;
  for (int i = 0; i < 20 && flaky.counts().generates < 3; ++i) run_streams(1);
  EXPECT_EQ(flaky.counts().generates.load(), 3);
  run_streams(6);
  EXPECT_EQ(flaky.counts().generates.load(), 3);
  // Healed: the next trial succeeds and closes it, and the worker takes its share again.
  flaky.set_script({});
  clock.ms += 10'000;
  run_streams(8);
  EXPECT_GE(flaky.counts().generates.load(), 3 + 3);
}

TEST(GatewayCore, AClientThatDoesNotReadHoldsItsWorkerWithinTheByteBound) {
  constexpr uint32_t kTokens = 3000;  // ~1.2 MB with 400 bytes of text each: past every window
  ScriptedWorker w({.text_bytes = 400});
  GatewayOptions options;
  options.stream_buffers.max_bytes = 8 << 10;
  InProcessGateway gw({&w}, options);
  ASSERT_TRUE(gw.ready(1));
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_HTTP2_BDP_PROBE, 0);
  args.SetInt(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, 16 << 10);
  auto stub = gw.Stub(args);
  grpc::ClientContext ctx;
  auto reader = stub->Generate(&ctx, Request(9, kTokens));
  v1::GenerateResponse r;
  ASSERT_TRUE(reader->Read(&r));  // Started: the stream is up; now stop reading
  int64_t written = -1;
  ASSERT_TRUE(Eventually([&] {  // the worker's writes stop: it is held
    const int64_t now = w.counts().tokens_written;
    std::this_thread::sleep_for(milliseconds(200));
    const bool still = now == w.counts().tokens_written;
    written = now;
    return still && now > 0;
  }));
  EXPECT_LT(written, kTokens / 2) << "the worker was never held";
  // The gateway holds at most twice its per-stream bound (one message over it is let through).
  EXPECT_LE(gw.budget().used(), 2 * options.stream_buffers.max_bytes) << gw.budget().used();
  // Reading again resumes it, and nothing is lost.
  std::vector<int32_t> ids;
  while (reader->Read(&r)) {
    for (const auto& t : r.tokens().tokens()) ids.push_back(t.id());
  }
  ASSERT_TRUE(reader->Finish().ok());
  EXPECT_EQ(ids, Expected(9, kTokens));
  EXPECT_TRUE(Eventually([&] { return gw.budget().used() == 0; }));
}

}  // namespace
}  // namespace walsh
