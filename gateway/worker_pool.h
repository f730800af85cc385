// The gateway's view of its workers: discovered from a static list and/or a DNS name (a
// Kubernetes headless service, re-resolved periodically), health-checked (grpc.health.v1) and
// load-polled (Worker.GetLoad) by one background thread. A worker takes traffic only while it
// is SERVING, its breaker allows it, and its contract fingerprint equals the pool's (the first
// worker seen, or --expected-fingerprint): a mixed fleet never serves.
//
// Threading: Candidates() and the per-worker counters may be used from any thread; the
// polling thread is the only writer of health, load and membership.
#ifndef WALSH_GATEWAY_WORKER_POOL_H_
#define WALSH_GATEWAY_WORKER_POOL_H_

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "common/mutex.h"
#include "gateway/circuit_breaker.h"
#include "gateway/routing/prefix_key.h"
#include "grpcpp/grpcpp.h"
#include "walsh/v1/generator.grpc.pb.h"

namespace walsh {

// How the gateway's channels reach workers.
struct WorkerChannelOptions {
  // Plaintext when null (common/tls_credentials.h for TLS).
  std::shared_ptr<grpc::ChannelCredentials> credentials;
  // With TLS: the name the workers' certificates must carry (empty: the address dialed). Workers
  // found through DNS are dialed by IP address; their certificate names the service.
  std::string tls_server_name;
  // While calls are open, ping the worker this often (0: never) and fail them UNAVAILABLE when a
  // ping goes unanswered as long: a worker that hangs (a stopped process, a partitioned host)
  // loses its streams to migration. Workers accept pings one second apart.
  std::chrono::milliseconds keepalive{10000};
};

struct WorkerEndpoint {
  WorkerEndpoint(std::string address, const WorkerChannelOptions& options,
                 const BreakerOptions& breaker_options = {});

  const std::string address;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1::Generator::Stub> generator;
  std::unique_ptr<v1::Worker::Stub> worker;
  // The poll's calls (health, model info, load) on a connection of their own: never queued
  // behind megabytes of requests on the streams' connection (HTTP/2 shares one TCP stream).
  std::shared_ptr<grpc::Channel> check_channel;
  std::unique_ptr<v1::Generator::Stub> check_generator;
  std::unique_ptr<v1::Worker::Stub> check_worker;
  CircuitBreaker breaker;
  std::atomic<int64_t> outstanding{0};          // streams the gateway has open to it
  std::atomic<bool> serving{false};             // last health check said SERVING
  std::atomic<bool> refused{false};             // its fingerprint differs from the pool's
  std::atomic<bool> known{false};               // fingerprint checked
  std::atomic<int64_t> waiting{0}, running{0};  // from GetLoad
  std::atomic<int64_t> affinity_window{0};      // from ModelInfo (0: unknown or refused)
  std::string check_error;  // the last failed health check's error, logged once (polling thread)
  std::atomic<int64_t> missed_checks{0};  // health checks timed out in a row

  bool Routable() { return serving && known && !refused; }
};

struct WorkerPoolOptions {
  std::vector<std::string> static_workers;  // host:port
  std::string dns;                          // name:port, re-resolved every dns_interval
  std::string expected_fingerprint;         // empty: the first worker's
  std::chrono::milliseconds poll_interval{250};
  // Deadline of each poll's health check, GetModelInfo and GetLoad.
  std::chrono::milliseconds check_timeout{500};
  // Health checks timed out in a row before a serving worker leaves routing: one slow answer
  // from a loaded worker is not a failure. A host gone without a reset times out too, so it
  // leaves after check_misses polls. A NOT_SERVING answer or a refused connection takes it out
  // at once.
  int64_t check_misses = 3;
  std::chrono::milliseconds dns_interval{2000};
  WorkerChannelOptions channel;
  BreakerOptions breaker;  // each worker's
};

class WorkerPool {
 public:
  explicit WorkerPool(WorkerPoolOptions options);
  ~WorkerPool();

  // Workers that may take a call now, in a stable order (by address).
  std::vector<std::shared_ptr<WorkerEndpoint>> Candidates() ABSL_LOCKS_EXCLUDED(mu_);
  std::vector<std::shared_ptr<WorkerEndpoint>> All() ABSL_LOCKS_EXCLUDED(mu_);
  std::string fingerprint() const ABSL_LOCKS_EXCLUDED(mu_);
  // The prefix-affinity window in tokens (routing/prefix_key.h), from the workers' ModelInfo.
  int64_t affinity_window() const { return affinity_window_.load(std::memory_order_relaxed); }
  // Blocks until some worker is routable or the timeout passes.
  bool WaitForAny(std::chrono::milliseconds timeout) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void Loop() ABSL_LOCKS_EXCLUDED(mu_);
  void Resolve() ABSL_LOCKS_EXCLUDED(mu_);
  void Poll(WorkerEndpoint& w) ABSL_LOCKS_EXCLUDED(mu_);

  WorkerPoolOptions options_;
  mutable Mutex mu_;
  CondVar cv_;
  std::map<std::string, std::shared_ptr<WorkerEndpoint>> workers_ ABSL_GUARDED_BY(mu_);
  std::string fingerprint_ ABSL_GUARDED_BY(mu_);
  std::atomic<int64_t> affinity_window_{kDefaultAffinityWindow};
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  // Not guarded: only the polling thread (Loop) reads and writes it.
  std::chrono::steady_clock::time_point last_dns_{};
  std::thread thread_;
};

}  // namespace walsh

#endif  // WALSH_GATEWAY_WORKER_POOL_H_
