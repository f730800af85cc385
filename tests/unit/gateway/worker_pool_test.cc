// The worker pool's state machine against stand-in workers in this process: a worker takes
// traffic only while it is SERVING, reports the pool's fingerprint (checked on every poll) and
// its breaker is not open; its load is copied from GetLoad.
#include "gateway/worker_pool.h"

#include <algorithm>
#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "common/mutex.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "gtest/gtest.h"
#include "tests/util/eventually.h"

namespace walsh {
namespace {

// A gRPC server answering health, GetModelInfo and GetLoad with what the test sets.
class StandInWorker {
 public:
  explicit StandInWorker(std::string fingerprint) : health_(this), generator_(this), worker_(this) {
    SetFingerprint(std::move(fingerprint));
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(&health_);
    builder.RegisterService(&generator_);
    builder.RegisterService(&worker_);
    server_ = builder.BuildAndStart();
  }
  ~StandInWorker() {
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  }

  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  void SetServing(bool serving) {
    MutexLock l(&mu_);
    serving_ = serving;
  }
  // The next `count` health checks answer after `delay`.
  void SlowChecks(int count, std::chrono::milliseconds delay) {
    MutexLock l(&mu_);
    slow_checks_ = count;
    slow_delay_ = delay;
  }
  int slow_checks_left() {
    MutexLock l(&mu_);
    return slow_checks_;
  }
  void SetFingerprint(std::string fingerprint) {
    MutexLock l(&mu_);
    fingerprint_ = std::move(fingerprint);
  }
  void SetLoad(uint32_t waiting, uint32_t running) {
    MutexLock l(&mu_);
    waiting_ = waiting;
    running_ = running;
  }

 private:
  class Health final : public grpc::health::v1::Health::Service {
   public:
    explicit Health(StandInWorker* w) : w_(w) {}
    grpc::Status Check(grpc::ServerContext*, const grpc::health::v1::HealthCheckRequest*,
                       grpc::health::v1::HealthCheckResponse* response) override {
      std::chrono::milliseconds delay{0};
      bool serving;
      {
        MutexLock l(&w_->mu_);
        if (w_->slow_checks_ > 0) {
          --w_->slow_checks_;
          delay = w_->slow_delay_;
        }
        serving = w_->serving_;
      }
      std::this_thread::sleep_for(delay);
      response->set_status(serving ? grpc::health::v1::HealthCheckResponse::SERVING
                                   : grpc::health::v1::HealthCheckResponse::NOT_SERVING);
      return grpc::Status::OK;
    }

   private:
    StandInWorker* w_;
  };
  class Generator final : public v1::Generator::CallbackService {
   public:
    explicit Generator(StandInWorker* w) : w_(w) {}
    grpc::ServerUnaryReactor* GetModelInfo(grpc::CallbackServerContext* context,
                                           const v1::GetModelInfoRequest*,
                                           v1::ModelInfo* info) override {
      MutexLock l(&w_->mu_);
      info->set_contract_fingerprint(w_->fingerprint_);
      auto* r = context->DefaultReactor();
      r->Finish(grpc::Status::OK);
      return r;
    }

   private:
    StandInWorker* w_;
  };
  class Worker final : public v1::Worker::CallbackService {
   public:
    explicit Worker(StandInWorker* w) : w_(w) {}
    grpc::ServerUnaryReactor* GetLoad(grpc::CallbackServerContext* context,
                                      const v1::GetLoadRequest*, v1::Load* load) override {
      MutexLock l(&w_->mu_);
      load->set_waiting(w_->waiting_);
      load->set_running(w_->running_);
      auto* r = context->DefaultReactor();
      r->Finish(grpc::Status::OK);
      return r;
    }

   private:
    StandInWorker* w_;
  };

