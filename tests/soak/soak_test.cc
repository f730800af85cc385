// Soak suites: one gateway in front of two real workers on loopback, pushed with many streams,
// random cancels and deadlines, and clients that never read. CI runs the short forms; the full
// forms run with `scripts/soak` (sizes from the WALSH_SOAK_* environment variables below).
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <map>
#include <mutex>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/integration/gateway_fixture.h"
#include "tests/integration/worker_fixture.h"

namespace walsh {
namespace {

using testing::GatewayProcess;
using testing::WorkerProcess;
using Clock = std::chrono::steady_clock;

using testing::kMemoryIsMeaningful;

int64_t EnvInt(const char* name, int64_t fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::atoll(v) : fallback;
}

v1::GenerateRequest Request(uint32_t max_tokens, uint64_t seed) {
  v1::GenerateRequest r;
  r.set_text(absl::StrCat("soak ", seed));
  r.mutable_stopping()->set_max_tokens(max_tokens);
  r.mutable_stopping()->set_ignore_eos(true);
  r.mutable_sampling()->set_temperature(0.7f);
  r.mutable_sampling()->set_seed(seed);
  return r;
}

// Two workers and a gateway sized for `streams` concurrent streams.
struct Fleet {
  explicit Fleet(int64_t streams, std::vector<std::string> gateway_extra = {}) {
    // A small KV pool (512 pages of the tiny model, room for 64 running streams): finished
    // streams' pages stay in the prefix cache until the pool is full, so the pool fills during
    // the warm-up and the memory check afterwards sees leaks, not the cache filling its budget.
    const std::vector<std::string> worker_flags = {
        "--max-running", "64", "--max-queue", std::to_string(streams), "--kv-cache-mb", "4"};
    a = std::make_unique<WorkerProcess>(worker_flags);
    b = std::make_unique<WorkerProcess>(worker_flags);
    std::vector<std::string> flags = {"--max-inflight", std::to_string(streams)};
    flags.insert(flags.end(), gateway_extra.begin(), gateway_extra.end());
    gateway =
        std::make_unique<GatewayProcess>(std::vector<std::string>{a->target(), b->target()}, flags);
  }
  bool ok() { return a->ok() && b->ok() && gateway->WaitForWorkers(2); }
  // Every gauge of the gateway and both workers back to zero.
  void ExpectIdle() {
    EXPECT_TRUE(gateway->WaitForMetric("walsh_gateway_inflight_streams", 0));
    EXPECT_TRUE(gateway->WaitForMetric("walsh_gateway_queue_depth", 0));
    for (auto* w : {a.get(), b.get()}) {
      EXPECT_TRUE(gateway->WaitForMetric(
          "walsh_gateway_worker_inflight{worker=\"" + w->target() + "\"}", 0));
      const v1::Load load = testing::WaitForIdle(*w->Worker());
      EXPECT_EQ(load.running(), 0u);
      EXPECT_EQ(load.waiting(), 0u);
      EXPECT_EQ(load.kv_pages_used(), 0u);
      EXPECT_EQ(load.state_slots_used(), 0u);
    }
  }
  std::vector<pid_t> pids() {
    return {gateway->process().pid(), a->process().pid(), b->process().pid()};
  }
  std::unique_ptr<WorkerProcess> a, b;
  std::unique_ptr<GatewayProcess> gateway;
};

// The upper bound of the histogram bucket holding quantile q (Prometheus cumulative buckets).
double QuantileBound(const GatewayProcess& gw, const std::string& histogram, double q) {
  const std::string m = testing::HttpGet(gw.metrics_port(), "/metrics");
  const double count = testing::MetricIn(m, histogram + "_count").value_or(0);
  for (const char* le : {"0.001", "0.0025", "0.005", "0.01", "0.025", "0.05", "0.1", "0.25", "0.5",
                         "1", "2.5", "5", "10", "30", "60"}) {
    const auto c = testing::MetricIn(m, histogram + "_bucket{le=\"" + le + "\"}");
    if (c && *c >= q * count) return std::atof(le);
  }
  return INFINITY;
}

// Requests with random cancels (before the first token, mid-stream) and deadlines (some
// already past, some mid-stream), from many client threads at once: every one ends OK,
// CANCELLED or DEADLINE_EXCEEDED, a finished one with all its tokens, and afterwards every
// gauge is back to zero. Reports the p99 from a client's cancel to the release of its place.
TEST(Soak, RandomCancelsAndDeadlines) {
  const int64_t total = EnvInt("WALSH_SOAK_REQUESTS", 1000);
  const int clients = static_cast<int>(EnvInt("WALSH_SOAK_CLIENTS", 32));
  Fleet fleet(clients * 2);
  ASSERT_TRUE(fleet.ok());
  std::atomic<int64_t> next{0};
  std::mutex mu;
  std::map<grpc::StatusCode, int64_t> codes;
  std::vector<std::string> wrong;
  auto client = [&](int id) {
    auto stub = fleet.gateway->Stub();
    std::mt19937_64 rng(id);
    for (int64_t i; (i = next++) < total;) {
      const uint32_t max_tokens = 1 + rng() % 48;
      const int kind = rng() % 10;  // 0-3 run out, 4-5 cancel mid-stream, 6-7 deadline,
                                    // 8 cancel before reading, 9 deadline of 1 ms
      grpc::ClientContext ctx;
      if (kind == 6 || kind == 7) {
        ctx.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::milliseconds(5 + rng() % 300));
      } else if (kind == 9) {
        ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(1));
      }
      const uint32_t cancel_at = rng() % max_tokens;
      auto reader = stub->Generate(&ctx, Request(max_tokens, static_cast<uint64_t>(i)));
      if (kind == 8) {
        std::this_thread::sleep_for(std::chrono::microseconds(rng() % 20000));
        ctx.TryCancel();
      }
      v1::GenerateResponse resp;
      uint32_t tokens = 0;
      bool finished = false;
      while (reader->Read(&resp)) {
        tokens += resp.tokens().tokens_size();
        finished |= resp.has_finished();
        if ((kind == 4 || kind == 5) && tokens >= cancel_at) ctx.TryCancel();
      }
      const grpc::Status s = reader->Finish();
      std::lock_guard<std::mutex> l(mu);
      ++codes[s.error_code()];
      const bool allowed = s.ok() || s.error_code() == grpc::StatusCode::CANCELLED ||
                           s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED;
      if (!allowed || (s.ok() && (!finished || tokens != max_tokens))) {
        wrong.push_back(absl::StrCat("request ", i, " kind ", kind, ": code ", s.error_code(), " '",
                                     s.error_message(), "', ", tokens, "/", max_tokens, " tokens"));
      }
    }
  };
  const auto start = Clock::now();
  std::vector<std::thread> threads;
  for (int c = 0; c < clients; ++c) threads.emplace_back(client, c);
  for (auto& t : threads) t.join();
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  for (size_t i = 0; i < wrong.size() && i < 10; ++i) ADD_FAILURE() << wrong[i];
  EXPECT_TRUE(wrong.empty()) << wrong.size() << " requests ended wrongly";
  fleet.ExpectIdle();
  const auto& gw = *fleet.gateway;
  std::printf(
      "soak: %lld requests from %d clients in %.1f s: %lld OK, %lld CANCELLED, %lld "
      "DEADLINE_EXCEEDED; cancel-to-free p99 <= %g s over %g cancels\n",
      static_cast<long long>(total), clients, seconds,
      static_cast<long long>(codes[grpc::StatusCode::OK]),
      static_cast<long long>(codes[grpc::StatusCode::CANCELLED]),
      static_cast<long long>(codes[grpc::StatusCode::DEADLINE_EXCEEDED]),
      QuantileBound(gw, "walsh_gateway_cancel_to_free_seconds", 0.99),
      gw.Metric("walsh_gateway_cancel_to_free_seconds_count").value_or(0));
  EXPECT_GT(codes[grpc::StatusCode::CANCELLED], 0);
  EXPECT_GT(codes[grpc::StatusCode::DEADLINE_EXCEEDED], 0);
  EXPECT_LE(QuantileBound(gw, "walsh_gateway_cancel_to_free_seconds", 0.99), 1.0);
}

