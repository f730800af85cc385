// walsh-gateway as one object: the worker pool, the gRPC service and its servers (clients,
// metrics, probes, the OpenAI HTTP face), started from Options and stopped by Drain. The binary
// (gateway/main.cc) parses flags into Options and waits for signals; tests start it in-process.
#ifndef WALSH_GATEWAY_GATEWAY_SERVER_H_
#define WALSH_GATEWAY_GATEWAY_SERVER_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/cli_flags.h"
#include "common/stream_buffer_flags.h"
#include "common/tls_credentials.h"
#include "gateway/key_limiter.h"
#include "openai/http_flags.h"

namespace walsh {

class GatewayServer {
 public:
  // Every flag of walsh-gateway (docs/operations.md's table is its --help).
  struct Options {
    std::string listen = "0.0.0.0:8080", metrics_listen = "0.0.0.0:9091", probe_listen;
    std::string workers, workers_dns, policy = "least-outstanding";
    std::string api_key, api_key_file, expected_fingerprint, worker_tls_server_name;
    ServerTlsFiles tls;
    ClientTlsFiles worker_tls;
    int64_t max_inflight = 256, max_queue = 256, max_retries = 3, max_migrations = 5;
    StreamBufferFlags buffers;
    int64_t drain_grace_seconds = 30, poll_ms = 250, dns_ms = 2000, worker_keepalive_ms = 10000;
    int64_t max_streams_per_key = 0, max_streams_per_connection = 0;
    int64_t retry_rounds = 5, worker_wait_ms = 2000, max_worker_waits = 3, unary_timeout_ms = 10000;
    int64_t breaker_failures = 3, breaker_cool_down_ms = 2000, worker_check_timeout_ms = 500;
    int64_t worker_check_misses = 3;
    double rate_limit = 0, rate_burst = 0;  // rate_burst 0: the rate
    int64_t rate_limit_max_clients = KeyLimiter::kDefaultMaxClients;
    HttpFlags http;
    std::vector<std::string> trusted_proxy_cidrs;

    void Register(FlagSet& flags);
    // Every value's range, and the flags that need each other; the error names the flag.
    absl::Status Validate() const;
  };

  // Reads the keys and credentials, starts the pool and every server: serving when it returns.
  // INVALID_ARGUMENT names the flag or file at fault; a listener that cannot start is logged
  // and returned UNAVAILABLE.
  static absl::StatusOr<std::unique_ptr<GatewayServer>> Start(const Options& options);
  ~GatewayServer();  // drains with no grace if Drain was not called

  int grpc_port() const;
  // SIGHUP: the key file read again (on error the keys in force stay; logged either way).
  void ReloadKeys();
  // SIGTERM: not serving; in-flight streams get --drain-grace-seconds, then the rest end
  // UNAVAILABLE and every server stops.
  void Drain(int signal);

 private:
  struct Parts;
  explicit GatewayServer(std::unique_ptr<Parts> parts);
  void WatchHealth();

  std::unique_ptr<Parts> parts_;
  std::atomic<bool> draining_{false}, stop_{false};
  std::thread health_;
  bool drained_ = false;
};

}  // namespace walsh

#endif  // WALSH_GATEWAY_GATEWAY_SERVER_H_
