// A WorkerServer in the test's own process, started from the same flags as a WorkerProcess and
// reached the same way (real gRPC and metrics ports on loopback): for tests whose point is what a
// worker answers, not what its process does (signals, logs, exit codes, faults).
#ifndef WALSH_TESTS_INTEGRATION_IN_PROCESS_WORKER_H_
#define WALSH_TESTS_INTEGRATION_IN_PROCESS_WORKER_H_

#include <memory>
#include <string>
#include <vector>

#include "tests/integration/worker_fixture.h"
#include "worker/server/worker_server.h"

namespace walsh::testing {

class InProcessWorker : public WorkerClient {
 public:
  explicit InProcessWorker(std::vector<std::string> extra_args = {});
  ~InProcessWorker() override;  // drains with no grace

 private:
  std::unique_ptr<WorkerServer> server_;
};

}  // namespace walsh::testing

#endif  // WALSH_TESTS_INTEGRATION_IN_PROCESS_WORKER_H_
