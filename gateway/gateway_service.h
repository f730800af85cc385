// The gateway's public walsh.v1.Generator. Every Generate stream is a ProxiedStream
// (gateway/proxied_stream.h) driven by gRPC callbacks, so open streams cost no threads; this
// class admits them (at most --max-inflight at once, then a bounded FIFO queue), keeps the
// registry that draining and shutdown walk, and forwards the unary calls to any worker.
#ifndef WALSH_GATEWAY_GATEWAY_SERVICE_H_
#define WALSH_GATEWAY_GATEWAY_SERVICE_H_

#include <atomic>
#include <deque>
#include <memory>
#include <unordered_map>

#include "absl/base/thread_annotations.h"
#include "common/mutex.h"
#include "gateway/gateway_metrics.h"
#include "gateway/gateway_options.h"
#include "gateway/proxied_stream.h"
#include "gateway/routing/routing_policy.h"
#include "gateway/worker_pool.h"
#include "walsh/v1/generator.grpc.pb.h"

namespace walsh {

// Generate and Tokenize take raw bytes and parse them with ParseRequest (common/raw_messages.h),
// so a request that does not parse gets INVALID_ARGUMENT naming the field.
class GatewayService final
    : public v1::Generator::WithRawCallbackMethod_Generate<
          v1::Generator::WithRawCallbackMethod_Tokenize<v1::Generator::CallbackService>> {
 public:
  GatewayService(WorkerPool* pool, RoutingPolicy* policy, GatewayMetrics* metrics,
                 GatewayOptions options);
  ~GatewayService() override;  // waits until every stream has ended

  void StartDraining() { draining_ = true; }
  // Streams being served or waiting for a slot (draining waits for both).
  int64_t inflight() ABSL_LOCKS_EXCLUDED(mu_);
  // Ends every stream still open, UNAVAILABLE (the end of the drain grace period).
  void CancelAll() ABSL_LOCKS_EXCLUDED(mu_);

  grpc::ServerWriteReactor<grpc::ByteBuffer>* Generate(grpc::CallbackServerContext* context,
                                                       const grpc::ByteBuffer* request) override
      ABSL_LOCKS_EXCLUDED(mu_);
  grpc::ServerUnaryReactor* Tokenize(grpc::CallbackServerContext* context,
                                     const grpc::ByteBuffer* request,
                                     grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* Detokenize(grpc::CallbackServerContext* context,
                                       const v1::DetokenizeRequest* request,
                                       v1::DetokenizeResponse* response) override;
  grpc::ServerUnaryReactor* GetModelInfo(grpc::CallbackServerContext* context,
                                         const v1::GetModelInfoRequest* request,
                                         v1::ModelInfo* response) override;

 private:
  struct Entry {
    std::shared_ptr<ProxiedStream> stream;
    bool admitted;
  };

  void OnClientGone(ProxiedStream* stream) ABSL_LOCKS_EXCLUDED(mu_);
  void OnEnded(ProxiedStream* stream) ABSL_LOCKS_EXCLUDED(mu_);
  void UpdateGaugesLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Authorization, then the client's limits: a rate token for Generate (with a stream slot,
  // which `stream_slot` receives) and for Tokenize and Detokenize; none for GetModelInfo
  // (`rate` false), which the HTTP API calls beside every request.
  absl::Status Admit(grpc::CallbackServerContext* context, std::shared_ptr<void>* stream_slot,
                     bool rate = true);
  absl::Status Authorize(grpc::CallbackServerContext* context) const;
  std::shared_ptr<WorkerEndpoint> PickAny();

  WorkerPool* pool_;
  std::unique_ptr<RoutingPolicy> fallback_;
  GatewayMetrics* metrics_;
  const GatewayOptions options_;
  const ProxiedStream::Env env_;
  std::atomic<bool> draining_{false};

  Mutex mu_;
  CondVar all_ended_;
  // Every stream not yet ended.
  std::unordered_map<ProxiedStream*, Entry> live_ ABSL_GUARDED_BY(mu_);
  std::deque<ProxiedStream*> waiting_ ABSL_GUARDED_BY(mu_);  // not admitted yet, oldest first
  int64_t inflight_ ABSL_GUARDED_BY(mu_) = 0;                // admitted
};

}  // namespace walsh

#endif  // WALSH_GATEWAY_GATEWAY_SERVICE_H_
