#include "tests/integration/worker_fixture.h"

#include <chrono>
#include <thread>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/integration/gateway_fixture.h"
#include "tests/util/eventually.h"
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

WorkerProcess::WorkerProcess(std::vector<std::string> extra_args)
    : WorkerProcess(WALSH_WORKER_BIN, std::move(extra_args)) {}

std::vector<std::string> WorkerArgs(const std::string& binary,
                                    const std::vector<std::string>& extra_args) {
  std::vector<std::string> argv = {binary,        "--model",          TinyModelPath(), "--listen",
                                   "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0"};
  argv.insert(argv.end(), extra_args.begin(), extra_args.end());
  return argv;
}

void WorkerClient::Listening(int grpc_port, int metrics_port) {
  grpc_port_ = grpc_port;
  metrics_port_ = metrics_port;
  channel_ = grpc::CreateChannel(target(), grpc::InsecureChannelCredentials());
}

WorkerProcess::WorkerProcess(const std::string& binary, std::vector<std::string> extra_args) {
  process_ = std::make_unique<ChildProcess>(WorkerArgs(binary, extra_args));
  const auto listening = process_->WaitForStderrLine(
      [](const std::string& l) { return l.find("\"event\":\"listening\"") != std::string::npos; },
      std::chrono::seconds(20));
  if (!listening) return;
  const nlohmann::json j = nlohmann::json::parse(*listening);
  Listening(j["grpc_port"], j["metrics_port"]);
  set_serving(process_
                  ->WaitForStderrLine(
                      [](const std::string& l) {
                        return l.find("\"event\":\"serving\"") != std::string::npos;
                      },
                      std::chrono::seconds(30))
                  .has_value());
}

std::unique_ptr<v1::Generator::Stub> WorkerClient::Generator() const {
  return v1::Generator::NewStub(channel_);
}
std::unique_ptr<v1::Worker::Stub> WorkerClient::Worker() const {
  return v1::Worker::NewStub(channel_);
}
std::unique_ptr<grpc::health::v1::Health::Stub> WorkerClient::Health() const {
  return grpc::health::v1::Health::NewStub(channel_);
}

std::optional<double> WorkerClient::Metric(const std::string& series) const {
  return MetricIn(HttpGet(metrics_port_, "/metrics"), series);
}

bool WorkerClient::WaitForMetric(const std::string& series, double value, int seconds) const {
  return Eventually([&] { return Metric(series) == value; }, std::chrono::seconds(seconds),
                    std::chrono::milliseconds(50));
}

bool WorkerClient::WaitForMetricAtLeast(const std::string& series, double value,
                                        int seconds) const {
  return Eventually([&] { return Metric(series).value_or(value - 1) >= value; },
                    std::chrono::seconds(seconds));
}

v1::GenerateRequest TextRequest(const std::string& text, uint32_t max_tokens, float temperature,
                                uint64_t seed, uint32_t logprobs) {
  v1::GenerateRequest r;
  r.set_text(text);
  r.mutable_stopping()->set_max_tokens(max_tokens);
  r.mutable_stopping()->set_ignore_eos(true);
  r.mutable_sampling()->set_temperature(temperature);
  r.mutable_sampling()->set_seed(seed);
  r.set_logprobs(logprobs);
  return r;
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

std::unique_ptr<v1::Generator::Stub> NonReadingStub(const std::string& target) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_HTTP2_BDP_PROBE, 0);
  return v1::Generator::NewStub(ConnectedChannel(target, args));
}

std::shared_ptr<grpc::Channel> ConnectedChannel(const std::string& target,
                                                const grpc::ChannelArguments& args) {
  auto channel = grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args);
  channel->WaitForConnected(std::chrono::system_clock::now() + std::chrono::seconds(20));
  return channel;
}

bool WaitForRunning(v1::Worker::Stub& worker, uint32_t running) {
  return Eventually(
      [&] {
        grpc::ClientContext ctx;
        ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(1));
        v1::Load load;
        return worker.GetLoad(&ctx, {}, &load).ok() && load.running() >= running;
      },
      std::chrono::seconds(10), std::chrono::milliseconds(10));
}

v1::Load WaitForIdle(v1::Worker::Stub& worker) {
  v1::Load load;
  Eventually(
      [&] {
        grpc::ClientContext ctx;
        return worker.GetLoad(&ctx, {}, &load).ok() && load.running() == 0 && load.waiting() == 0 &&
               load.kv_pages_used() == 0 && load.state_slots_used() == 0;
      },
      std::chrono::seconds(10), std::chrono::milliseconds(50));
  return load;
}

void ExpectNonUtf8StringsRefused(v1::Generator::Stub& stub) {
  v1::GenerateRequest text;
  text.set_text("ok \xff\xfe");
  grpc::Status s = RunGenerate(stub, text).status;
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(s.error_message(), "text: not valid UTF-8");
  v1::GenerateRequest chat;
  auto* m = chat.mutable_chat()->add_messages();
  m->set_role("user");
  m->set_content("caf\xc3");
  s = RunGenerate(stub, chat).status;
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(s.error_message(), "chat.messages.content: not valid UTF-8");
  text.set_text("ok");
  text.mutable_stopping()->set_max_tokens(2);
  EXPECT_TRUE(RunGenerate(stub, text).status.ok());

  v1::TokenizeRequest tokenize;
  v1::TokenizeResponse ids;
  tokenize.set_text("\xc0\x80 overlong");
  grpc::ClientContext bad;
  s = stub.Tokenize(&bad, tokenize, &ids);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(s.error_message(), "text: not valid UTF-8");
  tokenize.set_text("ok");
  grpc::ClientContext good;
  EXPECT_TRUE(stub.Tokenize(&good, tokenize, &ids).ok());
  EXPECT_GT(ids.ids_size(), 0);
}

}  // namespace walsh::testing
