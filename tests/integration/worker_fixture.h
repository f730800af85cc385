// A worker serving a tiny synthetic model on loopback (ephemeral ports), seen from its clients:
// a real walsh-worker process here, or a WorkerServer in the test's own process
// (in_process_worker.h) where the process is not the point.
#ifndef WALSH_TESTS_INTEGRATION_WORKER_FIXTURE_H_
#define WALSH_TESTS_INTEGRATION_WORKER_FIXTURE_H_

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "tests/util/child_process.h"
#include "tests/util/test_util.h"
#include "walsh/v1/generator.grpc.pb.h"

namespace walsh::testing {

// Writes the tiny preset once per test program.
const std::string& TinyModelPath();

// The flags every test worker starts with: the tiny model, ephemeral ports on loopback.
std::vector<std::string> WorkerArgs(const std::string& binary,
                                    const std::vector<std::string>& extra_args);

// A serving worker's client side, however it runs: its ports, stubs over one channel, metrics.
class WorkerClient {
 public:
  virtual ~WorkerClient() = default;
  bool ok() const { return grpc_port_ > 0 && serving_; }
  int grpc_port() const { return grpc_port_; }
  int metrics_port() const { return metrics_port_; }
  std::string target() const { return "127.0.0.1:" + std::to_string(grpc_port_); }

  std::unique_ptr<v1::Generator::Stub> Generator() const;
  std::unique_ptr<v1::Worker::Stub> Worker() const;
  std::unique_ptr<grpc::health::v1::Health::Stub> Health() const;
  // As GatewayProcess's: one series of its /metrics now, and a poll until it reads `value`.
  std::optional<double> Metric(const std::string& series) const;
  bool WaitForMetric(const std::string& series, double value, int seconds = 30) const;
  // Until `series` reads `value` or more, for up to `seconds`.
  bool WaitForMetricAtLeast(const std::string& series, double value, int seconds = 30) const;

 protected:
  // Once the worker listens on these ports. Connected lazily, at its first call: connected here,
  // the first call after a worker was restarted on the same port failed "Socket closed" in 2 of
  // 4 runs of Gateway.KillingAWorkerMidStreamLosesNoToken (lazily, in none).
  void Listening(int grpc_port, int metrics_port);
  void set_serving(bool serving) { serving_ = serving; }

 private:
  std::shared_ptr<grpc::Channel> channel_;
  int grpc_port_ = 0, metrics_port_ = 0;
  bool serving_ = false;
};

// A real walsh-worker process: for what its process does (signals, logs, exit codes, faults).
class WorkerProcess : public WorkerClient {
 public:
  explicit WorkerProcess(std::vector<std::string> extra_args = {});
  // Another build of the worker (walsh-worker-faults).
  WorkerProcess(const std::string& binary, std::vector<std::string> extra_args);
  ChildProcess& process() { return *process_; }

 private:
  std::unique_ptr<ChildProcess> process_;
};

struct StreamResult {
  grpc::Status status;
  std::vector<int32_t> ids;
  std::string text;
  std::vector<std::string> pieces;  // the text of each Tokens message
  std::string finish_reason;
  uint64_t seed = 0;
};

// A request of `text` for exactly `max_tokens` tokens (EOS ignored), sampled at `temperature`
// (0: greedy) with `seed`, reporting `logprobs` alternatives per token.
v1::GenerateRequest TextRequest(const std::string& text, uint32_t max_tokens, float temperature,
                                uint64_t seed, uint32_t logprobs = 0);

// Runs one Generate to the end.
StreamResult RunGenerate(v1::Generator::Stub& stub, const v1::GenerateRequest& request);

// A stub for a client that does not read: without BDP probing its HTTP/2 windows stay at their
// initial 64 KiB, so its transport stops taking data once those fill.
std::unique_ptr<v1::Generator::Stub> NonReadingStub(const std::string& target);

// A channel to `target`, connected before it is returned (up to 20 s). gRPC 1.51 can fail a
// process's first connects with a stale errno (ENOENT, set by Abseil's first contended lock
// between connect() and gRPC's errno check; fixed upstream in grpc/grpc#35064): its calls then
// fail fast for a reconnect backoff. Tests whose calls are not wait-for-ready start connected.
std::shared_ptr<grpc::Channel> ConnectedChannel(
    const std::string& target, const grpc::ChannelArguments& args = grpc::ChannelArguments());

// Polls GetLoad until nothing runs, waits or holds pages or slots (about 10 s at most); returns
// the last load seen.
v1::Load WaitForIdle(v1::Worker::Stub& worker);

// Polls GetLoad until at least `running` requests run (about 10 s at most); false if they never
// did.
bool WaitForRunning(v1::Worker::Stub& worker, uint32_t running);

// Generate (a non-UTF-8 string at the top level and nested) and Tokenize with non-UTF-8 text,
// through `stub`: each is refused INVALID_ARGUMENT naming the field; the same requests well
// formed are served.
void ExpectNonUtf8StringsRefused(v1::Generator::Stub& stub);

}  // namespace walsh::testing

#endif  // WALSH_TESTS_INTEGRATION_WORKER_FIXTURE_H_
