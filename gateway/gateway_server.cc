#include "gateway/gateway_server.h"

#include <chrono>
#include <cstdio>

#include "absl/strings/str_split.h"
#include "common/api_keys.h"
#include "common/json_log.h"
#include "common/metrics.h"
#include "common/metrics_http_server.h"
#include "common/probe_server.h"
#include "common/status_macros.h"
#include "gateway/client_key.h"
#include "gateway/gateway_service.h"
#include "gateway/key_limiter.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"
#include "openai/openai_server.h"

namespace walsh {

// Declared in the order they start; destroyed in reverse.
struct GatewayServer::Parts {
  Options options;
  std::unique_ptr<ApiKeys> keys;
  std::unique_ptr<WorkerPool> pool;
  MetricsRegistry registry;
  std::unique_ptr<BufferBudget> buffer_budget;
  std::unique_ptr<GatewayMetrics> metrics;
  std::unique_ptr<HttpMetrics> http_metrics;
  std::unique_ptr<MetricsHttpServer> metrics_server;
  std::unique_ptr<KeyLimiter> limiter;
  std::unique_ptr<RoutingPolicy> policy;
  std::unique_ptr<GatewayService> service;
  std::unique_ptr<grpc::Server> server;
  int port = 0;
  std::unique_ptr<ProbeServer> probe;
  std::unique_ptr<OpenAiServer> http_face;
};

namespace {

WorkerPoolOptions PoolOptions(const GatewayServer::Options& o,
                              std::shared_ptr<grpc::ChannelCredentials> credentials) {
  WorkerPoolOptions po;
  for (absl::string_view w : absl::StrSplit(o.workers, ',', absl::SkipEmpty()))
    po.static_workers.emplace_back(w);
  po.dns = o.workers_dns;
  po.expected_fingerprint = o.expected_fingerprint;
  po.poll_interval = std::chrono::milliseconds(o.poll_ms);
  po.check_timeout = std::chrono::milliseconds(o.worker_check_timeout_ms);
  po.check_misses = o.worker_check_misses;
  po.dns_interval = std::chrono::milliseconds(o.dns_ms);
  po.channel.credentials = std::move(credentials);
  po.channel.tls_server_name = o.worker_tls_server_name;
  po.channel.keepalive = std::chrono::milliseconds(o.worker_keepalive_ms);
  po.breaker.failures = static_cast<int>(o.breaker_failures);
  po.breaker.cool_down = std::chrono::milliseconds(o.breaker_cool_down_ms);
  return po;
}

GatewayOptions StreamOptions(const GatewayServer::Options& o) {
  GatewayOptions go;
  go.max_inflight = o.max_inflight;
  go.max_queue = o.max_queue;
  go.max_retries = static_cast<int>(o.max_retries);
  go.max_migrations = static_cast<int>(o.max_migrations);
  go.retry_rounds = static_cast<int>(o.retry_rounds);
  go.worker_wait = std::chrono::milliseconds(o.worker_wait_ms);
  go.max_worker_waits = static_cast<int>(o.max_worker_waits);
  go.unary_timeout = std::chrono::milliseconds(o.unary_timeout_ms);
  return go;
}

absl::Status ListenFailed(const std::string& what) {
  LogJson("error", "listen_failed", {{"error", what}});
  return absl::UnavailableError(what);
}

}  // namespace

absl::StatusOr<std::unique_ptr<GatewayServer>> GatewayServer::Start(const Options& o) {
  RETURN_IF_ERROR(o.Validate());
  auto parts = std::make_unique<Parts>();
  parts->options = o;
  ASSIGN_OR_RETURN(const TrustedProxies trusted_proxies,
                   TrustedProxies::Parse(o.trusted_proxy_cidrs));
  ASSIGN_OR_RETURN(HttpServerOptions http_options, o.http.Options(o.tls));
  ASSIGN_OR_RETURN(MediaFetchOptions media_options, o.http.Media());
  parts->keys = std::make_unique<ApiKeys>(o.api_key, o.api_key_file);
  RETURN_IF_ERROR(parts->keys->Load());
  ASSIGN_OR_RETURN(auto server_credentials, MakeServerCredentials(o.tls));
  ASSIGN_OR_RETURN(auto worker_credentials, MakeChannelCredentials(o.worker_tls));
  ASSIGN_OR_RETURN(parts->policy, MakeRoutingPolicy(o.policy));

  parts->pool = std::make_unique<WorkerPool>(PoolOptions(o, worker_credentials));
  parts->buffer_budget = std::make_unique<BufferBudget>("the gateway", o.buffers.max_total);
  parts->metrics = std::make_unique<GatewayMetrics>(parts->registry, parts->pool.get(),
                                                    parts->buffer_budget.get());
  parts->http_metrics = std::make_unique<HttpMetrics>(parts->registry, "walsh_gateway_http");
  AddProcessMetrics(parts->registry);
  auto metrics_server = MetricsHttpServer::Start(o.metrics_listen, &parts->registry);
  if (!metrics_server.ok()) {
    LogJson("error", "metrics_failed", {{"error", std::string(metrics_server.status().message())}});
    return absl::UnavailableError(metrics_server.status().message());
  }
  parts->metrics_server = std::move(*metrics_server);

  GatewayOptions go = StreamOptions(o);
  go.stream_buffers = o.buffers.Limits(parts->buffer_budget.get());
  go.api_keys = parts->keys.get();
  go.trusted_proxies = trusted_proxies;
  parts->limiter = std::make_unique<KeyLimiter>(
      o.max_streams_per_key, o.rate_limit, o.rate_burst > 0 ? o.rate_burst : o.rate_limit,
      std::chrono::steady_clock::now, o.rate_limit_max_clients);
  go.ipv6_prefix_bits = static_cast<int>(o.http.client_ipv6_prefix);
  if (o.max_streams_per_key > 0 || o.rate_limit > 0) go.limiter = parts->limiter.get();
  parts->service = std::make_unique<GatewayService>(parts->pool.get(), parts->policy.get(),
                                                    parts->metrics.get(), go);

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  builder.AddListeningPort(o.listen, server_credentials, &parts->port);
  if (o.max_streams_per_connection > 0) {
    builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS,
                               static_cast<int>(o.max_streams_per_connection));
  }
  builder.RegisterService(parts->service.get());
  parts->server = builder.BuildAndStart();
  if (!parts->server || parts->port == 0) return ListenFailed("cannot listen on " + o.listen);
  if (!o.probe_listen.empty()) {
    auto started = ProbeServer::Start(o.probe_listen, parts->server.get());
    if (!started.ok()) return ListenFailed(std::string(started.status().message()));
    parts->probe = std::move(*started);
  }
  std::unique_ptr<GatewayServer> gateway(new GatewayServer(std::move(parts)));
  Parts& p = *gateway->parts_;
  if (!o.http.listen.empty()) {
    OpenAiServerOptions ho;
    ho.http = http_options;
    ho.http.stream.budget = p.buffer_budget.get();
    ho.served_model_name = o.http.served_model_name;
    ho.api_keys = p.keys.get();
    ho.worker_wait = std::chrono::milliseconds(o.worker_wait_ms);
    ho.chat_content_special_tokens = o.http.chat_content_special_tokens;
    ho.media = media_options;
    ho.trusted_proxies = trusted_proxies;
    GatewayServer* g = gateway.get();
    ho.ready = [g] { return !g->draining_ && !g->parts_->pool->Candidates().empty(); };
    ho.routable = [g] { return !g->parts_->pool->Candidates().empty(); };
    ho.fingerprint = [g] { return g->parts_->pool->fingerprint(); };
    // The gateway's own service trusts the address these name only with the call token.
    ho.call_metadata = [](const std::string& client, std::multimap<std::string, std::string>* md) {
      md->emplace(kHttpClientHeader, client);
      md->emplace(kHttpCallTokenHeader, HttpCallToken());
    };
    auto started = OpenAiServer::Start(std::move(ho), p.server.get(), p.http_metrics.get());
    if (!started.ok()) return ListenFailed(std::string(started.status().message()));
    p.http_face = std::move(*started);
  }
  // "liveness": the process answers (Kubernetes livenessProbe), whatever its workers do.
  p.server->GetHealthCheckService()->SetServingStatus("liveness", true);
  LogJson("info", "listening",
          {{"grpc_port", p.port},
           {"http_port", p.http_face ? p.http_face->port() : 0},
           {"metrics_port", p.metrics_server->port()},
           {"policy", o.policy},
           {"tls", !o.tls.cert.empty()},
           {"worker_tls", !o.worker_tls.ca.empty()},
           {"api_keys", p.keys->count()}});
  if (o.tls.cert.empty() && !IsLoopbackAddress(o.listen)) {
    LogJson("warning", "plaintext",
            {{"listen", o.listen},
             {"message", "serving clients without TLS beyond loopback: set --tls-cert-file"}});
  }
  if (p.http_face && o.tls.cert.empty() && !IsLoopbackAddress(o.http.listen)) {
    LogJson("warning", "plaintext",
            {{"listen", o.http.listen},
             {"message", "serving the HTTP API without TLS beyond loopback: set --tls-cert-file"}});
  }
  gateway->health_ = std::thread([g = gateway.get()] { g->WatchHealth(); });
  return gateway;
}

