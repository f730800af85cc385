#include "openai/http_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <gnutls/gnutls.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/listen_socket.h"
#include "common/trusted_proxies.h"
#include "openai/json_text.h"

namespace walsh {
namespace {

using Clock = std::chrono::steady_clock;

// How often the I/O thread wakes, at least, to enforce the deadlines.
constexpr int kSweepMs = 100;
// How long a closing server lets the answers of its last handlers go out.
constexpr auto kFlushOnClose = std::chrono::seconds(2);
constexpr size_t kEventBlockBytes = 16 << 10;
// Connections libmicrohttpd may still count after they closed, before its cleanup: its own cap
// sits this far above ours, so it never stops accepting first.
constexpr int64_t kLimitSlack = 64;

std::string AddressText(const sockaddr* addr) {
  char text[INET6_ADDRSTRLEN] = "";
  if (addr == nullptr) return "";
  if (addr->sa_family == AF_INET6) {
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(addr)->sin6_addr, text, sizeof text);
  } else if (addr->sa_family == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(addr)->sin_addr, text, sizeof text);
  }
  return text;
}

}  // namespace

// Where a connection is in its life, for the deadlines of the sweep.
struct HttpServer::Connection {
  enum class Phase { kIdle, kHeaders, kBody, kAnswering };
  MHD_Connection* mhd = nullptr;
  int fd = -1;
  std::string remote;
  std::string client;    // the remote's AddressGroup, as per-client limits count it
  bool reserve = false;  // opened past max_connections: reserve_path only
  Phase phase = Phase::kIdle;
  Clock::time_point since = Clock::now();
  bool shut = false;                       // the sweep closed it; libmicrohttpd has yet to notice
  HttpServer::Request* request = nullptr;  // the one whose headers are in, until it is over
};

// One request on a connection (libmicrohttpd's per-request pointer).
struct HttpServer::Request {
  std::shared_ptr<HttpExchange> x;
  bool dispatched = false;
};

struct HttpServerCallbacks {
  static HttpServer::Connection* ConnectionOf(MHD_Connection* conn) {
    const MHD_ConnectionInfo* info =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return info == nullptr ? nullptr : static_cast<HttpServer::Connection*>(info->socket_context);
  }

