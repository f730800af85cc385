#include "common/metrics_http_server.h"

#include <microhttpd.h>
#include <unistd.h>

#include <string>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "common/listen_socket.h"

namespace walsh {
namespace {

MHD_Result Respond(MHD_Connection* connection, unsigned int status, const std::string& body,
                   const char* content_type) {
  MHD_Response* response = MHD_create_response_from_buffer(
      body.size(), const_cast<char*>(body.data()), MHD_RESPMEM_MUST_COPY);
  if (response == nullptr) return MHD_NO;
  MHD_add_response_header(response, MHD_HTTP_HEADER_CONTENT_TYPE, content_type);
  const MHD_Result queued = MHD_queue_response(connection, status, response);
  MHD_destroy_response(response);
  return queued;
}

MHD_Result Answer(void* registry, MHD_Connection* connection, const char* url, const char* method,
                  const char*, const char*, size_t* upload_size, void** request) {
  // The first call of a request sees its headers only; answer on the next, once any body has
  // been read (and dropped).
  if (*request == nullptr) {
    *request = registry;
    return MHD_YES;
  }
  if (*upload_size > 0) {
    *upload_size = 0;
    return MHD_YES;
  }
  if (std::string_view(url) != "/metrics") {
    return Respond(connection, MHD_HTTP_NOT_FOUND, "not found: only /metrics is served\n",
                   "text/plain");
  }
  if (std::string_view(method) != MHD_HTTP_METHOD_GET &&
      std::string_view(method) != MHD_HTTP_METHOD_HEAD) {
    return Respond(connection, MHD_HTTP_METHOD_NOT_ALLOWED, "GET /metrics\n", "text/plain");
  }
  return Respond(connection, MHD_HTTP_OK, static_cast<MetricsRegistry*>(registry)->Serialize(),
                 "text/plain; version=0.0.4; charset=utf-8");
}

}  // namespace

absl::StatusOr<std::unique_ptr<MetricsHttpServer>> MetricsHttpServer::Start(
    const std::string& listen, MetricsRegistry* registry) {
  absl::StatusOr<int> fd = ListenSocket(listen, "--metrics-listen");
  if (!fd.ok()) return fd.status();
  std::unique_ptr<MetricsHttpServer> s(new MetricsHttpServer());
  s->port_ = BoundPort(*fd);
  s->daemon_ = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL, 0, nullptr,
                                nullptr, &Answer, registry, MHD_OPTION_LISTEN_SOCKET, *fd,
                                MHD_OPTION_CONNECTION_TIMEOUT, 30u, MHD_OPTION_END);
  if (s->daemon_ == nullptr) {
    close(*fd);
    return absl::UnavailableError(absl::StrCat("cannot serve metrics on ", listen));
  }
  return s;
}

MetricsHttpServer::~MetricsHttpServer() {
  if (daemon_ != nullptr) MHD_stop_daemon(daemon_);
}

}  // namespace walsh
