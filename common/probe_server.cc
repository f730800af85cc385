#include "common/probe_server.h"

#include "absl/strings/str_cat.h"
#include "grpc/health/v1/health.grpc.pb.h"

namespace walsh {

class ProbeServer::Health final : public grpc::health::v1::Health::CallbackService {
 public:
  explicit Health(std::shared_ptr<grpc::Channel> main)
      : main_(grpc::health::v1::Health::NewStub(std::move(main))) {}

  grpc::ServerUnaryReactor* Check(grpc::CallbackServerContext* context,
                                  const grpc::health::v1::HealthCheckRequest* request,
                                  grpc::health::v1::HealthCheckResponse* response) override {
    grpc::ServerUnaryReactor* r = context->DefaultReactor();
    auto* upstream = new grpc::ClientContext();
    upstream->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    main_->async()->Check(upstream, request, response, [r, upstream](grpc::Status s) {
      delete upstream;
      r->Finish(s);
    });
    return r;
  }

 private:
  std::unique_ptr<grpc::health::v1::Health::Stub> main_;
};

absl::StatusOr<std::unique_ptr<ProbeServer>> ProbeServer::Start(const std::string& listen,
                                                                grpc::Server* main) {
  std::unique_ptr<ProbeServer> probe(new ProbeServer());
  probe->health_ = std::make_unique<Health>(main->InProcessChannel(grpc::ChannelArguments()));
  grpc::ServerBuilder builder;
  builder.AddListeningPort(listen, grpc::InsecureServerCredentials(), &probe->port_);
  builder.RegisterService(probe->health_.get());
  probe->server_ = builder.BuildAndStart();
  if (probe->server_ == nullptr || probe->port_ == 0) {
    return absl::UnavailableError(absl::StrCat("--probe-listen: cannot listen on ", listen));
  }
  return probe;
}

ProbeServer::~ProbeServer() {
  if (server_ != nullptr) server_->Shutdown(std::chrono::system_clock::now());
}

}  // namespace walsh