  static void OnConnection(void* cls, MHD_Connection* conn, void** socket_context,
                           MHD_ConnectionNotificationCode what) {
    auto* s = static_cast<HttpServer*>(cls);
    if (what == MHD_CONNECTION_NOTIFY_STARTED) {
      auto* c = new HttpServer::Connection;
      c->mhd = conn;
      if (const MHD_ConnectionInfo* i =
              MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD)) {
        c->fd = i->connect_fd;
        // The kernel's copy is bounded too: without this, its send buffer grows to megabytes
        // for a client that does not read, before the stream's own buffer even fills.
        const int bytes = static_cast<int>(s->options_.stream.max_buffered_bytes);
        setsockopt(c->fd, SOL_SOCKET, SO_SNDBUF, &bytes, sizeof bytes);
      }
      if (const MHD_ConnectionInfo* i =
              MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS)) {
        c->remote = AddressText(i->client_addr);
      }
      c->client = AddressGroup(c->remote, s->options_.ipv6_prefix_bits);
      c->reserve = static_cast<int64_t>(s->connections_.size()) >= s->options_.max_connections;
      ++s->per_client_[c->client];
      s->connections_.push_back(c);
      *socket_context = c;
      return;
    }
    auto* c = static_cast<HttpServer::Connection*>(*socket_context);
    if (c == nullptr) return;
    if (auto it = s->per_client_.find(c->client); it != s->per_client_.end() && --it->second <= 0) {
      s->per_client_.erase(it);
    }
    s->connections_.erase(std::find(s->connections_.begin(), s->connections_.end(), c));
    delete c;
    *socket_context = nullptr;
  }

  static void* OnRequestLine(void* cls, const char* /*uri*/, MHD_Connection* conn) {
    (void)cls;
    if (HttpServer::Connection* c = ConnectionOf(conn)) {
      c->phase = HttpServer::Connection::Phase::kHeaders;
      c->since = Clock::now();
    }
    return nullptr;
  }

  static void OnCompleted(void* cls, MHD_Connection* conn, void** request,
                          MHD_RequestTerminationCode why) {
    auto* s = static_cast<HttpServer*>(cls);
    if (HttpServer::Connection* c = ConnectionOf(conn)) {
      c->phase = HttpServer::Connection::Phase::kIdle;
      c->since = Clock::now();
      c->request = nullptr;
    }
    auto* r = static_cast<HttpServer::Request*>(*request);
    if (r == nullptr) return;
    *request = nullptr;
    r->x->MarkClosed();
    const int status = r->x->FinalStatus(why == MHD_REQUEST_TERMINATED_COMPLETED_OK);
    const double seconds = std::chrono::duration<double>(Clock::now() - r->x->started_).count();
    if (s->finished_) s->finished_(*r->x, status, seconds);
    delete r;
    --s->open_requests_;
  }

  static MHD_Result OnAccess(void* cls, MHD_Connection* conn, const char* url, const char* method,
                             const char* /*version*/, const char* upload, size_t* upload_size,
                             void** request) {
    auto* s = static_cast<HttpServer*>(cls);
    HttpServer::Connection* c = ConnectionOf(conn);
    if (c == nullptr) return MHD_NO;
    auto* r = static_cast<HttpServer::Request*>(*request);
    if (r == nullptr) return OnHead(s, c, conn, url, method, request);
    HttpExchange& x = *r->x;
    if (*upload_size > 0) {
      if (x.early_status_ != 0) {  // refused: what still comes is dropped
        *upload_size = 0;
        return MHD_YES;
      }
      if (Clock::now() - c->since > s->options_.body_timeout) {
        x.early_status_ = 408;
        s->AnswerAndClose(*c, 408, "Request Timeout",
                          absl::StrCat("the body took longer than ",
                                       s->options_.body_timeout.count() / 1000.0, " s"));
        return MHD_NO;
      }
      if (static_cast<int64_t>(x.body_.size() + *upload_size) > s->options_.max_body_bytes) {
        x.early_status_ = 413;
        s->AnswerAndClose(
            *c, 413, "Content Too Large",
            absl::StrCat("the body exceeds the limit of ", s->options_.max_body_bytes, " bytes"));
        return MHD_NO;
      }
      x.body_.append(upload, *upload_size);
      *upload_size = 0;
      return MHD_YES;
    }
    if (x.early_status_ != 0) return MHD_YES;  // its answer is queued already
    if (!r->dispatched) {
      r->dispatched = true;
      c->phase = HttpServer::Connection::Phase::kAnswering;
      x.MarkSuspended();
      s->Dispatch(r->x);
      return MHD_YES;
    }
    return QueueAnswer(conn, *r);
  }

  // libmicrohttpd's accept policy: MHD_NO closes the connection at once.
  static MHD_Result OnAccept(void* cls, const sockaddr* addr, socklen_t /*len*/) {
    auto* s = static_cast<HttpServer*>(cls);
    return s->Admits(AddressGroup(AddressText(addr), s->options_.ipv6_prefix_bits)) ? MHD_YES
                                                                                    : MHD_NO;
  }

  // The request's headers are in: refuse it now, or read its body.
  static MHD_Result OnHead(HttpServer* s, HttpServer::Connection* c, MHD_Connection* conn,
                           const char* url, const char* method, void** request) {
    HttpRequestHead head{method, url, c->remote, {}};
    MHD_get_connection_values(
        conn, MHD_HEADER_KIND,
        [](void* cls, MHD_ValueKind, const char* key, const char* value) -> MHD_Result {
          static_cast<HttpRequestHead*>(cls)->headers.emplace_back(key, value ? value : "");
          return MHD_YES;
        },
        &head);
    auto* r =
        new HttpServer::Request{std::make_shared<HttpExchange>(std::move(head), s->options_.stream,
                                                               conn, c->fd, s->wake_fd_),
                                false};
    *request = r;
    c->request = r;
    ++s->open_requests_;
    c->phase = HttpServer::Connection::Phase::kBody;
    c->since = Clock::now();
    if (c->reserve && r->x->path() != s->options_.reserve_path) {
      return QueueError(conn, *r,
                        {503,
                         absl::StrCat("the server is at its ", s->options_.max_connections,
                                      " connections (--http-max-connections); retry shortly"),
                         "server_error", "", "too_many_connections"},
                        /*retry_after=*/true);
    }
    int64_t declared = 0;
    if (const char* length =
            MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        length != nullptr && absl::SimpleAtoi(length, &declared) &&
        declared > s->options_.max_body_bytes) {
      return QueueError(conn, *r,
                        {413,
                         absl::StrCat("the body is ", declared, " bytes; the limit is ",
                                      s->options_.max_body_bytes),
                         "invalid_request_error", "", "request_too_large"});
    }
    if (s->head_check_) {
      if (absl::optional<ApiError> e = s->head_check_(*r->x)) return QueueError(conn, *r, *e);
    }
    return MHD_YES;
  }

  static void AddCommonHeaders(MHD_Response* resp, const HttpExchange& x,
                               const std::string& content_type) {
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, content_type.c_str());
    MHD_add_response_header(resp, "x-request-id", x.request_id().c_str());
  }

  static MHD_Result QueueError(MHD_Connection* conn, HttpServer::Request& r, const ApiError& e,
                               bool retry_after = false) {
    r.x->early_status_ = e.http_status;
    const std::string body = JsonText(e.ToJson());
    MHD_Response* resp = MHD_create_response_from_buffer(
        body.size(), const_cast<char*>(body.data()), MHD_RESPMEM_MUST_COPY);
    AddCommonHeaders(resp, *r.x, "application/json");
    if (retry_after) {
      MHD_add_response_header(resp, MHD_HTTP_HEADER_RETRY_AFTER, "1");
      MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
    }
    const MHD_Result ok = MHD_queue_response(conn, static_cast<unsigned>(e.http_status), resp);
    MHD_destroy_response(resp);
    return ok;
  }

  // The handler woke the connection: its answer starts, or it ended without one.
  static MHD_Result QueueAnswer(MHD_Connection* conn, HttpServer::Request& r) {
    HttpExchange& x = *r.x;
    HttpExchange::Answer answer;
    int status;
    std::string content_type, whole;
    {
      MutexLock l(&x.mu_);
      answer = x.answer_;
      status = x.status_;
      content_type = x.content_type_;
      whole.swap(x.whole_);
      if (answer == HttpExchange::Answer::kNone) {
        if (x.handler_done_) return MHD_NO;  // no answer (its client left): close
        x.SuspendLocked();                   // woken early: wait on
        return MHD_YES;
      }
    }
    MHD_Response* resp;
    if (answer == HttpExchange::Answer::kWhole) {
      resp = MHD_create_response_from_buffer(whole.size(), whole.data(), MHD_RESPMEM_MUST_COPY);
    } else {
      resp = MHD_create_response_from_callback(
          MHD_SIZE_UNKNOWN, kEventBlockBytes, &ReadEvents, new std::shared_ptr<HttpExchange>(r.x),
          [](void* cls) { delete static_cast<std::shared_ptr<HttpExchange>*>(cls); });
      MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
      MHD_add_response_header(resp, "X-Accel-Buffering", "no");  // nginx: do not buffer events
    }
    AddCommonHeaders(resp, x, content_type);
    // A reserve connection answers its one request and closes, so it cannot be kept idle.
    if (HttpServer::Connection* c = ConnectionOf(conn); c != nullptr && c->reserve) {
      MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
    }
    const MHD_Result ok = MHD_queue_response(conn, static_cast<unsigned>(status), resp);
    MHD_destroy_response(resp);
    return ok;
  }

  static ssize_t ReadEvents(void* cls, uint64_t /*pos*/, char* buf, size_t max) {
    HttpExchange& x = **static_cast<std::shared_ptr<HttpExchange>*>(cls);
    bool end = false, failed = false;
    const size_t n = x.TakeEvents(buf, max, &end, &failed);
    if (n > 0) return static_cast<ssize_t>(n);
    if (failed) return MHD_CONTENT_READER_END_WITH_ERROR;
    if (end) return MHD_CONTENT_READER_END_OF_STREAM;
    return 0;  // suspended until there is more
  }
};

