// GatewayServer::Options: walsh-gateway's flags and their checks.
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "gateway/gateway_server.h"

namespace walsh {

void GatewayServer::Options::Register(FlagSet& flags) {
  flags.String("listen", &listen, "gRPC address for clients");
  flags.String("metrics-listen", &metrics_listen, "HTTP address of /metrics");
  flags.String("probe-listen", &probe_listen,
               "plaintext address serving only grpc.health.v1 Check, for probes that cannot "
               "speak TLS (off by default)");
  http.Register(
      flags,
      "address of the OpenAI-compatible HTTP API (/v1/chat/completions, "
      "/v1/completions, /v1/models, /health), HTTPS with --tls-cert-file; off by default");
  flags.String("workers", &workers, "static worker addresses, comma-separated");
  flags.String("workers-dns", &workers_dns,
               "a DNS name:port resolving to the workers (re-resolved)");
  flags.Int("dns-interval-ms", &dns_ms, "how often --workers-dns is resolved again");
  flags.Int("poll-interval-ms", &poll_ms, "how often each worker's health and load are polled");
  flags.Int("worker-check-timeout-ms", &worker_check_timeout_ms,
            "deadline of each poll's health, model-info and load calls to a worker");
  flags.Int("worker-check-misses", &worker_check_misses,
            "health checks timed out in a row before a worker leaves routing, an unreachable host "
            "included (a NOT_SERVING answer or a refused connection takes it out at once)");
  flags.Int("worker-keepalive-ms", &worker_keepalive_ms,
            "ping a worker this often while streams are open to it; one unanswered as long fails "
            "them over to other workers (0: never; else at least 1000)");
  flags.String("policy", &policy,
               "least-outstanding | prefix-affinity | session-affinity | round-robin");
  flags.Int("max-inflight", &max_inflight, "client streams served at once");
  flags.Int("max-queue", &max_queue,
            "client streams waiting for a slot; beyond: RESOURCE_EXHAUSTED");
  buffers.Register(flags);
  flags.Int("max-retries", &max_retries, "retries on other workers before the first token");
  flags.Int("max-migrations", &max_migrations,
            "resumes on other workers after a mid-stream failure");
  flags.Int("retry-rounds", &retry_rounds,
            "rounds over every worker (each failed the stream once) before the stream fails");
  flags.Int("worker-wait-ms", &worker_wait_ms,
            "how long a stream with no routable worker waits for one");
  flags.Int("max-worker-waits", &max_worker_waits,
            "how many such waits a stream may make before it fails UNAVAILABLE");
  flags.Int("unary-timeout-ms", &unary_timeout_ms,
            "deadline of GetModelInfo, Tokenize and Detokenize forwarded to a worker");
  flags.Int("breaker-failures", &breaker_failures,
            "consecutive failures of a worker that open its circuit breaker");
  flags.Int("breaker-cool-down-ms", &breaker_cool_down_ms,
            "how long an open breaker keeps its worker out before one trial call");
  flags.String("api-key", &api_key,
               "require 'authorization: Bearer KEY' on every call (default: $WALSH_API_KEY)");
  flags.String("api-key-file", &api_key_file,
               "accepted keys, one per line ('#' starts a comment), reloaded on SIGHUP");
  flags.Int("max-streams-per-key", &max_streams_per_key,
            "concurrent streams per client (its API key, else its address); 0: no limit");
  flags.Double("rate-limit", &rate_limit, "requests per second per client; 0: no limit");
  flags.Double("rate-burst", &rate_burst, "requests a client may send at once (default: the rate)");
  flags.Int("rate-limit-max-clients", &rate_limit_max_clients,
            "clients whose limits are tracked at once (those idle with a full bucket are "
            "forgotten first); past it a new client is refused with RESOURCE_EXHAUSTED");
  flags.StringList("trusted-proxy", &trusted_proxy_cidrs,
                   "CIDR block or address of a proxy whose X-Forwarded-For names the client, for "
                   "per-client limits and logs");
  flags.Int("max-streams-per-connection", &max_streams_per_connection,
            "HTTP/2 concurrent streams per client connection; 0: gRPC's default");
  flags.String("tls-cert-file", &tls.cert, "PEM certificate chain: serve clients over TLS");
  flags.String("tls-key-file", &tls.key, "PEM private key of --tls-cert-file");
  flags.String("worker-tls-ca-file", &worker_tls.ca,
               "PEM CA that signed the workers' certificates: reach workers over TLS");
  flags.String("worker-tls-cert-file", &worker_tls.cert,
               "PEM client certificate for the workers (mutual TLS)");
  flags.String("worker-tls-key-file", &worker_tls.key, "PEM private key of --worker-tls-cert-file");
  flags.String("worker-tls-server-name", &worker_tls_server_name,
               "the name the workers' certificates must carry (default: the address dialed; "
               "workers found by DNS are dialed by IP)");
  flags.String("expected-fingerprint", &expected_fingerprint,
               "refuse workers whose contract fingerprint differs (default: the first worker's)");
  flags.Int("drain-grace-seconds", &drain_grace_seconds, "on SIGTERM: time for in-flight streams");
}

absl::Status GatewayServer::Options::Validate() const {
  if (workers.empty() && workers_dns.empty()) {
    return absl::InvalidArgumentError("give --workers or --workers-dns");
  }
  RETURN_IF_ERROR(FlagAtLeast("max-inflight", max_inflight, 1));
  RETURN_IF_ERROR(FlagAtLeast("max-queue", max_queue, 0));
  RETURN_IF_ERROR(buffers.Validate());
  RETURN_IF_ERROR(http.Media().status());
  RETURN_IF_ERROR(FlagAtLeast("max-retries", max_retries, 0));
  RETURN_IF_ERROR(FlagAtLeast("max-migrations", max_migrations, 0));
  RETURN_IF_ERROR(FlagAtLeast("retry-rounds", retry_rounds, 0));
  RETURN_IF_ERROR(FlagAtLeast("worker-wait-ms", worker_wait_ms, 0));
  RETURN_IF_ERROR(FlagAtLeast("max-worker-waits", max_worker_waits, 0));
  RETURN_IF_ERROR(FlagAtLeast("unary-timeout-ms", unary_timeout_ms, 1));
  RETURN_IF_ERROR(FlagAtLeast("breaker-failures", breaker_failures, 1));
  RETURN_IF_ERROR(FlagAtLeast("breaker-cool-down-ms", breaker_cool_down_ms, 0));
  RETURN_IF_ERROR(FlagAtLeast("worker-check-timeout-ms", worker_check_timeout_ms, 1));
  RETURN_IF_ERROR(FlagAtLeast("worker-check-misses", worker_check_misses, 1));
  RETURN_IF_ERROR(FlagAtLeast("poll-interval-ms", poll_ms, 1));
  RETURN_IF_ERROR(FlagAtLeast("dns-interval-ms", dns_ms, 1));
  RETURN_IF_ERROR(FlagAtLeast("max-streams-per-key", max_streams_per_key, 0));
  RETURN_IF_ERROR(FlagAtLeast("max-streams-per-connection", max_streams_per_connection, 0));
  RETURN_IF_ERROR(FlagAtLeast("rate-limit", rate_limit, 0.0));
  RETURN_IF_ERROR(FlagAtLeast("rate-burst", rate_burst, 0.0));
  RETURN_IF_ERROR(FlagAtLeast("rate-limit-max-clients", rate_limit_max_clients, 1));
  RETURN_IF_ERROR(FlagWithin("client-ipv6-prefix", http.client_ipv6_prefix, 1, 128));
  RETURN_IF_ERROR(FlagAtLeast("drain-grace-seconds", drain_grace_seconds, 0));
  if (worker_keepalive_ms != 0 && worker_keepalive_ms < 1000) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--worker-keepalive-ms must be 0 or at least 1000 (got ", worker_keepalive_ms, ")"));
  }
  return absl::OkStatus();
}

}  // namespace walsh
