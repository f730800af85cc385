#include "tests/integration/mute_worker.h"

#include "grpcpp/health_check_service_interface.h"

namespace walsh::testing {
namespace {

// Holds a stream open, writing nothing, until its caller cancels it (or its deadline passes).
class HeldStream final : public grpc::ServerWriteReactor<v1::GenerateResponse> {
 public:
  HeldStream(std::atomic<int>* open, std::atomic<int>* taken) : open_(open) {
    ++*open_;
    ++*taken;
  }
  void OnCancel() override { Finish(grpc::Status::CANCELLED); }
  void OnDone() override {
    --*open_;
    delete this;
  }

 private:
  std::atomic<int>* open_;
};

}  // namespace

class MuteWorker::Generator final : public v1::Generator::CallbackService {
 public:
  Generator(std::string fingerprint, std::atomic<int>* open, std::atomic<int>* taken)
      : fingerprint_(std::move(fingerprint)), open_(open), taken_(taken) {}
  grpc::ServerWriteReactor<v1::GenerateResponse>* Generate(grpc::CallbackServerContext*,
                                                           const v1::GenerateRequest*) override {
    return new HeldStream(open_, taken_);
  }
  grpc::ServerUnaryReactor* GetModelInfo(grpc::CallbackServerContext* context,
                                         const v1::GetModelInfoRequest*,
                                         v1::ModelInfo* info) override {
    info->set_contract_fingerprint(fingerprint_);
    auto* r = context->DefaultReactor();
    r->Finish(grpc::Status::OK);
    return r;
  }

 private:
  const std::string fingerprint_;
  std::atomic<int>*open_, *taken_;
};

class MuteWorker::Worker final : public v1::Worker::CallbackService {
 public:
  Worker(std::atomic<int>* open, std::atomic<int>* taken) : open_(open), taken_(taken) {}
  grpc::ServerUnaryReactor* GetLoad(grpc::CallbackServerContext* context, const v1::GetLoadRequest*,
                                    v1::Load*) override {
    auto* r = context->DefaultReactor();
    r->Finish(grpc::Status::OK);
    return r;
  }
  grpc::ServerWriteReactor<v1::GenerateResponse>* Resume(grpc::CallbackServerContext*,
                                                         const v1::ResumeRequest*) override {
    return new HeldStream(open_, taken_);
  }

 private:
  std::atomic<int>*open_, *taken_;
};

MuteWorker::MuteWorker(std::string fingerprint)
    : generator_(std::make_unique<Generator>(std::move(fingerprint), &open_, &taken_)),
      worker_(std::make_unique<Worker>(&open_, &taken_)) {
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
  builder.RegisterService(generator_.get());
  builder.RegisterService(worker_.get());
  server_ = builder.BuildAndStart();
}

MuteWorker::~MuteWorker() {
  server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  server_->Wait();
}

}  // namespace walsh::testing
