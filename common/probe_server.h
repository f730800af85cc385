// A plaintext gRPC server with grpc.health.v1 Check only, answering exactly what the main
// server's health service says (asked over the main server's in-process channel). It lets the
// Kubernetes kubelet, whose gRPC probes cannot speak TLS, probe a server whose port requires
// TLS, without serving anything else in plaintext (`--probe-listen`, docs/operations.md).
#ifndef WALSH_COMMON_PROBE_SERVER_H_
#define WALSH_COMMON_PROBE_SERVER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "grpcpp/grpcpp.h"

namespace walsh {

class ProbeServer {
 public:
  // Listens on `listen` (port 0: a free one) for as long as the result lives; `main` must
  // outlive it.
  static absl::StatusOr<std::unique_ptr<ProbeServer>> Start(const std::string& listen,
                                                            grpc::Server* main);
  ~ProbeServer();
  int port() const { return port_; }

 private:
  class Health;
  ProbeServer() = default;

  std::unique_ptr<Health> health_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

}  // namespace walsh

#endif  // WALSH_COMMON_PROBE_SERVER_H_
