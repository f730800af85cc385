// The OpenAI-compatible HTTP API (docs/openai.md): POST /v1/chat/completions,
// POST /v1/completions, GET /v1/models and GET /health, over HTTP or HTTPS (HttpServer: idle
// and slow connections hold no thread). Generation requests become Generate calls on the
// serving process's own walsh.v1 gRPC service over an in-process channel: the gateway's (so API
// keys, limits, admission, routing, retries and migration are the gRPC path's, unchanged) or a
// worker's (its own model server, for the Gateway API Inference Extension). A client that hangs
// up cancels its call, which frees the worker's slot.
#ifndef WALSH_OPENAI_OPENAI_SERVER_H_
#define WALSH_OPENAI_OPENAI_SERVER_H_

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/api_keys.h"
#include "common/mutex.h"
#include "common/trusted_proxies.h"
#include "grpcpp/grpcpp.h"
#include "openai/http_exchange.h"
#include "openai/http_metrics.h"
#include "openai/http_server.h"
#include "openai/media_fetcher.h"
#include "openai/openai_request.h"
#include "walsh/v1/generator.grpc.pb.h"

namespace walsh {

struct OpenAiServerOptions {
  HttpServerOptions http;  // listen, TLS, connections, deadlines, body and stream buffer limits
  std::string served_model_name;                  // empty: the model's general.name
  std::chrono::milliseconds disconnect_poll{20};  // how often a waiting request checks its client
  std::function<bool()> ready;                    // /health: true while the process takes requests
  std::function<bool()> routable;  // a generation can be sent now (else it waits worker_wait)
  // The model's contract fingerprint as known now (empty: unknown): its info is asked once per
  // fingerprint.
  std::function<std::string()> fingerprint;
  // Metadata added to every call, given the client's address (the gateway's per-client limits).
  std::function<void(const std::string& client, std::multimap<std::string, std::string>*)>
      call_metadata;
  const ApiKeys* api_keys = nullptr;  // checked before a /v1 request's body is read
  // How long a request waits for a routable worker before 503 (the gRPC path's --worker-wait-ms).
  std::chrono::milliseconds worker_wait{2000};
  // Recognize special tokens written in chat content, tools and arguments (as Hugging Face
  // templates do); off: they stay text, so a client cannot write a control token.
  bool chat_content_special_tokens = false;
  TrustedProxies trusted_proxies;  // peers whose X-Forwarded-For names the client
  MediaFetchOptions media;         // images by http(s) URL (--allowed-media-domains)
};

class OpenAiServer {
 public:
  // `grpc_server` is the process's started gRPC server, serving walsh.v1.Generator (its
  // in-process channel carries the calls).
  static absl::StatusOr<std::unique_ptr<OpenAiServer>> Start(OpenAiServerOptions options,
                                                             grpc::Server* grpc_server,
                                                             HttpMetrics* metrics);
  ~OpenAiServer();  // stops listening and waits for every handler to return
  OpenAiServer(const OpenAiServer&) = delete;
  OpenAiServer& operator=(const OpenAiServer&) = delete;

  int port() const { return http_->port(); }
  // Waits until no request is being handled, or `timeout` (the drain: after the gateway's
  // streams were ended, their handlers write the final events before the server stops).
  void WaitForHandlers(std::chrono::milliseconds timeout) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  OpenAiServer(OpenAiServerOptions options, grpc::Server* grpc_server, HttpMetrics* metrics);
  void Handle(HttpExchange& x) ABSL_LOCKS_EXCLUDED(mu_);
  void Serve(HttpExchange& x, const std::string& route);
  // Before the body is read: a /v1 request without a valid key is refused.
  absl::optional<ApiError> CheckHead(const HttpExchange& x) const;
  void Record(const HttpExchange& x, int status, double seconds) const;
  void Generate(HttpExchange& x, bool chat);
  // Fills each image the request names by URL, or says which one failed (a FieldError).
  absl::Status FetchImages(OpenAiRequest& r) const;
  void ListModels(HttpExchange& x);
  absl::Status Authorize(const HttpExchange& x) const;
  // Whether a worker is routable now or becomes so within worker_wait (false at once when the
  // client hangs up meanwhile).
  bool WaitForWorker(HttpExchange& x);
  // The fleet's model, asked of a worker once per contract fingerprint.
  absl::StatusOr<v1::ModelInfo> FleetModel(HttpExchange& x);
  absl::StatusOr<v1::ModelInfo> CallModelInfo(HttpExchange& x);
  std::multimap<std::string, std::string> CallMetadata(const HttpExchange& x) const;
  // The client's address: the peer's, or behind a trusted proxy the one it forwards.
  std::string ClientAddress(const HttpExchange& x) const;
  std::string ServedName(const v1::ModelInfo& info) const;

  const OpenAiServerOptions options_;
  HttpMetrics* metrics_;
  std::unique_ptr<v1::Generator::Stub> stub_;
  const int64_t started_ = 0;  // unix time, the models' "created"
  std::unique_ptr<MediaFetcher> media_;
  std::unique_ptr<HttpServer> http_;  // last: stopped first, while the rest still stands

  Mutex mu_;
  std::string info_fingerprint_ ABSL_GUARDED_BY(mu_);
  v1::ModelInfo info_ ABSL_GUARDED_BY(mu_);
  int64_t handlers_ ABSL_GUARDED_BY(mu_) = 0;  // requests being handled
  CondVar idle_;
};

}  // namespace walsh

#endif  // WALSH_OPENAI_OPENAI_SERVER_H_
