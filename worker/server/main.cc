// walsh-worker: serves one model over walsh.v1 (gRPC) with continuous batching, health,
// reflection and Prometheus metrics (worker/server/worker_server.h).
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "common/cli_flags.h"
#include "common/json_log.h"
#include "common/protobuf_log.h"
#include "common/termination_signals.h"
#include "worker/server/follower_server.h"
#include "worker/server/worker_server.h"

namespace walsh {
namespace {

// --node-rank 1..: run the leader's steps until it closes the group (exit 0), the group fails
// (exit 1) or a signal ends the process.
int Follow(const WorkerServer::Options& options, TerminationSignals& signals) {
  auto follower = FollowerServer::Start(options);
  if (!follower.ok()) {
    LogJson("error", "follower_failed", {{"error", std::string(follower.status().message())}});
    return 1;
  }
  LogJson("info", "following",
          {{"rank", options.node_rank}, {"metrics_port", (*follower)->metrics_port()}});
  absl::Status served;
  std::atomic<bool> done{false};
  std::thread serve([&] {
    served = (*follower)->Serve();
    done.store(true);
    kill(getpid(), SIGTERM);  // wakes the signal wait below
  });
  signals.Wait();
  if (!done.load()) {
    // A signal while the follower waits on its leader, with no deadline: nothing to drain (the
    // leader's streams end when the group breaks), so the process ends here.
    LogJson("info", "follower_stopped", {{"rank", options.node_rank}});
    std::fflush(nullptr);
    std::_Exit(0);
  }
  serve.join();
  if (!served.ok()) {
    LogJson("error", "rank_group_broken", {{"error", std::string(served.message())}});
    return 1;
  }
  LogJson("info", "rank_group_closed", {{"rank", options.node_rank}});
  return 0;
}

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
  if (options.node_rank > 0) return Follow(options, signals);
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
