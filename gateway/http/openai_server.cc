#include "gateway/http/openai_server.h"

#include <civetweb.h>

#include <algorithm>
#include <cstring>
#include <ctime>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/json_log.h"
#include "gateway/key_limiter.h"

namespace walsh {
namespace {

// An idle keep-alive connection holds its thread this long (clients reuse sooner: Node's 4 s).
constexpr int kKeepAliveTimeoutMs = 5000;

// How often a request waiting for a routable worker looks again.
constexpr auto kWorkerPoll = std::chrono::milliseconds(20);

// The route label of a path: one of the API's, or "other" (bounded label values).
std::string RouteOf(const std::string& path) {
  for (const char* r : {"/v1/chat/completions", "/v1/completions", "/v1/models", "/health"}) {
    if (path == r) return r;
  }
  return "other";
}

}  // namespace

OpenAiServer::OpenAiServer(OpenAiServerOptions options, grpc::Server* grpc_server, WorkerPool* pool,
                           GatewayMetrics* metrics)
    : options_(std::move(options)),
      pool_(pool),
      metrics_(metrics),
      stub_(v1::Generator::NewStub(grpc_server->InProcessChannel(grpc::ChannelArguments()))),
      started_(static_cast<int64_t>(std::time(nullptr))) {}

absl::StatusOr<std::unique_ptr<OpenAiServer>> OpenAiServer::Start(OpenAiServerOptions options,
                                                                  grpc::Server* grpc_server,
                                                                  WorkerPool* pool,
                                                                  GatewayMetrics* metrics) {
  std::unique_ptr<OpenAiServer> s(new OpenAiServer(std::move(options), grpc_server, pool, metrics));
  // Plaintext only: Debian's civetweb 1.15 loads OpenSSL 3 at run time and calls
  // SSL_get_peer_certificate, which OpenSSL 3 no longer exports (its first HTTPS request
  // crashes), so TLS is a proxy's or an ingress's job (docs/openai.md §Limits).
  mg_init_library(0);
  const std::string threads = std::to_string(s->options_.max_connections);
  const std::string keep_alive = std::to_string(kKeepAliveTimeoutMs);
  // Headers and body go out as separate writes: without tcp_nodelay, Nagle holds the body
  // for the client's delayed ACK (~40 ms per whole answer).
  // clang-format off
  const char* mg_options[] = {
      "listening_ports", s->options_.listen.c_str(),
      "num_threads", threads.c_str(),
      "enable_keep_alive", "yes",
      "keep_alive_timeout_ms", keep_alive.c_str(),
      "tcp_nodelay", "1",
      nullptr};
  // clang-format on
  mg_callbacks callbacks;
  std::memset(&callbacks, 0, sizeof callbacks);
  s->ctx_ = mg_start(&callbacks, nullptr, mg_options);
  if (s->ctx_ == nullptr) {
    return absl::UnavailableError(
        absl::StrCat("--http-listen: cannot listen on ", s->options_.listen));
  }
  mg_set_request_handler(s->ctx_, "/", &OpenAiServer::Dispatch, s.get());
  mg_server_port ports[4];
  if (mg_get_server_ports(s->ctx_, 4, ports) < 1) {
    return absl::UnavailableError("--http-listen: the server has no port");
  }
  s->port_ = ports[0].port;
  return s;
}

OpenAiServer::~OpenAiServer() {
  if (ctx_ != nullptr) mg_stop(ctx_);
}

void OpenAiServer::WaitForHandlers(std::chrono::milliseconds timeout) {
  MutexLock l(&mu_);
  const absl::Time end = absl::Now() + absl::FromChrono(timeout);
  while (handlers_ > 0) {
    const absl::Duration left = end - absl::Now();
    if (left <= absl::ZeroDuration() || idle_.WaitWithTimeout(&mu_, left)) break;
  }
}

int OpenAiServer::Dispatch(mg_connection* conn, void* self) {
  auto* server = static_cast<OpenAiServer*>(self);
  const auto start = std::chrono::steady_clock::now();
  {
    MutexLock l(&server->mu_);
    ++server->handlers_;
  }
  HttpExchange x(conn);
  const std::string route = RouteOf(x.path());
  server->Serve(x, route);
  // 499: the client hung up before its answer was whole (nginx's code).
  const int code = x.status() == 0 || x.client_gone() ? 499 : x.status();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  server->metrics_->http_requests.counter({route, std::to_string(code)}).Inc();
  server->metrics_->http_duration.histogram({route}).Observe(seconds);
  if (route != "/health") {
    LogJson("info", "http_request",
            {{"request_id", x.request_id()},
             {"client", server->ClientAddress(x)},
             {"method", x.method()},
             {"route", route},
             {"status", code},
             {"seconds", seconds}});
  }
  {
    MutexLock l(&server->mu_);
    if (--server->handlers_ == 0) server->idle_.SignalAll();
  }
  return code;
}

void OpenAiServer::Serve(HttpExchange& x, const std::string& route) {
  const bool post = route == "/v1/chat/completions" || route == "/v1/completions";
  if (route == "other") {
    x.SendError({404, absl::StrCat("no route ", x.method(), " ", x.path()), "invalid_request_error",
                 "", "not_found"});
  } else if (x.method() != (post ? "POST" : "GET")) {
    x.SendError({405, absl::StrCat(route, " takes ", post ? "POST" : "GET", ", not ", x.method()),
                 "invalid_request_error", "", "method_not_allowed"});
  } else if (route == "/health") {
    if (options_.ready && options_.ready()) {
      x.SendJson(200, {{"status", "ok"}});
    } else {
      x.SendError({503, "no worker is ready, or the gateway is draining",
                   "service_unavailable_error", "", ""});
    }
  } else if (grpc::Status auth = Authorize(x); !auth.ok()) {
    x.SendError(FromGrpcStatus(auth, {}));  // before the body is read or parsed
  } else if (route == "/v1/models") {
    ListModels(x);
  } else {
    Generate(x, route == "/v1/chat/completions");
  }
}

grpc::Status OpenAiServer::Authorize(const HttpExchange& x) const {
  if (options_.api_keys == nullptr) return grpc::Status::OK;
  return options_.api_keys->CheckValues(x.HeaderValues("Authorization"));
}

std::multimap<std::string, std::string> OpenAiServer::CallMetadata(const HttpExchange& x) const {
  std::multimap<std::string, std::string> md;
  // gRPC aborts the process on a metadata value outside printable ASCII: such a header is not
  // a key anyway (a gateway with keys refused it already), so it is not passed on.
  for (const std::string& value : x.HeaderValues("Authorization")) {
    const bool printable =
        std::all_of(value.begin(), value.end(), [](char ch) { return ch >= 0x20 && ch <= 0x7e; });
    if (printable) md.emplace("authorization", value);
  }
  md.emplace(kHttpClientHeader, ClientAddress(x));
  md.emplace(kHttpCallTokenHeader, HttpCallToken());
  return md;
}

std::string OpenAiServer::ClientAddress(const HttpExchange& x) const {
  return options_.trusted_proxies.ClientAddress(x.remote_address(),
                                                x.HeaderValues("X-Forwarded-For"));
}

std::string OpenAiServer::ServedName(const v1::ModelInfo& info) const {
  if (!options_.served_model_name.empty()) return options_.served_model_name;
  return info.name().empty() ? info.architecture() : info.name();
}

grpc::Status OpenAiServer::CallModelInfo(HttpExchange& x, v1::ModelInfo* info) {
  grpc::ClientContext context;
  for (const auto& [k, v] : CallMetadata(x)) context.AddMetadata(k, v);
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  return stub_->GetModelInfo(&context, v1::GetModelInfoRequest(), info);
}

bool OpenAiServer::WaitForWorker(HttpExchange& x) {
  const auto end = std::chrono::steady_clock::now() + options_.worker_wait;
  while (pool_->Candidates().empty()) {
    if (std::chrono::steady_clock::now() >= end || x.PeerGone()) return false;
    std::this_thread::sleep_for(kWorkerPoll);
  }
  return true;
}

absl::variant<v1::ModelInfo, ApiError> OpenAiServer::FleetModel(HttpExchange& x) {
  if (!WaitForWorker(x)) {
    return ApiError{503, "no worker is ready", "service_unavailable_error", "", ""};
  }
  const std::string fingerprint = pool_->fingerprint();
  {
    MutexLock l(&mu_);
    if (!fingerprint.empty() && fingerprint == info_fingerprint_) return info_;
  }
  v1::ModelInfo info;
  if (grpc::Status s = CallModelInfo(x, &info); !s.ok()) return FromGrpcStatus(s, {});
  MutexLock l(&mu_);
  info_fingerprint_ = info.contract_fingerprint();
  info_ = info;
  return info;
}

void OpenAiServer::ListModels(HttpExchange& x) {
  if (!WaitForWorker(x)) {
    return x.SendError({503, "no worker is ready", "service_unavailable_error", "", ""});
  }
  v1::ModelInfo info;
  if (grpc::Status s = CallModelInfo(x, &info); !s.ok()) {
    return x.SendError(FromGrpcStatus(s, {}));
  }
  const std::string name = ServedName(info);
  x.SendJson(200, {{"object", "list"},
                   {"data",
                    {{{"id", name},
                      {"object", "model"},
                      {"created", started_},
                      {"owned_by", "walsh"},
                      {"root", name},
                      {"max_model_len", info.max_context()},
                      {"walsh",
                       {{"architecture", info.architecture()},
                        {"weight_format", info.weight_format()},
                        {"contract_fingerprint", info.contract_fingerprint()}}}}}}});
}

}  // namespace walsh
