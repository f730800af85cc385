// walsh-worker: serves one model over walsh.v1 (gRPC) with continuous batching, health,
// reflection and Prometheus metrics (worker/server/worker_server.h).
#include <cstdio>
#include <string>

#include "common/cli_flags.h"
#include "common/protobuf_log.h"
#include "common/termination_signals.h"
#include "worker/server/worker_server.h"

namespace walsh {
namespace {

int Run(int argc, char** argv) {
  WorkerServer::Options options;
  FlagSet flags(
      "walsh-worker --model FILE [--listen ADDR] [--metrics-listen ADDR] [--threads N] ...");
  options.Register(flags);
#ifdef WALSH_FAULT_INJECTION
  flags.Int("debug-stall-rank", &options.debug_stall_rank, "this rank stops answering");
#endif
  if (absl::Status s = flags.Parse(argc, argv); !s.ok()) {
    std::fprintf(stderr, "walsh-worker: %s\n%s", std::string(s.message()).c_str(),
                 flags.Help().c_str());
    return 2;
  }
  if (flags.help_requested()) {
    std::fputs(flags.Help().c_str(), stdout);
    return 0;
  }
  TerminationSignals signals;
  signals.Block();  // before any thread starts, so every thread inherits the mask
  auto worker = WorkerServer::Start(options);
  if (!worker.ok()) {
    // UNAVAILABLE: a listener, the model or the engine failed, logged already. Anything else:
    // the flags are at fault.
    if (worker.status().code() == absl::StatusCode::kUnavailable) return 1;
    std::fprintf(stderr, "walsh-worker: %s\n", std::string(worker.status().message()).c_str());
    return 2;
  }
  (*worker)->Drain(signals.Wait());
  return 0;
}

}  // namespace
}  // namespace walsh

int main(int argc, char** argv) {
  walsh::RouteProtobufLogsToJson();
  return walsh::Run(argc, argv);
}
