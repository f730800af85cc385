// The walsh.v1 Generator and Worker services of a worker, on gRPC's callback API: one write
// reactor per stream with at most one write in flight; nothing blocks inside a reaction.
#ifndef WALSH_WORKER_SERVER_SERVICES_H_
#define WALSH_WORKER_SERVER_SERVICES_H_

#include <atomic>
#include <string>

#include "common/metrics.h"
#include "common/stream_writer.h"
#include "walsh/v1/generator.grpc.pb.h"
#include "worker/model/tokenizer.h"
#include "worker/server/prepare_pool.h"
#include "worker/server/request_validation.h"
#include "worker/server/scheduler.h"

namespace walsh {

struct ServiceContext {
  std::atomic<bool> ready{false};  // false while loading: calls answer UNAVAILABLE
  Scheduler* scheduler = nullptr;
  const Tokenizer* tokenizer = nullptr;  // may be null
  ValidationLimits limits;
  v1::ModelInfo model_info;
  std::atomic<uint64_t> next_request{1};
  // What one stream may hold while its client does not read (when full, the scheduler stops
  // decoding it), its stall timeout, and the process's total, which refuses new streams.
  StreamBufferLimits stream_buffers;
  Counter* stalled_streams = nullptr;  // cancelled for not reading (may be null)
  // Where Generate and Resume tokenize and compile their constraint (null: on the gRPC thread).
  PreparePool* prepare = nullptr;
  // Requests that carry images are prepared here instead (null: on `prepare`), so decoding
  // never holds up tokenizing.
  PreparePool* prepare_images = nullptr;
};

// Generate, Tokenize and Resume take raw bytes and parse them with ParseRequest
// (common/raw_messages.h), so a request that does not parse gets INVALID_ARGUMENT naming the
// field (those three carry free text).
class GeneratorService final
    : public v1::Generator::WithRawCallbackMethod_Generate<
          v1::Generator::WithRawCallbackMethod_Tokenize<v1::Generator::CallbackService>> {
 public:
  explicit GeneratorService(ServiceContext* ctx) : ctx_(ctx) {}

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
  ServiceContext* ctx_;
};

class WorkerService final
    : public v1::Worker::WithRawCallbackMethod_Resume<v1::Worker::CallbackService> {
 public:
  explicit WorkerService(ServiceContext* ctx) : ctx_(ctx) {}

  grpc::ServerUnaryReactor* GetLoad(grpc::CallbackServerContext* context,
                                    const v1::GetLoadRequest* request, v1::Load* response) override;
  grpc::ServerWriteReactor<grpc::ByteBuffer>* Resume(grpc::CallbackServerContext* context,
                                                     const grpc::ByteBuffer* request) override;

 private:
  ServiceContext* ctx_;
};

// Starts a generation stream; shared by Generate and Resume.
grpc::ServerWriteReactor<grpc::ByteBuffer>* StartGeneration(
    ServiceContext* ctx, grpc::CallbackServerContext* context, const v1::GenerateRequest& request,
    const std::vector<int32_t>* prompt_ids, const std::vector<int32_t>* emitted_ids);

}  // namespace walsh

#endif  // WALSH_WORKER_SERVER_SERVICES_H_