bool HttpServer::Admits(const std::string& client) const {
  if (static_cast<int64_t>(connections_.size()) >=
      options_.max_connections + options_.reserve_connections) {
    return false;
  }
  auto it = per_client_.find(client);
  return it == per_client_.end() || it->second < options_.max_connections_per_client;
}

HttpServer::HttpServer(HttpServerOptions options, HeadCheck head_check, Handler handler,
                       Finished finished)
    : options_(std::move(options)),
      head_check_(std::move(head_check)),
      handler_(std::move(handler)),
      finished_(std::move(finished)) {}

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(HttpServerOptions options,
                                                              HeadCheck head_check, Handler handler,
                                                              Finished finished) {
  if (options.tls_cert_pem.empty() != options.tls_key_pem.empty()) {
    return absl::InvalidArgumentError("--tls-cert-file and --tls-key-file go together");
  }
  std::unique_ptr<HttpServer> s(new HttpServer(std::move(options), std::move(head_check),
                                               std::move(handler), std::move(finished)));
  absl::StatusOr<int> fd = ListenSocket(s->options_.listen, "--http-listen");
  if (!fd.ok()) return fd.status();
  s->listen_fd_ = *fd;
  s->port_ = BoundPort(*fd);
  s->wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (s->wake_fd_ < 0) return absl::UnavailableError("--http-listen: eventfd failed");
  const HttpServerOptions& o = s->options_;
  auto seconds = [](std::chrono::milliseconds ms) {
    return static_cast<intptr_t>(std::max<int64_t>(1, (ms.count() + 999) / 1000));
  };
  std::vector<MHD_OptionItem> items = {
      {MHD_OPTION_LISTEN_SOCKET, s->listen_fd_, nullptr},
      // The limits are the accept policy's (Admits): libmicrohttpd's own cap, which it meets by
      // no longer accepting (the kernel's backlog holds the rest), is left above them.
      {MHD_OPTION_CONNECTION_LIMIT,
       static_cast<intptr_t>(o.max_connections + o.reserve_connections + kLimitSlack), nullptr},
      // libmicrohttpd's own inactivity timeout backs the sweep's (suspended connections, those
      // waiting for their handler, never time out).
      {MHD_OPTION_CONNECTION_TIMEOUT, seconds(std::max(o.idle_timeout, o.body_timeout)), nullptr},
      {MHD_OPTION_CONNECTION_MEMORY_LIMIT, static_cast<intptr_t>(o.max_header_bytes), nullptr},
      {MHD_OPTION_NOTIFY_COMPLETED, reinterpret_cast<intptr_t>(&HttpServerCallbacks::OnCompleted),
       s.get()},
      {MHD_OPTION_NOTIFY_CONNECTION, reinterpret_cast<intptr_t>(&HttpServerCallbacks::OnConnection),
       s.get()},
      {MHD_OPTION_URI_LOG_CALLBACK, reinterpret_cast<intptr_t>(&HttpServerCallbacks::OnRequestLine),
       s.get()},
  };
  unsigned flags = MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME;
  if (s->tls()) {
    flags |= MHD_USE_TLS;
    items.push_back({MHD_OPTION_HTTPS_MEM_KEY, 0, const_cast<char*>(o.tls_key_pem.c_str())});
    items.push_back({MHD_OPTION_HTTPS_MEM_CERT, 0, const_cast<char*>(o.tls_cert_pem.c_str())});
  }
  items.push_back({MHD_OPTION_END, 0, nullptr});
  s->daemon_ = MHD_start_daemon(flags, 0, &HttpServerCallbacks::OnAccept, s.get(),
                                &HttpServerCallbacks::OnAccess, s.get(), MHD_OPTION_ARRAY,
                                items.data(), MHD_OPTION_END);
  if (s->daemon_ == nullptr) {
    close(s->listen_fd_);
    close(s->wake_fd_);
    s->listen_fd_ = -1;
    return absl::InvalidArgumentError(
        s->tls() ? "--tls-cert-file/--tls-key-file: the HTTP server does not accept them (not a "
                   "PEM certificate chain and its private key?)"
                 : absl::StrCat("--http-listen: cannot serve on ", o.listen));
  }
  s->last_sweep_ = Clock::now();
  s->io_ = std::thread([p = s.get()] { p->RunIo(); });
  return s;
}