// Many concurrent streams, each client starting its next request as the last ends, for a
// while: every stream ends OK with all its tokens, and resident memory of the gateway and
// both workers stays flat after warm-up.
TEST(Soak, ManyStreamsKeepMemoryFlat) {
  const int64_t streams = EnvInt("WALSH_SOAK_STREAMS", 200);
  const int64_t seconds = EnvInt("WALSH_SOAK_SECONDS", 20);
  Fleet fleet(streams);
  ASSERT_TRUE(fleet.ok());
  std::atomic<bool> stop{false};
  std::atomic<int64_t> done{0};
  std::mutex mu;
  std::vector<std::string> wrong;
  auto stubs = testing::Connections(fleet.gateway->target(), 8);
  // A client thread per 8 streams, each keeping its streams going with the async API.
  auto client = [&](int id, int n) {
    grpc::CompletionQueue cq;
    struct Slot {
      std::unique_ptr<grpc::ClientContext> ctx;
      std::unique_ptr<grpc::ClientAsyncReader<v1::GenerateResponse>> reader;
      v1::GenerateResponse resp;
      grpc::Status status;
      uint32_t tokens = 0, max_tokens = 0;
      int64_t seq = 0;
    };
    std::vector<Slot> slots(n);
    std::mt19937_64 rng(id);
    auto start = [&](size_t k) {
      Slot& s = slots[k];
      s.reader.reset();  // it lives in the old call's arena, which the old context owns
      s.ctx = std::make_unique<grpc::ClientContext>();
      s.tokens = 0;
      s.max_tokens = 8 + rng() % 56;
      s.reader = stubs[(id + k) % stubs.size()]->PrepareAsyncGenerate(
          s.ctx.get(), Request(s.max_tokens, rng()), &cq);
      s.reader->StartCall(reinterpret_cast<void*>(k * 4 + 0));
    };
    int open = n;
    for (int k = 0; k < n; ++k) start(k);
    void* tag;
    bool ok;
    while (open > 0 && cq.Next(&tag, &ok)) {
      const size_t k = reinterpret_cast<uintptr_t>(tag) / 4,
                   kind = reinterpret_cast<uintptr_t>(tag) % 4;
      Slot& s = slots[k];
      if (kind != 2 && ok) {  // started or read: read on
        if (kind == 1) s.tokens += s.resp.tokens().tokens_size();
        s.reader->Read(&s.resp, reinterpret_cast<void*>(k * 4 + 1));
      } else if (kind != 2) {  // no more to read
        s.reader->Finish(&s.status, reinterpret_cast<void*>(k * 4 + 2));
      } else {
        if (!s.status.ok() || s.tokens != s.max_tokens) {
          std::lock_guard<std::mutex> l(mu);
          wrong.push_back(absl::StrCat("code ", s.status.error_code(), " '",
                                       s.status.error_message(), "' ", s.tokens, "/",
                                       s.max_tokens));
        }
        ++done;
        if (stop) {
          --open;
        } else {
          start(k);
        }
      }
    }
  };
  std::vector<std::thread> threads;
  for (int64_t first = 0, id = 0; first < streams; first += 8, ++id) {
    threads.emplace_back(client, static_cast<int>(id),
                         static_cast<int>(std::min<int64_t>(8, streams - first)));
  }
  const auto pids = fleet.pids();
  auto rss = [&] {
    std::vector<int64_t> r;
    for (pid_t p : pids) r.push_back(testing::ResidentBytes(p));
    return r;
  };
  std::this_thread::sleep_for(std::chrono::seconds(seconds / 4));
  const std::vector<int64_t> warm = rss();
  const int64_t done_warm = done.load();
  std::this_thread::sleep_for(std::chrono::seconds(seconds - seconds / 4));
  const std::vector<int64_t> end = rss();
  stop = true;
  for (auto& t : threads) t.join();
  for (size_t i = 0; i < wrong.size() && i < 10; ++i) ADD_FAILURE() << wrong[i];
  EXPECT_TRUE(wrong.empty()) << wrong.size() << " streams ended wrongly (gateway "
                             << fleet.gateway->target() << ", workers " << fleet.a->target()
                             << " and " << fleet.b->target() << ")";
  const char* names[] = {"gateway", "worker a", "worker b"};
  for (size_t i = 0; i < pids.size(); ++i) {
    std::printf("soak: %s resident %.1f MiB after warm-up, %.1f MiB at the end\n", names[i],
                warm[i] / 1048576.0, end[i] / 1048576.0);
    if (kMemoryIsMeaningful) {
      EXPECT_LE(end[i], warm[i] + warm[i] / 5 + (16 << 20)) << names[i];
    }
  }
  std::printf(
      "soak: %lld streams kept open for %lld s: %lld streams completed (%lld after "
      "warm-up)\n",
      static_cast<long long>(streams), static_cast<long long>(seconds),
      static_cast<long long>(done.load()), static_cast<long long>(done.load() - done_warm));
  fleet.ExpectIdle();
}

