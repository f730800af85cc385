// Serves a MetricsRegistry at GET /metrics over HTTP (libmicrohttpd, one thread of its own),
// content type "text/plain; version=0.0.4". Stops when destroyed, at once: a process's exit and
// an in-process server's teardown wait for no poll timeout.
#ifndef WALSH_COMMON_METRICS_HTTP_SERVER_H_
#define WALSH_COMMON_METRICS_HTTP_SERVER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/metrics.h"

struct MHD_Daemon;

namespace walsh {

class MetricsHttpServer {
 public:
  // `listen` is host:port; port 0 picks a free one (see port()).
  static absl::StatusOr<std::unique_ptr<MetricsHttpServer>> Start(const std::string& listen,
                                                                  MetricsRegistry* registry);
  ~MetricsHttpServer();
  MetricsHttpServer(const MetricsHttpServer&) = delete;
  MetricsHttpServer& operator=(const MetricsHttpServer&) = delete;

  int port() const { return port_; }

 private:
  MetricsHttpServer() = default;
  MHD_Daemon* daemon_ = nullptr;
  int port_ = 0;
};

}  // namespace walsh

#endif  // WALSH_COMMON_METRICS_HTTP_SERVER_H_