HttpServer::~HttpServer() {
  if (daemon_ == nullptr) return;
  quiesce_ = true;  // the I/O thread stops accepting
  std::vector<std::thread> handlers;
  {
    MutexLock l(&mu_);
    stopping_ = true;
    work_.SignalAll();
    handlers.swap(handlers_);
  }
  for (std::thread& t : handlers) t.join();
  // Every handler has returned and woken its connection: no connection stays suspended.
  const auto flush_end = Clock::now() + kFlushOnClose;
  while (open_requests_ > 0 && Clock::now() < flush_end) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  stop_io_ = true;
  io_.join();
  MHD_stop_daemon(daemon_);
  close(wake_fd_);
}

void HttpServer::RunIo() {
  const MHD_DaemonInfo* info = MHD_get_daemon_info(daemon_, MHD_DAEMON_INFO_EPOLL_FD);
  const int epoll_fd = info != nullptr ? info->epoll_fd : -1;
  bool quiesced = false;
  while (!stop_io_) {
    // libmicrohttpd's epoll set, our wake-up, or its own next timeout, whichever comes first.
    int timeout = kSweepMs;
    MHD_UNSIGNED_LONG_LONG mhd_timeout = 0;
    if (MHD_get_timeout(daemon_, &mhd_timeout) == MHD_YES) {
      timeout = static_cast<int>(std::min<MHD_UNSIGNED_LONG_LONG>(mhd_timeout, kSweepMs));
    }
    pollfd fds[2] = {{epoll_fd, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
    if (poll(fds, 2, timeout) > 0 && (fds[1].revents & POLLIN) != 0) {
      uint64_t wakes;
      (void)!read(wake_fd_, &wakes, sizeof wakes);
    }
    MHD_run(daemon_);
    if (quiesce_ && !quiesced) {
      quiesced = true;
      const MHD_socket fd = MHD_quiesce_daemon(daemon_);
      if (fd != MHD_INVALID_SOCKET) close(fd);
    }
    const Clock::time_point now = Clock::now();
    if (now - last_sweep_ >= std::chrono::milliseconds(kSweepMs)) {
      last_sweep_ = now;
      Sweep(now);
    }
  }
}

void HttpServer::Sweep(Clock::time_point now) {
  for (Connection* c : connections_) {
    if (c->shut) continue;
    const auto age = now - c->since;
    switch (c->phase) {
      case Connection::Phase::kIdle:
        if (age > options_.idle_timeout) {
          c->shut = true;
          shutdown(c->fd, SHUT_RDWR);
        }
        break;
      case Connection::Phase::kHeaders:
        if (age > options_.header_timeout) {
          AnswerAndClose(*c, 408, "Request Timeout",
                         absl::StrCat("the headers took longer than ",
                                      options_.header_timeout.count() / 1000.0, " s"));
        }
        break;
      case Connection::Phase::kBody:
        if (age > options_.body_timeout) {
          if (c->request != nullptr) c->request->x->early_status_ = 408;
          AnswerAndClose(*c, 408, "Request Timeout",
                         absl::StrCat("the body took longer than ",
                                      options_.body_timeout.count() / 1000.0, " s"));
        }
        break;
      case Connection::Phase::kAnswering:
        break;
    }
  }
}

void HttpServer::AnswerAndClose(Connection& c, int status, const char* reason,
                                const std::string& message) {
  const std::string body =
      JsonText(ApiError{status, message, "invalid_request_error", "",
                        status == 408 ? "request_timeout" : "request_too_large"}
                   .ToJson());
  const std::string answer = absl::StrCat(
      "HTTP/1.1 ", status, " ", reason,
      "\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: ", body.size(),
      "\r\n\r\n", body);
  // One short write into an empty socket buffer; if it does not fit, the client only sees the
  // connection close.
  if (tls()) {
    const MHD_ConnectionInfo* info =
        MHD_get_connection_info(c.mhd, MHD_CONNECTION_INFO_GNUTLS_SESSION);
    if (info != nullptr && info->tls_session != nullptr) {
      gnutls_record_send(static_cast<gnutls_session_t>(info->tls_session), answer.data(),
                         answer.size());
    }
  } else {
    (void)send(c.fd, answer.data(), answer.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  }
  c.shut = true;
  shutdown(c.fd, SHUT_RDWR);
}

void HttpServer::Dispatch(std::shared_ptr<HttpExchange> x) {
  {
    MutexLock l(&mu_);
    if (!stopping_) {
      queue_.push_back(std::move(x));
      if (idle_handlers_ == 0 && static_cast<int64_t>(handlers_.size()) < options_.max_handlers) {
        handlers_.emplace_back([this] { RunHandlers(); });
      } else {
        work_.Signal();
      }
      return;
    }
  }
  // The handlers are gone or going: nothing may stay suspended when the daemon stops.
  x->SendError({503, "the server is shutting down", "service_unavailable_error", "", ""});
  x->FinishHandler();
}

void HttpServer::RunHandlers() {
  for (;;) {
    std::shared_ptr<HttpExchange> x;
    bool stopping;
    {
      MutexLock l(&mu_);
      ++idle_handlers_;
      while (queue_.empty() && !stopping_) work_.Wait(&mu_);
      --idle_handlers_;
      if (queue_.empty()) return;
      x = std::move(queue_.front());
      queue_.pop_front();
      stopping = stopping_;
    }
    if (stopping) {
      x->SendError({503, "the server is shutting down", "service_unavailable_error", "", ""});
    } else {
      handler_(*x);
    }
    x->FinishHandler();
  }
}

}  // namespace walsh
