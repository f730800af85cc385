#include "tests/integration/gateway_fixture.h"

#include <algorithm>
#include <fstream>
#include <sstream>
#include <thread>

#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"
#include "tests/integration/worker_fixture.h"
#include "tests/util/eventually.h"

namespace walsh::testing {

GatewayProcess::GatewayProcess(std::vector<std::string> workers, std::vector<std::string> extra) {
  std::vector<std::string> argv = {WALSH_GATEWAY_BIN,           "--listen",           "127.0.0.1:0",
                                   "--metrics-listen",          "127.0.0.1:0",        "--workers",
                                   absl::StrJoin(workers, ","), "--poll-interval-ms", "100"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  process_ = std::make_unique<ChildProcess>(argv);
  auto line = process_->WaitForStderrLine(
      [](const std::string& l) { return l.find("\"event\":\"listening\"") != std::string::npos; },
      std::chrono::seconds(20));
  if (!line) return;
  const nlohmann::json j = nlohmann::json::parse(*line);
  port_ = j["grpc_port"];
  metrics_port_ = j["metrics_port"];
  // A TLS gateway's channel would never connect in the clear: the test makes its own.
  const std::string target = "127.0.0.1:" + std::to_string(port_);
  const bool tls = std::find(argv.begin(), argv.end(), "--tls-cert-file") != argv.end();
  channel_ = tls ? grpc::CreateChannel(target, grpc::InsecureChannelCredentials())
                 : ConnectedChannel(target);
}

bool GatewayProcess::WaitForWorkers(int n) {
  return Eventually(
      [&] {
        const std::string m = HttpGet(metrics_port_, "/metrics");
        int healthy = 0;
        for (size_t at = 0; (at = m.find("walsh_gateway_worker_healthy{", at)) != std::string::npos;
             ++at) {
          const size_t end = m.find('\n', at);
          healthy += m.substr(end - 2, 2) == " 1";
        }
        return healthy >= n;
      },
      std::chrono::seconds(10), std::chrono::milliseconds(50));
}

std::optional<double> GatewayProcess::Metric(const std::string& series) const {
  return MetricIn(HttpGet(metrics_port_, "/metrics"), series);
}

bool GatewayProcess::WaitForMetric(const std::string& series, double value, int seconds) const {
  return Eventually([&] { return Metric(series) == value; }, std::chrono::seconds(seconds),
                    std::chrono::milliseconds(50));
}

std::vector<std::unique_ptr<v1::Generator::Stub>> Connections(const std::string& target, int n,
                                                              bool reading) {
  std::vector<std::unique_ptr<v1::Generator::Stub>> stubs;
  for (int c = 0; c < n; ++c) {
    grpc::ChannelArguments args;
    args.SetInt("walsh.test.connection", c);  // channels with equal arguments share one
    if (!reading) {
      args.SetInt(GRPC_ARG_HTTP2_BDP_PROBE, 0);
      args.SetInt(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, 16 << 10);
    }
    stubs.push_back(v1::Generator::NewStub(ConnectedChannel(target, args)));
  }
  return stubs;
}

namespace {

enum Op : uintptr_t { kStarted = 0, kRead = 1, kFinished = 2 };
void* Tag(size_t i, Op op) { return reinterpret_cast<void*>(i * 4 + op); }

}  // namespace

UnreadStreams::UnreadStreams(std::vector<std::unique_ptr<v1::Generator::Stub>> stubs,
                             const std::vector<v1::GenerateRequest>& requests,
                             std::chrono::system_clock::time_point deadline)
    : stubs_(std::move(stubs)) {
  for (size_t i = 0; i < requests.size(); ++i) {
    calls_.push_back(std::make_unique<Call>());
    Call& call = *calls_.back();
    call.context.set_deadline(deadline);
    call.reader = stubs_[i % stubs_.size()]->PrepareAsyncGenerate(&call.context, requests[i], &cq_);
    call.reader->StartCall(Tag(i, kStarted));
  }
}

UnreadStreams::~UnreadStreams() {
  for (auto& c : calls_) c->context.TryCancel();
  cq_.Shutdown();
  void* tag;
  bool ok;
  while (cq_.Next(&tag, &ok)) {
  }
}

std::map<grpc::StatusCode, int> UnreadStreams::Finish() {
  // Read what is left (a status comes after the responses ahead of it), then the status.
  for (size_t i = 0; i < calls_.size(); ++i)
    calls_[i]->reader->Read(&calls_[i]->response, Tag(i, kRead));
  size_t finished = 0;
  void* tag;
  bool ok;
  while (finished < calls_.size() && cq_.Next(&tag, &ok)) {
    const size_t i = reinterpret_cast<uintptr_t>(tag) / 4;
    const auto op = static_cast<Op>(reinterpret_cast<uintptr_t>(tag) % 4);
    if (op == kRead && ok) {
      calls_[i]->reader->Read(&calls_[i]->response, Tag(i, kRead));
    } else if (op == kRead) {
      calls_[i]->reader->Finish(&calls_[i]->status, Tag(i, kFinished));
    } else if (op == kFinished) {
      ++finished;
    }
  }
  std::map<grpc::StatusCode, int> codes;
  for (const auto& c : calls_) ++codes[c->status.error_code()];
  return codes;
}

std::optional<double> MetricIn(const std::string& exposition, const std::string& series) {
  std::istringstream in(exposition);
  for (std::string line; std::getline(in, line);) {
    if (line.size() > series.size() && line.compare(0, series.size(), series) == 0 &&
        line[series.size()] == ' ') {
      return std::stod(line.substr(series.size() + 1));
    }
  }
  return std::nullopt;
}

namespace {

int64_t StatusField(pid_t pid, const std::string& field) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(field + ":", 0) == 0) return std::stoll(line.substr(field.size() + 1));
  }
  return -1;
}

}  // namespace

int64_t ResidentBytes(pid_t pid) { return StatusField(pid, "VmRSS") * 1024; }
int ThreadCount(pid_t pid) { return static_cast<int>(StatusField(pid, "Threads")); }

}  // namespace walsh::testing
