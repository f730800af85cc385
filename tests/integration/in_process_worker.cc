#include "tests/integration/in_process_worker.h"

#include "common/cli_flags.h"
#include "gtest/gtest.h"

namespace walsh::testing {

InProcessWorker::InProcessWorker(std::vector<std::string> extra_args) {
  std::vector<std::string> args = WorkerArgs("walsh-worker", extra_args);
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  FlagSet flags("walsh-worker (in process)");
  WorkerServer::Options options;
  options.Register(flags);
  const absl::Status parsed = flags.Parse(static_cast<int>(argv.size()), argv.data());
  EXPECT_TRUE(parsed.ok()) << parsed;
  if (!parsed.ok()) return;
  auto started = WorkerServer::Start(options);
  EXPECT_TRUE(started.ok()) << started.status();
  if (!started.ok()) return;
  server_ = *std::move(started);
  Listening(server_->grpc_port(), server_->metrics_port());
  set_serving(true);
}

InProcessWorker::~InProcessWorker() = default;

}  // namespace walsh::testing
