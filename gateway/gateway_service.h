// The gateway's public walsh.v1.Generator. Every Generate stream is a ProxiedStream
// (gateway/proxied_stream.h) driven by gRPC callbacks, so open streams cost no threads; this
// class admits them (at most --max-inflight at once, then a bounded FIFO queue), keeps the
// registry that draining and shutdown walk, and forwards the unary calls to any worker.
#ifndef WALSH_GATEWAY_GATEWAY_SERVICE_H_
#define WALSH_GATEWAY_GATEWAY_SERVICE_H_

#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <unordered_map>

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
  int64_t inflight();
  // Ends every stream still open, UNAVAILABLE (the end of the drain grace period).
  void CancelAll();

  grpc::ServerWriteReactor<grpc::ByteBuffer>* Generate(grpc::CallbackServerContext* context,
                                                       const grpc::ByteBuffer* request) override;
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

  void OnClientGone(ProxiedStream* stream);
  void OnEnded(ProxiedStream* stream);
  void UpdateGaugesLocked();
  // Authorization, then the client's rate limit (a stream also takes one of its slots).
  grpc::Status Admit(grpc::CallbackServerContext* context, std::shared_ptr<void>* stream_slot);
  grpc::Status Authorize(grpc::CallbackServerContext* context) const;
  std::shared_ptr<WorkerEndpoint> PickAny();

  WorkerPool* pool_;
  std::unique_ptr<RoutingPolicy> fallback_;
  GatewayMetrics* metrics_;
  const GatewayOptions options_;
  const ProxiedStream::Env env_;
  std::atomic<bool> draining_{false};

  std::mutex mu_;
  std::condition_variable all_ended_;
  std::unordered_map<ProxiedStream*, Entry> live_;  // every stream not yet ended
  std::deque<ProxiedStream*> waiting_;              // not admitted yet, oldest first
  int64_t inflight_ = 0;                            // admitted
};

}  // namespace walsh

#endif  // WALSH_GATEWAY_GATEWAY_SERVICE_H_
