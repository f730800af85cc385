#include "common/metrics_http_server.h"

#include <civetweb.h>

#include <cstring>

#include "absl/strings/str_cat.h"

namespace walsh {
namespace {

int HandleMetrics(mg_connection* conn, void* data) {
  const std::string body = static_cast<MetricsRegistry*>(data)->Serialize();
  mg_printf(conn,
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n"
            "Content-Length: %zu\r\nConnection: close\r\n\r\n",
            body.size());
  mg_write(conn, body.data(), body.size());
  return 200;
}

}  // namespace

absl::StatusOr<std::unique_ptr<MetricsHttpServer>> MetricsHttpServer::Start(
    const std::string& listen, MetricsRegistry* registry) {
  std::unique_ptr<MetricsHttpServer> s(new MetricsHttpServer());
  s->registry_ = registry;
  mg_init_library(0);
  const char* options[] = {"listening_ports", listen.c_str(), "num_threads", "2", nullptr};
  mg_callbacks callbacks;
  std::memset(&callbacks, 0, sizeof callbacks);
  s->ctx_ = mg_start(&callbacks, nullptr, options);
  if (s->ctx_ == nullptr) {
    return absl::UnavailableError(absl::StrCat("cannot serve metrics on ", listen));
  }
  mg_set_request_handler(s->ctx_, "/metrics", HandleMetrics, registry);
  mg_server_port ports[4];
  const int n = mg_get_server_ports(s->ctx_, 4, ports);
  if (n < 1) return absl::UnavailableError("metrics server has no port");
  s->port_ = ports[0].port;
  return s;
}

MetricsHttpServer::~MetricsHttpServer() {
  if (ctx_ != nullptr) mg_stop(ctx_);
}

}  // namespace walsh
