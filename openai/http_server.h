// An HTTP/1.1 server (libmicrohttpd, HTTPS through GnuTLS) whose connections cost no thread
// until a request is whole: one I/O thread reads every connection with epoll, so idle, slow and
// trickling clients hold a socket each, never a handler. A whole request runs on a handler
// thread (at most max_handlers at once, the rest wait), which answers with blocking calls on
// its HttpExchange. The I/O thread enforces the deadlines libmicrohttpd lacks (docs/openai.md
// §Connections): an idle connection must start a request within idle_timeout, a started request
// must send its headers within header_timeout and its body within body_timeout (408), and a body
// may not exceed max_body_bytes (413). Connections beyond max_connections_per_client from one
// client (an address; IPv6 by its /ipv6_prefix_bits network) are closed as they arrive; past
// max_connections, a reserve of reserve_connections more may ask for reserve_path alone, once
// each (the health check; anything else gets 503 with Retry-After, and either answer closes the
// connection), and beyond it they are closed as they arrive: never left waiting in the kernel's
// backlog.
#ifndef WALSH_OPENAI_HTTP_SERVER_H_
#define WALSH_OPENAI_HTTP_SERVER_H_

#include <atomic>
#include <chrono>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/types/optional.h"
#include "common/mutex.h"
#include "openai/api_error.h"
#include "openai/http_exchange.h"

struct MHD_Daemon;
struct MHD_Connection;

namespace walsh {

struct HttpServerOptions {
  std::string listen;                     // host:port; port 0 picks a free one
  std::string tls_cert_pem, tls_key_pem;  // both set: HTTPS only
  int64_t max_connections = 1024;         // open at once, idle ones included
  int64_t max_connections_per_client = 256;
  int ipv6_prefix_bits = 64;         // one client per IPv6 network of this size
  int64_t reserve_connections = 16;  // past max_connections, for reserve_path only
  std::string reserve_path = "/health";
  int64_t max_handlers = 256;           // requests answered at once; more wait for a handler
  int64_t max_body_bytes = 3 << 20;     // beyond: 413
  int64_t max_header_bytes = 64 << 10;  // the request line and headers (and the I/O buffers)
  std::chrono::milliseconds idle_timeout{60000};    // from accept or the last answer to a request
  std::chrono::milliseconds header_timeout{10000};  // from the request line to its last header
  std::chrono::milliseconds body_timeout{30000};    // from the last header to the body's end
  HttpStreamLimits stream;
};

class HttpServer {
 public:
  // Runs on the I/O thread once a request's headers are in, before its body is read (so it must
  // be quick): an error is the answer, and the body is never read.
  using HeadCheck = std::function<absl::optional<ApiError>(const HttpExchange&)>;
  // Runs on a handler thread with the whole request; answers through the exchange.
  using Handler = std::function<void(HttpExchange&)>;
  // Runs on the I/O thread once per request when it is over: the status the client got (499:
  // it went away first) and the seconds since its headers arrived.
  using Finished = std::function<void(const HttpExchange&, int status, double seconds)>;

  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(HttpServerOptions options,
                                                           HeadCheck head_check, Handler handler,
                                                           Finished finished);
  // Stops accepting, lets every handler return and its answer go out (briefly), then closes.
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  int port() const { return port_; }
  bool tls() const { return !options_.tls_cert_pem.empty(); }

 private:
  struct Connection;
  struct Request;

  HttpServer(HttpServerOptions options, HeadCheck head_check, Handler handler, Finished finished);
  void RunIo();
  // Whether a connection from `client` (AddressGroup) may open now: the I/O thread's accept
  // policy, so refused ones are closed at once.
  bool Admits(const std::string& client) const;
  void Sweep(std::chrono::steady_clock::time_point now);
  void RunHandlers() ABSL_LOCKS_EXCLUDED(mu_);
  void Dispatch(std::shared_ptr<HttpExchange> x) ABSL_LOCKS_EXCLUDED(mu_);
  // An answer written straight to the socket, which is then shut: for the deadlines and limits
  // met while a request is still arriving, when libmicrohttpd can no longer queue one.
  void AnswerAndClose(Connection& c, int status, const char* reason, const std::string& message);

  friend struct HttpServerCallbacks;  // libmicrohttpd's callbacks (all on the I/O thread)

  const HttpServerOptions options_;
  const HeadCheck head_check_;
  const Handler handler_;
  const Finished finished_;
  MHD_Daemon* daemon_ = nullptr;
  int listen_fd_ = -1;
  int wake_fd_ = -1;  // an eventfd: a handler resumed a connection
  int port_ = 0;
  std::thread io_;
  std::atomic<bool> quiesce_{false}, stop_io_{false};
  // Owned by the I/O thread: every open connection, for the sweep.
  std::vector<Connection*> connections_;
  absl::flat_hash_map<std::string, int64_t> per_client_;  // open connections by client
  std::chrono::steady_clock::time_point last_sweep_;
  std::atomic<int64_t> open_requests_{0};

  Mutex mu_;
  CondVar work_;
  std::deque<std::shared_ptr<HttpExchange>> queue_ ABSL_GUARDED_BY(mu_);
  std::vector<std::thread> handlers_ ABSL_GUARDED_BY(mu_);
  int64_t idle_handlers_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace walsh

#endif  // WALSH_OPENAI_HTTP_SERVER_H_
