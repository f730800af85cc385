// One client's Generate stream proxied to workers with no thread of its own: a state machine
// that gRPC callbacks drive. Each step ends the stream, starts one upstream call (a callback
// reader of Generate, or of Worker.Resume), or sets one alarm (a retry's backoff, a wait for a
// worker to appear); only one of those is ever pending, so steps never overlap.
//
// Before the first token a failed call is retried on another worker; after it the stream
// migrates exactly: it resumes on another worker at the next output index with the same seed,
// so the client sees one uninterrupted stream of the tokens it would have got anyway.
#ifndef WALSH_GATEWAY_PROXIED_STREAM_H_
#define WALSH_GATEWAY_PROXIED_STREAM_H_

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "common/grpc_status.h"
#include "common/mutex.h"
#include "common/stream_writer.h"
#include "gateway/gateway_metrics.h"
#include "gateway/gateway_options.h"
#include "gateway/routing/routing_policy.h"
#include "gateway/worker_pool.h"
#include "grpcpp/alarm.h"
#include "walsh/v1/generator.grpc.pb.h"

namespace walsh {

class ProxiedStream : public std::enable_shared_from_this<ProxiedStream> {
 public:
  // What every stream of one gateway shares; it outlives the streams.
  struct Env {
    WorkerPool* pool;
    RoutingPolicy* policy;
    RoutingPolicy* fallback;  // when the policy declines to choose
    GatewayMetrics* metrics;
    const GatewayOptions* options;
  };
  struct Hooks {
    // The client went away or stopped reading (at most once, on a gRPC thread).
    std::function<void(ProxiedStream*)> client_gone;
    // The stream gives back its place, before its client sees the end; then nothing of the
    // stream touches the gateway again.
    std::function<void(ProxiedStream*)> ended;
  };

  static std::shared_ptr<ProxiedStream> Create(const Env& env, grpc::CallbackServerContext* context,
                                               v1::GenerateRequest request,
                                               std::shared_ptr<void> client_slot, Hooks hooks);

  grpc::ServerWriteReactor<grpc::ByteBuffer>* reactor() { return writer_.get(); }
  // Admitted: the first step.
  void Start() ABSL_LOCKS_EXCLUDED(mu_) { Step(); }
  // Ends the stream with `why` once what is pending returns (at once if nothing is).
  void Interrupt(const grpc::Status& why) ABSL_LOCKS_EXCLUDED(mu_);
  // Ends a stream that never started (cancelled or refused while it waited for admission).
  void EndUnstarted(const grpc::Status& why) ABSL_LOCKS_EXCLUDED(mu_) { End(why); }
  grpc::Status ClientGoneStatus() { return ToGrpcStatus(writer_->CancelledStatus()); }

 private:
  class UpstreamCall;
  using Clock = std::chrono::steady_clock;

  ProxiedStream(const Env& env, v1::GenerateRequest request,
                std::chrono::system_clock::time_point deadline, std::string session,
                std::shared_ptr<void> client_slot, Hooks hooks);

  void Step() ABSL_LOCKS_EXCLUDED(mu_);
  void StartCall(std::shared_ptr<WorkerEndpoint> w) ABSL_LOCKS_EXCLUDED(mu_);
  // Passes a worker's response on; false when the client's buffer is full (common/stream_writer.h).
  bool OnResponse(v1::GenerateResponse& resp, const std::string& worker);
  // After OnResponse answered false: true if the upstream call must hold its next read until
  // OnClientWritable, false if the buffer drained meanwhile.
  bool HoldReads() ABSL_LOCKS_EXCLUDED(mu_);
  void OnClientWritable() ABSL_LOCKS_EXCLUDED(mu_);
  void OnCallDone(const std::shared_ptr<WorkerEndpoint>& w, const grpc::Status& s)
      ABSL_LOCKS_EXCLUDED(mu_);
  void Sleep(Clock::duration d) ABSL_LOCKS_EXCLUDED(mu_);
  void End(const grpc::Status& s) ABSL_LOCKS_EXCLUDED(mu_);
  std::optional<grpc::Status> Interruption() ABSL_LOCKS_EXCLUDED(mu_);

  const Env env_;
  v1::GenerateRequest request_;
  const std::chrono::system_clock::time_point deadline_;
  const std::string session_;
  std::shared_ptr<void> client_slot_;
  const Hooks hooks_;
  std::shared_ptr<StreamWriter> writer_;

  // Touched by steps only (one at a time).
  const Clock::time_point start_ = Clock::now();
  bool client_wants_prompt_ = false, started_ = false, finished_ = false;
  bool waiting_for_worker_ = false;
  RouteHint hint_;
  std::vector<int32_t> prompt_ids_, emitted_;
  uint64_t seed_ = 0;
  int retries_ = 0, migrations_ = 0, waits_ = 0, rounds_ = 0;
  Clock::time_point wait_until_{}, last_token_{};
  std::set<std::string> failed_;
  grpc::Status last_{grpc::StatusCode::UNAVAILABLE, "no worker available"};
  std::mt19937_64 rng_{std::random_device{}()};

  // Shared with Interrupt (any thread).
  Mutex mu_;
  std::optional<grpc::Status> interrupted_ ABSL_GUARDED_BY(mu_);
  std::optional<Clock::time_point> client_gone_at_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<UpstreamCall> call_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<grpc::Alarm> alarm_ ABSL_GUARDED_BY(mu_);
  bool ended_ ABSL_GUARDED_BY(mu_) = false;
  // Backpressure: the current call holds its next read; or the client's buffer drained before
  // the call could hold.
  bool reads_held_ ABSL_GUARDED_BY(mu_) = false;
  bool writable_owed_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace walsh

#endif  // WALSH_GATEWAY_PROXIED_STREAM_H_
