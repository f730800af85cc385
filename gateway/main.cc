// walsh-gateway: one endpoint for clients; routes Generate streams over a pool of workers
// (gateway/gateway_server.h).
#include <cstdio>
#include <cstdlib>
#include <string>

#include "common/cli_flags.h"
#include "common/protobuf_log.h"
#include "common/termination_signals.h"
#include "gateway/gateway_server.h"

namespace walsh {
namespace {

int Run(int argc, char** argv) {
  GatewayServer::Options options;
  FlagSet flags("walsh-gateway (--workers HOST:PORT,... | --workers-dns NAME:PORT) [flags]");
  options.Register(flags);
  if (absl::Status s = flags.Parse(argc, argv); !s.ok()) {
    std::fprintf(stderr, "walsh-gateway: %s\n%s", std::string(s.message()).c_str(),
                 flags.Help().c_str());
    return 2;
  }
  if (flags.help_requested()) {
    std::fputs(flags.Help().c_str(), stdout);
    return 0;
  }
  if (options.api_key.empty() && std::getenv("WALSH_API_KEY") != nullptr) {
    options.api_key = std::getenv("WALSH_API_KEY");
  }
  TerminationSignals signals;
  signals.Block();  // before any thread starts, so every thread inherits the mask
  auto gateway = GatewayServer::Start(options);
  if (!gateway.ok()) {
    // UNAVAILABLE: a listener failed, logged already. Anything else: the flags are at fault.
    if (gateway.status().code() == absl::StatusCode::kUnavailable) return 1;
    std::fprintf(stderr, "walsh-gateway: %s\n", std::string(gateway.status().message()).c_str());
    return 2;
  }
  const int sig = signals.Wait([&] { (*gateway)->ReloadKeys(); });
  (*gateway)->Drain(sig);
  return 0;
}

}  // namespace
}  // namespace walsh

int main(int argc, char** argv) {
  walsh::RouteProtobufLogsToJson();
  return walsh::Run(argc, argv);
}