// Streams on one connection whose client never reads: each fills its gateway buffer, is held,
// and is cancelled after the stall timeout, ending RESOURCE_EXHAUSTED naming the flag; the
// workers free every slot and page, and the gateway's memory stays bounded.
TEST(Soak, NeverReadStreamsAreCancelledAndFreed) {
  const int64_t streams = EnvInt("WALSH_SOAK_NEVER_READ", 200);
  Fleet fleet(streams, {"--max-buffered-bytes", "4096", "--stall-timeout-seconds", "2"});
  ASSERT_TRUE(fleet.ok());
  const int64_t before = testing::ResidentBytes(fleet.gateway->process().pid());
  std::vector<v1::GenerateRequest> requests;
  for (int64_t i = 0; i < streams; ++i) {
    v1::GenerateRequest r = Request(3000, static_cast<uint64_t>(i));
    r.set_logprobs(20);
    requests.push_back(r);
  }
  std::vector<std::unique_ptr<v1::Generator::Stub>> one;
  one.push_back(testing::NonReadingStub(fleet.gateway->target()));
  testing::UnreadStreams unread(std::move(one), requests,
                                std::chrono::system_clock::now() + std::chrono::minutes(5));
  EXPECT_TRUE(
      fleet.gateway->WaitForMetric("walsh_gateway_requests_total{code=\"RESOURCE_EXHAUSTED\"}",
                                   static_cast<double>(streams), 120));
  const int64_t peak = testing::ResidentBytes(fleet.gateway->process().pid());
  fleet.ExpectIdle();
  std::map<grpc::StatusCode, int> codes = unread.Finish();
  EXPECT_EQ(codes[grpc::StatusCode::RESOURCE_EXHAUSTED], streams);
  std::printf(
      "soak: %lld never-read streams: gateway resident %.1f MiB before, %.1f MiB with "
      "all of them cancelled\n",
      static_cast<long long>(streams), before / 1048576.0, peak / 1048576.0);
  if (kMemoryIsMeaningful) {
    EXPECT_LE(peak, before + (64 << 20));
  }
}

}  // namespace
}  // namespace walsh