GatewayServer::GatewayServer(std::unique_ptr<Parts> parts) : parts_(std::move(parts)) {}

GatewayServer::~GatewayServer() {
  if (!drained_) {
    Parts& p = *parts_;
    p.options.drain_grace_seconds = 0;
    if (p.server != nullptr) Drain(0);
  }
  stop_ = true;
  if (health_.joinable()) health_.join();
}

int GatewayServer::grpc_port() const { return parts_->port; }

// SERVING while some worker can take traffic; NOT_SERVING when none can or while draining.
void GatewayServer::WatchHealth() {
  bool last = false, first = true;
  while (!stop_) {
    const bool serving = !draining_ && !parts_->pool->Candidates().empty();
    if (serving != last || first) {
      parts_->server->GetHealthCheckService()->SetServingStatus("", serving);
      parts_->server->GetHealthCheckService()->SetServingStatus("walsh.v1.Generator", serving);
      LogJson("info", serving ? "serving" : "not_serving",
              {{"workers", parts_->pool->Candidates().size()}});
      last = serving;
      first = false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

void GatewayServer::ReloadKeys() {
  const absl::Status s = parts_->keys->Load();
  LogJson(s.ok() ? "info" : "error", "api_keys_reloaded",
          {{"keys", parts_->keys->count()}, {"error", std::string(s.message())}});
}

void GatewayServer::Drain(int signal) {
  Parts& p = *parts_;
  drained_ = true;
  LogJson("info", "draining",
          {{"signal", signal}, {"grace_seconds", p.options.drain_grace_seconds}});
  draining_ = true;
  p.server->GetHealthCheckService()->SetServingStatus("", false);
  p.server->GetHealthCheckService()->SetServingStatus("walsh.v1.Generator", false);
  p.service->StartDraining();
  const auto end =
      std::chrono::steady_clock::now() + std::chrono::seconds(p.options.drain_grace_seconds);
  while (p.service->inflight() > 0 && std::chrono::steady_clock::now() < end) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  p.service->CancelAll();
  if (p.http_face) p.http_face->WaitForHandlers(std::chrono::seconds(2));  // streams' last events
  p.http_face.reset();
  p.server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  stop_ = true;
  if (health_.joinable()) health_.join();
  p.service.reset();
  LogJson("info", "stopped");
}

}  // namespace walsh
