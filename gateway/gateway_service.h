// The gateway's public walsh.v1.Generator: every Generate stream is proxied to a worker by a
// thread of its own (blocking upstream reads never run inside a gRPC reaction), with retries
// before the first token and exact migration after it: a stream whose worker fails resumes on
// another worker at the next output index with the same seed (Worker.Resume), so the client
// sees one uninterrupted stream of the tokens it would have got anyway.
#ifndef WALSH_GATEWAY_GATEWAY_SERVICE_H_
#define WALSH_GATEWAY_GATEWAY_SERVICE_H_

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>

#include "gateway/api_keys.h"
#include "gateway/gateway_metrics.h"
#include "gateway/key_limiter.h"
#include "gateway/routing/routing_policy.h"
#include "gateway/worker_pool.h"
#include "walsh/v1/generator.grpc.pb.h"

namespace walsh {

struct GatewayOptions {
  int64_t max_inflight = 256;             // streams proxied at once
  int64_t max_queue = 256;                // streams waiting for a slot; beyond: RESOURCE_EXHAUSTED
  int64_t max_buffered_responses = 256;   // per stream, for a client that does not read
  int max_retries = 3;                    // before the first token
  int max_migrations = 5;                 // after it
  std::chrono::milliseconds backoff{25};  // base of the jittered exponential backoff
  const ApiKeys* api_keys = nullptr;      // if set and enabled: every call needs a key
  KeyLimiter* limiter = nullptr;          // if set: per-client stream and rate limits
};

// Generate takes raw bytes and parses them with ParseRequest (common/raw_messages.h), so a request
// that does not parse gets INVALID_ARGUMENT naming the field.
class GatewayService final
    : public v1::Generator::WithRawCallbackMethod_Generate<v1::Generator::CallbackService> {
 public:
  GatewayService(WorkerPool* pool, RoutingPolicy* policy, GatewayMetrics* metrics,
                 GatewayOptions options);
  ~GatewayService() override;  // waits for the proxy threads

  void StartDraining() { draining_ = true; }
  // Streams being served or waiting for a slot (draining waits for both).
  int64_t inflight() const { return inflight_.load() + queued_.load(); }
  // Cancels every stream still open (end of the drain grace period).
  void CancelAll();

  grpc::ServerWriteReactor<grpc::ByteBuffer>* Generate(grpc::CallbackServerContext* context,
                                                       const grpc::ByteBuffer* request) override;
  grpc::ServerUnaryReactor* Tokenize(grpc::CallbackServerContext* context,
                                     const v1::TokenizeRequest* request,
                                     v1::TokenizeResponse* response) override;
  grpc::ServerUnaryReactor* Detokenize(grpc::CallbackServerContext* context,
                                       const v1::DetokenizeRequest* request,
                                       v1::DetokenizeResponse* response) override;
  grpc::ServerUnaryReactor* GetModelInfo(grpc::CallbackServerContext* context,
                                         const v1::GetModelInfoRequest* request,
                                         v1::ModelInfo* response) override;

 private:
  class ClientStream;
  void Proxy(std::shared_ptr<ClientStream> client, v1::GenerateRequest request,
             std::chrono::system_clock::time_point deadline, std::string session,
             std::shared_ptr<void> client_slot);
  // Authorization, then the client's rate limit (a stream also takes one of its slots).
  grpc::Status Admit(grpc::CallbackServerContext* context, std::shared_ptr<void>* stream_slot);
  grpc::Status Authorize(grpc::CallbackServerContext* context) const;
  std::shared_ptr<WorkerEndpoint> PickAny();

  WorkerPool* pool_;
  RoutingPolicy* policy_;
  std::unique_ptr<RoutingPolicy> fallback_;
  GatewayMetrics* metrics_;
  GatewayOptions options_;
  std::atomic<bool> draining_{false};
  std::atomic<int64_t> inflight_{0}, queued_{0}, threads_{0};
  std::mutex mu_;
  std::condition_variable cv_;  // a slot freed / a thread ended
  std::atomic<uint64_t> cancel_epoch_{0};
};

}  // namespace walsh

#endif  // WALSH_GATEWAY_GATEWAY_SERVICE_H_
