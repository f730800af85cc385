#include "openai/openai_server.h"

#include <algorithm>
#include <cstring>
#include <ctime>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/grpc_status.h"
#include "common/json_log.h"
#include "common/status_macros.h"

namespace walsh {
namespace {

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

OpenAiServer::OpenAiServer(OpenAiServerOptions options, grpc::Server* grpc_server,
                           HttpMetrics* metrics)
    : options_(std::move(options)),
      metrics_(metrics),
      stub_(v1::Generator::NewStub(grpc_server->InProcessChannel(grpc::ChannelArguments()))),
      started_(static_cast<int64_t>(std::time(nullptr))) {}

absl::StatusOr<std::unique_ptr<OpenAiServer>> OpenAiServer::Start(OpenAiServerOptions options,
                                                                  grpc::Server* grpc_server,
                                                                  HttpMetrics* metrics) {
  std::unique_ptr<OpenAiServer> s(new OpenAiServer(std::move(options), grpc_server, metrics));
  auto media = MediaFetcher::Create(s->options_.media);
  if (!media.ok()) return media.status();
  s->media_ = std::move(*media);
  OpenAiServer* self = s.get();
  auto http = HttpServer::Start(
      s->options_.http, [self](const HttpExchange& x) { return self->CheckHead(x); },
      [self](HttpExchange& x) { self->Handle(x); },
      [self](const HttpExchange& x, int status, double seconds) {
        self->Record(x, status, seconds);
      });
  if (!http.ok()) return http.status();
  s->http_ = std::move(*http);
  return s;
}

OpenAiServer::~OpenAiServer() { http_.reset(); }

void OpenAiServer::WaitForHandlers(std::chrono::milliseconds timeout) {
  MutexLock l(&mu_);
  const absl::Time end = absl::Now() + absl::FromChrono(timeout);
  while (handlers_ > 0) {
    const absl::Duration left = end - absl::Now();
    if (left <= absl::ZeroDuration() || idle_.WaitWithTimeout(&mu_, left)) break;
  }
}

absl::optional<ApiError> OpenAiServer::CheckHead(const HttpExchange& x) const {
  const std::string route = RouteOf(x.path());
  const bool v1 =
      route == "/v1/chat/completions" || route == "/v1/completions" || route == "/v1/models";
  if (!v1) return absl::nullopt;
  if (absl::Status auth = Authorize(x); !auth.ok()) return ApiErrorOf(auth);
  return absl::nullopt;
}

void OpenAiServer::Handle(HttpExchange& x) {
  {
    MutexLock l(&mu_);
    ++handlers_;
  }
  Serve(x, RouteOf(x.path()));
  MutexLock l(&mu_);
  if (--handlers_ == 0) idle_.SignalAll();
}

void OpenAiServer::Record(const HttpExchange& x, int status, double seconds) const {
  const std::string route = RouteOf(x.path());
  metrics_->requests.counter({route, std::to_string(status)}).Inc();
  metrics_->duration.histogram({route}).Observe(seconds);
  if (x.stalled()) metrics_->stalled_streams.Inc();
  if (route != "/health") {
    LogJson("info", "http_request",
            {{"request_id", x.request_id()},
             {"client", ClientAddress(x)},
             {"method", x.method()},
             {"route", route},
             {"status", status},
             {"seconds", seconds}});
  }
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
  } else if (route == "/v1/models") {
    ListModels(x);
  } else {
    Generate(x, route == "/v1/chat/completions");
  }
}

absl::Status OpenAiServer::Authorize(const HttpExchange& x) const {
  if (options_.api_keys == nullptr) return absl::OkStatus();
  return options_.api_keys->Check(x.HeaderValues("Authorization"));
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
  if (options_.call_metadata) options_.call_metadata(ClientAddress(x), &md);
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

absl::StatusOr<v1::ModelInfo> OpenAiServer::CallModelInfo(HttpExchange& x) {
  grpc::ClientContext context;
  for (const auto& [k, v] : CallMetadata(x)) context.AddMetadata(k, v);
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  v1::ModelInfo info;
  RETURN_IF_ERROR(FromGrpcStatus(stub_->GetModelInfo(&context, v1::GetModelInfoRequest(), &info)));
  return info;
}

bool OpenAiServer::WaitForWorker(HttpExchange& x) {
  const auto end = std::chrono::steady_clock::now() + options_.worker_wait;
  while (!options_.routable()) {
    if (std::chrono::steady_clock::now() >= end || x.PeerGone()) return false;
    std::this_thread::sleep_for(kWorkerPoll);
  }
  return true;
}

absl::StatusOr<v1::ModelInfo> OpenAiServer::FleetModel(HttpExchange& x) {
  if (!WaitForWorker(x)) return absl::UnavailableError("no worker is ready");
  const std::string fingerprint = options_.fingerprint ? options_.fingerprint() : "";
  {
    MutexLock l(&mu_);
    if (!fingerprint.empty() && fingerprint == info_fingerprint_) return info_;
  }
  ASSIGN_OR_RETURN(v1::ModelInfo info, CallModelInfo(x));
  MutexLock l(&mu_);
  info_fingerprint_ = info.contract_fingerprint();
  info_ = info;
  return info;
}

void OpenAiServer::ListModels(HttpExchange& x) {
  if (!WaitForWorker(x))
    return x.SendError(ApiErrorOf(absl::UnavailableError("no worker is ready")));
  absl::StatusOr<v1::ModelInfo> fetched = CallModelInfo(x);
  if (!fetched.ok()) return x.SendError(ApiErrorOf(fetched.status()));
  const v1::ModelInfo& info = *fetched;
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