  Mutex mu_;
  std::string fingerprint_ ABSL_GUARDED_BY(mu_);
  uint32_t waiting_ ABSL_GUARDED_BY(mu_) = 0, running_ ABSL_GUARDED_BY(mu_) = 0;
  bool serving_ ABSL_GUARDED_BY(mu_) = true;
  int slow_checks_ ABSL_GUARDED_BY(mu_) = 0;
  std::chrono::milliseconds slow_delay_ ABSL_GUARDED_BY(mu_){0};
  Health health_;
  Generator generator_;
  Worker worker_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

using testing::Eventually;

WorkerPoolOptions Options(std::vector<std::string> workers, std::string expected = "") {
  WorkerPoolOptions o;
  o.static_workers = std::move(workers);
  o.expected_fingerprint = std::move(expected);
  o.poll_interval = std::chrono::milliseconds(20);
  o.channel.keepalive = std::chrono::milliseconds(0);
  return o;
}

std::vector<std::string> Addresses(const std::vector<std::shared_ptr<WorkerEndpoint>>& ws) {
  std::vector<std::string> out;
  for (const auto& w : ws) out.push_back(w->address);
  return out;
}

TEST(WorkerPool, AServingWorkerIsACandidateWithItsLoad) {
  StandInWorker a("fp-a");
  a.SetLoad(3, 2);
  WorkerPool pool(Options({a.address()}));
  ASSERT_TRUE(pool.WaitForAny(std::chrono::seconds(10)));
  EXPECT_EQ(pool.fingerprint(), "fp-a");  // the first worker's, none being expected
  auto w = pool.Candidates().at(0);
  EXPECT_TRUE(Eventually([&] { return w->waiting == 3 && w->running == 2; }));
}

TEST(WorkerPool, NotServingLeavesRoutingAndServingAgainReturns) {
  StandInWorker a("fp");
  WorkerPool pool(Options({a.address()}));
  ASSERT_TRUE(pool.WaitForAny(std::chrono::seconds(10)));
  a.SetServing(false);
  EXPECT_TRUE(Eventually([&] { return pool.Candidates().empty(); }));
  a.SetServing(true);
  EXPECT_TRUE(Eventually([&] { return pool.Candidates().size() == 1; }));
}

TEST(WorkerPool, AnotherModelIsRefusedOnEveryPoll) {
  StandInWorker good("fp-good"), other("fp-other");
  WorkerPool pool(Options({good.address(), other.address()}, "fp-good"));
  auto only_good = [&] {
    return Addresses(pool.Candidates()) == std::vector<std::string>{good.address()};
  };
  ASSERT_TRUE(Eventually(only_good));
  std::shared_ptr<WorkerEndpoint> refused;
  for (auto& w : pool.All()) {
    if (w->address == other.address()) refused = w;
  }
  ASSERT_NE(refused, nullptr);
  EXPECT_TRUE(Eventually([&] { return refused->known && refused->refused; }));
  other.SetFingerprint("fp-good");  // restarted with the pool's model: accepted
  EXPECT_TRUE(Eventually([&] { return pool.Candidates().size() == 2; }));
  other.SetFingerprint("fp-other");  // and again with another: refused again
  EXPECT_TRUE(Eventually(only_good));
}

// A check that times out is a miss: the worker stays routable through fewer than check_misses
// in a row, leaves routing at the last, and returns when a check is answered in time.
TEST(WorkerPool, SlowChecksTakeAWorkerOutOnlyAfterCheckMissesInARow) {
  StandInWorker a("fp");
  WorkerPoolOptions o = Options({a.address()});
  o.check_timeout = std::chrono::milliseconds(250);
  o.check_misses = 3;
  WorkerPool pool(o);
  ASSERT_TRUE(pool.WaitForAny(std::chrono::seconds(10)));
  auto w = pool.All().at(0);
  // Two misses: routable throughout (looked at far more often than the pool polls).
  a.SlowChecks(2, std::chrono::milliseconds(600));
  bool always_routable = true;
  int64_t most_missed = 0;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while ((a.slow_checks_left() > 0 || w->missed_checks > 0) &&
         std::chrono::steady_clock::now() < until) {
    always_routable = always_routable && pool.Candidates().size() == 1;
    most_missed = std::max<int64_t>(most_missed, w->missed_checks.load());
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  EXPECT_TRUE(always_routable);
  EXPECT_GE(most_missed, 1);              // the misses were counted
  EXPECT_EQ(w->missed_checks.load(), 0);  // an answer in time starts the count again
  // Slow until the test says otherwise: out after three in a row, back once a check is answered
  // in time.
  a.SlowChecks(1 << 30, std::chrono::milliseconds(600));
  EXPECT_TRUE(Eventually([&] { return pool.Candidates().empty(); }));
  EXPECT_GE(w->missed_checks.load(), 3);
  a.SlowChecks(0, std::chrono::milliseconds(0));
  EXPECT_TRUE(Eventually([&] { return pool.Candidates().size() == 1; }));
  EXPECT_EQ(w->missed_checks.load(), 0);
}

TEST(WorkerPool, AnOpenBreakerLeavesRoutingUntilItsCoolDownEnds) {
  StandInWorker a("fp");
  std::atomic<int64_t> now_ms{0};  // the breakers' clock, moved by the test
  WorkerPoolOptions o = Options({a.address()});
  o.breaker = {.failures = 2, .cool_down = std::chrono::milliseconds(300), .clock = [&] {
                 return std::chrono::steady_clock::time_point{} +
                        std::chrono::milliseconds(now_ms.load());
               }};
  WorkerPool pool(o);
  ASSERT_TRUE(pool.WaitForAny(std::chrono::seconds(10)));
  auto w = pool.Candidates().at(0);
  w->breaker.RecordFailure();
  EXPECT_EQ(pool.Candidates().size(), 1u);  // one failure of two
  w->breaker.RecordFailure();
  EXPECT_TRUE(pool.Candidates().empty());
  now_ms = 299;
  EXPECT_TRUE(pool.Candidates().empty());
  now_ms = 300;  // half-open after the cool-down: a candidate again, for its one trial
  EXPECT_EQ(pool.Candidates().size(), 1u);
  EXPECT_EQ(w->breaker.state(), CircuitBreaker::State::kHalfOpen);
}

TEST(WorkerPool, AWorkerThatGoesAwayLeavesRouting) {
  auto a = std::make_unique<StandInWorker>("fp");
  WorkerPool pool(Options({a->address()}));
  ASSERT_TRUE(pool.WaitForAny(std::chrono::seconds(10)));
  a.reset();  // its health checks now fail
  EXPECT_TRUE(Eventually([&] { return pool.Candidates().empty(); }));
  EXPECT_FALSE(pool.All().at(0)->serving);
}

TEST(WorkerPool, AnUnreachableWorkerIsNeverACandidate) {
  WorkerPool pool(Options({"127.0.0.1:1"}));
  EXPECT_FALSE(pool.WaitForAny(std::chrono::milliseconds(300)));
  EXPECT_EQ(pool.All().size(), 1u);
}

}  // namespace
}  // namespace walsh
