// A real walsh-gateway process on loopback (ephemeral ports) in front of the given workers, and
// what tests read from its metrics.
#ifndef WALSH_TESTS_INTEGRATION_GATEWAY_FIXTURE_H_
#define WALSH_TESTS_INTEGRATION_GATEWAY_FIXTURE_H_

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

// The value of `series` in a Prometheus text exposition, if present.
std::optional<double> MetricIn(const std::string& exposition, const std::string& series);

// A process's resident memory and thread count (Linux /proc/<pid>/status).
int64_t ResidentBytes(pid_t pid);
int ThreadCount(pid_t pid);

}  // namespace walsh::testing

#endif  // WALSH_TESTS_INTEGRATION_GATEWAY_FIXTURE_H_
