#include "tests/integration/worker_fixture.h"

#include <chrono>

#include "nlohmann/json.hpp"
#include "tools/mkmodel/synthetic_model.h"

namespace walsh::testing {

const std::string& TinyModelPath() {
  static TempDir* dir = new TempDir();
  static const std::string path = [] {
    const std::string p = dir->File("tiny.gguf");
    auto m = SyntheticModel::Create({.preset = "tiny"});
    if (!m.ok() || !(*m)->WritePacked(p).ok()) std::abort();
    return p;
  }();
  return path;
}

WorkerProcess::WorkerProcess(std::vector<std::string> extra_args) {
  std::vector<std::string> argv = {WALSH_WORKER_BIN, "--model",     TinyModelPath(),
                                   "--listen",       "127.0.0.1:0", "--metrics-listen",
                                   "127.0.0.1:0"};
  argv.insert(argv.end(), extra_args.begin(), extra_args.end());
  process_ = std::make_unique<ChildProcess>(argv);
  const auto listening = process_->WaitForStderrLine(
      [](const std::string& l) { return l.find("\"event\":\"listening\"") != std::string::npos; },
      std::chrono::seconds(20));
  if (!listening) return;
  const nlohmann::json j = nlohmann::json::parse(*listening);
  grpc_port_ = j["grpc_port"];
  metrics_port_ = j["metrics_port"];
  serving_ = process_
                 ->WaitForStderrLine(
                     [](const std::string& l) {
                       return l.find("\"event\":\"serving\"") != std::string::npos;
                     },
                     std::chrono::seconds(30))
                 .has_value();
  channel_ = grpc::CreateChannel(target(), grpc::InsecureChannelCredentials());
}

std::unique_ptr<v1::Generator::Stub> WorkerProcess::Generator() const {
  return v1::Generator::NewStub(channel_);
}
std::unique_ptr<v1::Worker::Stub> WorkerProcess::Worker() const {
  return v1::Worker::NewStub(channel_);
}
std::unique_ptr<grpc::health::v1::Health::Stub> WorkerProcess::Health() const {
  return grpc::health::v1::Health::NewStub(channel_);
}

StreamResult RunGenerate(v1::Generator::Stub& stub, const v1::GenerateRequest& request) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  StreamResult r;
  auto reader = stub.Generate(&ctx, request);
  v1::GenerateResponse resp;
  while (reader->Read(&resp)) {
    if (resp.has_started()) r.seed = resp.started().seed();
    if (resp.has_tokens()) {
      for (const auto& t : resp.tokens().tokens()) r.ids.push_back(t.id());
      r.text += resp.tokens().text();
      r.pieces.push_back(resp.tokens().text());
    }
    if (resp.has_finished()) r.finish_reason = resp.finished().reason();
  }
  r.status = reader->Finish();
  return r;
}

}  // namespace walsh::testing
