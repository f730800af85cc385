// A real walsh-gateway process on loopback (ephemeral ports) in front of the given workers, and
// what tests read from its metrics.
#ifndef WALSH_TESTS_INTEGRATION_GATEWAY_FIXTURE_H_
#define WALSH_TESTS_INTEGRATION_GATEWAY_FIXTURE_H_

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "tests/util/child_process.h"
#include "walsh/v1/generator.grpc.pb.h"

namespace walsh::testing {

class GatewayProcess {
 public:
  explicit GatewayProcess(std::vector<std::string> workers, std::vector<std::string> extra = {});
  // Waits until the gateway routes to `n` workers.
  bool WaitForWorkers(int n);
  std::unique_ptr<v1::Generator::Stub> Stub() const { return v1::Generator::NewStub(channel_); }
  std::unique_ptr<grpc::health::v1::Health::Stub> Health() const {
    return grpc::health::v1::Health::NewStub(channel_);
  }
  std::string target() const { return "127.0.0.1:" + std::to_string(port_); }
  int metrics_port() const { return metrics_port_; }
  ChildProcess& process() { return *process_; }
  // The value of one series ("name" or "name{labels}") of its /metrics now, if exposed.
  std::optional<double> Metric(const std::string& series) const;
  // Polls until `series` equals `value` (about `seconds`); returns whether it did.
  bool WaitForMetric(const std::string& series, double value, int seconds = 10) const;

 private:
  std::unique_ptr<ChildProcess> process_;
  std::shared_ptr<grpc::Channel> channel_;
  int port_ = 0, metrics_port_ = 0;
};

// `n` stubs to `target`, each on a connection of its own. For clients that will not read
// (`reading` false), without BDP probing and with 16 KiB stream windows: what they do not read
// stays in the server (the worst case for its memory).
std::vector<std::unique_ptr<v1::Generator::Stub>> Connections(const std::string& target, int n,
                                                              bool reading = true);

// Generate streams opened with the async client API and never read: each stays one call in
// flight until it is cancelled, its deadline passes or the server ends it.
class UnreadStreams {
 public:
  // Stream i goes over stubs[i % stubs.size()].
  UnreadStreams(std::vector<std::unique_ptr<v1::Generator::Stub>> stubs,
                const std::vector<v1::GenerateRequest>& requests,
                std::chrono::system_clock::time_point deadline);
  ~UnreadStreams();
  void Cancel(size_t i) { calls_[i]->context.TryCancel(); }
  // Reads every call to its end; returns how many ended with each status code.
  std::map<grpc::StatusCode, int> Finish();

 private:
  struct Call {
    grpc::ClientContext context;
    std::unique_ptr<grpc::ClientAsyncReader<v1::GenerateResponse>> reader;
    v1::GenerateResponse response;
    grpc::Status status;
  };
  std::vector<std::unique_ptr<v1::Generator::Stub>> stubs_;
  std::vector<std::unique_ptr<Call>> calls_;
  grpc::CompletionQueue cq_;
};

// The value of `series` in a Prometheus text exposition, if present.
std::optional<double> MetricIn(const std::string& exposition, const std::string& series);

// A process's resident memory and thread count (Linux /proc/<pid>/status).
int64_t ResidentBytes(pid_t pid);
int ThreadCount(pid_t pid);

}  // namespace walsh::testing

#endif  // WALSH_TESTS_INTEGRATION_GATEWAY_FIXTURE_H_
