// walsh-gateway: one endpoint for clients; routes Generate streams over a pool of workers.
#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <thread>

#include "absl/strings/str_split.h"
#include "common/cli_flags.h"
#include "common/json_log.h"
#include "common/metrics.h"
#include "common/metrics_http_server.h"
#include "common/probe_server.h"
#include "common/protobuf_log.h"
#include "common/stream_buffer_flags.h"
#include "common/termination_signals.h"
#include "common/tls_credentials.h"
#include "gateway/api_keys.h"
#include "gateway/client_key.h"
#include "gateway/gateway_service.h"
#include "gateway/http/http_flags.h"
#include "gateway/http/openai_server.h"
#include "gateway/key_limiter.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"

namespace walsh {
namespace {

int Run(int argc, char** argv) {
  std::string worker_tls_server_name;
  std::string listen = "0.0.0.0:8080", metrics_listen = "0.0.0.0:9091", probe_listen, workers,
              workers_dns;
  std::string policy_name = "least-outstanding", api_key, api_key_file, expected_fingerprint;
  ServerTlsFiles tls;
  ClientTlsFiles worker_tls;
  int64_t max_inflight = 256, max_queue = 256, max_retries = 3, max_migrations = 5;
  StreamBufferFlags buffers;
  int64_t drain_grace_seconds = 30, poll_ms = 250, dns_ms = 2000, worker_keepalive_ms = 10000;
  int64_t max_streams_per_key = 0, max_streams_per_connection = 0;
  int64_t retry_rounds = 5, worker_wait_ms = 2000, max_worker_waits = 3, unary_timeout_ms = 10000;
  int64_t breaker_failures = 3, breaker_cool_down_ms = 2000, worker_check_timeout_ms = 500;
  double rate_limit = 0, rate_burst = 0;
  HttpFlags http;
  std::vector<std::string> trusted_proxy_cidrs;
  FlagSet flags("walsh-gateway (--workers HOST:PORT,... | --workers-dns NAME:PORT) [flags]");
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
  flags.Int("worker-keepalive-ms", &worker_keepalive_ms,
            "ping a worker this often while streams are open to it; one unanswered as long fails "
            "them over to other workers (0: never; else at least 1000)");
  flags.String("policy", &policy_name,
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
  if (absl::Status s = flags.Parse(argc, argv); !s.ok()) {
    std::fprintf(stderr, "walsh-gateway: %s\n%s", std::string(s.message()).c_str(),
                 flags.Help().c_str());
    return 2;
  }
  if (flags.help_requested()) {
    std::fputs(flags.Help().c_str(), stdout);
    return 0;
  }
  if (workers.empty() && workers_dns.empty()) {
    std::fprintf(stderr, "walsh-gateway: give --workers or --workers-dns\n");
    return 2;
  }
  if (max_inflight < 1 || max_queue < 0) {
    std::fprintf(stderr,
                 "walsh-gateway: --max-inflight must be at least 1, --max-queue at least 0\n");
    return 2;
  }
  if (absl::Status s = buffers.Validate(); !s.ok()) {
    std::fprintf(stderr, "walsh-gateway: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  if (retry_rounds < 0 || worker_wait_ms < 0 || max_worker_waits < 0 || unary_timeout_ms < 1 ||
      breaker_failures < 1 || breaker_cool_down_ms < 0 || worker_check_timeout_ms < 1) {
    std::fprintf(stderr,
                 "walsh-gateway: --unary-timeout-ms, --worker-check-timeout-ms and "
                 "--breaker-failures must be at least 1; "
                 "--retry-rounds, --worker-wait-ms, --max-worker-waits and "
                 "--breaker-cool-down-ms at least 0\n");
    return 2;
  }
  auto trusted_proxies = TrustedProxies::Parse(trusted_proxy_cidrs);
  if (!trusted_proxies.ok()) {
    std::fprintf(stderr, "walsh-gateway: %s\n",
                 std::string(trusted_proxies.status().message()).c_str());
    return 2;
  }
  absl::StatusOr<HttpServerOptions> http_options = http.Options(tls);
  if (!http_options.ok()) {
    std::fprintf(stderr, "walsh-gateway: %s\n",
                 std::string(http_options.status().message()).c_str());
    return 2;
  }

  if (worker_keepalive_ms != 0 && worker_keepalive_ms < 1000) {
    std::fprintf(stderr, "walsh-gateway: --worker-keepalive-ms must be 0 or at least 1000\n");
    return 2;
  }
  if (api_key.empty() && std::getenv("WALSH_API_KEY") != nullptr)
    api_key = std::getenv("WALSH_API_KEY");
  ApiKeys keys(api_key, api_key_file);
  if (absl::Status s = keys.Load(); !s.ok()) {
    std::fprintf(stderr, "walsh-gateway: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  auto server_credentials = MakeServerCredentials(tls);
  auto worker_credentials = MakeChannelCredentials(worker_tls);
  for (const absl::Status& s : {server_credentials.status(), worker_credentials.status()}) {
    if (!s.ok()) {
      std::fprintf(stderr, "walsh-gateway: %s\n", std::string(s.message()).c_str());
      return 2;
    }
  }
  auto policy = MakeRoutingPolicy(policy_name);
  if (!policy.ok()) {
    std::fprintf(stderr, "walsh-gateway: %s\n", std::string(policy.status().message()).c_str());
    return 2;
  }

  TerminationSignals signals;
  signals.Block();

  WorkerPoolOptions po;
  for (absl::string_view w : absl::StrSplit(workers, ',', absl::SkipEmpty()))
    po.static_workers.emplace_back(w);
  po.dns = workers_dns;
  po.expected_fingerprint = expected_fingerprint;
  po.poll_interval = std::chrono::milliseconds(poll_ms);
  po.check_timeout = std::chrono::milliseconds(worker_check_timeout_ms);
  po.dns_interval = std::chrono::milliseconds(dns_ms);
  po.channel.credentials = *worker_credentials;
  po.channel.tls_server_name = worker_tls_server_name;
  po.channel.keepalive = std::chrono::milliseconds(worker_keepalive_ms);
  po.breaker.failures = static_cast<int>(breaker_failures);
  po.breaker.cool_down = std::chrono::milliseconds(breaker_cool_down_ms);
  WorkerPool pool(po);

  MetricsRegistry registry;
  BufferBudget buffer_budget("the gateway", buffers.max_total);
  GatewayMetrics metrics(registry, &pool, &buffer_budget);
  HttpMetrics http_metrics(registry, "walsh_gateway_http");
  AddProcessMetrics(registry);
  auto metrics_server = MetricsHttpServer::Start(metrics_listen, &registry);
  if (!metrics_server.ok()) {
    LogJson("error", "metrics_failed", {{"error", std::string(metrics_server.status().message())}});
    return 1;
  }
  GatewayOptions go;
  go.max_inflight = max_inflight;
  go.max_queue = max_queue;
  go.stream_buffers = buffers.Limits(&buffer_budget);
  go.max_retries = static_cast<int>(max_retries);
  go.max_migrations = static_cast<int>(max_migrations);
  go.retry_rounds = static_cast<int>(retry_rounds);
  go.worker_wait = std::chrono::milliseconds(worker_wait_ms);
  go.max_worker_waits = static_cast<int>(max_worker_waits);
  go.unary_timeout = std::chrono::milliseconds(unary_timeout_ms);
  go.api_keys = &keys;
  go.trusted_proxies = *trusted_proxies;
  KeyLimiter limiter(max_streams_per_key, rate_limit, rate_burst > 0 ? rate_burst : rate_limit);
  if (max_streams_per_key > 0 || rate_limit > 0) go.limiter = &limiter;
  auto service = std::make_unique<GatewayService>(&pool, policy->get(), &metrics, go);

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(listen, *server_credentials, &port);
  if (max_streams_per_connection > 0) {
    builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS,
                               static_cast<int>(max_streams_per_connection));
  }
  builder.RegisterService(service.get());
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server || port == 0) {
    LogJson("error", "listen_failed", {{"listen", listen}});
    return 1;
  }
  std::unique_ptr<ProbeServer> probe;
  if (!probe_listen.empty()) {
    auto started = ProbeServer::Start(probe_listen, server.get());
    if (!started.ok()) {
      LogJson("error", "listen_failed", {{"error", std::string(started.status().message())}});
      return 1;
    }
    probe = std::move(*started);
  }
  std::atomic<bool> draining{false}, stop{false};
  std::unique_ptr<OpenAiServer> http_face;
  if (!http.listen.empty()) {
    OpenAiServerOptions ho;
    ho.http = *http_options;
    ho.http.stream.budget = &buffer_budget;
    ho.served_model_name = http.served_model_name;
    ho.api_keys = &keys;
    ho.worker_wait = std::chrono::milliseconds(worker_wait_ms);
    ho.chat_content_special_tokens = http.chat_content_special_tokens;
    ho.trusted_proxies = *trusted_proxies;
    ho.ready = [&] { return !draining && !pool.Candidates().empty(); };
    ho.routable = [&] { return !pool.Candidates().empty(); };
    ho.fingerprint = [&] { return pool.fingerprint(); };
    // The gateway's own service trusts the address these name only with the call token.
    ho.call_metadata = [](const std::string& client, std::multimap<std::string, std::string>* md) {
      md->emplace(kHttpClientHeader, client);
      md->emplace(kHttpCallTokenHeader, HttpCallToken());
    };
    auto started = OpenAiServer::Start(std::move(ho), server.get(), &http_metrics);
    if (!started.ok()) {
      LogJson("error", "listen_failed", {{"error", std::string(started.status().message())}});
      return 1;
    }
    http_face = std::move(*started);
  }
  // "liveness": the process answers (Kubernetes livenessProbe), whatever its workers do.
  server->GetHealthCheckService()->SetServingStatus("liveness", true);
  LogJson("info", "listening",
          {{"grpc_port", port},
           {"http_port", http_face ? http_face->port() : 0},
           {"metrics_port", (*metrics_server)->port()},
           {"policy", policy_name},
           {"tls", !tls.cert.empty()},
           {"worker_tls", !worker_tls.ca.empty()},
           {"api_keys", keys.count()}});
  if (tls.cert.empty() && !IsLoopbackAddress(listen)) {
    LogJson("warning", "plaintext",
            {{"listen", listen},
             {"message", "serving clients without TLS beyond loopback: set --tls-cert-file"}});
  }
  if (http_face && tls.cert.empty() && !IsLoopbackAddress(http.listen)) {
    LogJson("warning", "plaintext",
            {{"listen", http.listen},
             {"message", "serving the HTTP API without TLS beyond loopback: set --tls-cert-file"}});
  }

  // SERVING while some worker can take traffic; NOT_SERVING when none can or while draining.
  std::thread health([&] {
    bool last = false, first = true;
    while (!stop) {
      const bool serving = !draining && !pool.Candidates().empty();
      if (serving != last || first) {
        server->GetHealthCheckService()->SetServingStatus("", serving);
        server->GetHealthCheckService()->SetServingStatus("walsh.v1.Generator", serving);
        LogJson("info", serving ? "serving" : "not_serving",
                {{"workers", pool.Candidates().size()}});
        last = serving;
        first = false;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  });

  const int sig = signals.Wait([&] {
    const absl::Status s = keys.Load();
    LogJson(s.ok() ? "info" : "error", "api_keys_reloaded",
            {{"keys", keys.count()}, {"error", std::string(s.message())}});
  });
  LogJson("info", "draining", {{"signal", sig}, {"grace_seconds", drain_grace_seconds}});
  draining = true;
  server->GetHealthCheckService()->SetServingStatus("", false);
  server->GetHealthCheckService()->SetServingStatus("walsh.v1.Generator", false);
  service->StartDraining();
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(drain_grace_seconds);
  while (service->inflight() > 0 && std::chrono::steady_clock::now() < end) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  service->CancelAll();
  if (http_face) http_face->WaitForHandlers(std::chrono::seconds(2));  // streams' last events
  http_face.reset();
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  stop = true;
  health.join();
  service.reset();
  LogJson("info", "stopped");
  return 0;
}

}  // namespace
}  // namespace walsh

int main(int argc, char** argv) {
  walsh::RouteProtobufLogsToJson();
  return walsh::Run(argc, argv);
}
