// One HTTP request and its answer, shared by two threads: HttpServer's I/O thread, which read
// the request and writes the answer to the socket, and the handler thread that answers it with
// blocking calls. An answer is whole (JSON with a Content-Length) or a Server-Sent Events stream
// (chunked), always with the request's x-request-id. Events wait in a buffer bounded in bytes:
// while it is full, SendEvent blocks (so the handler stops reading its upstream) until the
// client reads, hangs up, or stalls past the stall timeout.
#ifndef WALSH_OPENAI_HTTP_EXCHANGE_H_
#define WALSH_OPENAI_HTTP_EXCHANGE_H_

#include <chrono>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "common/buffer_budget.h"
#include "common/mutex.h"
#include "nlohmann/json.hpp"
#include "openai/api_error.h"

struct MHD_Connection;

namespace walsh {

struct HttpRequestHead {
  std::string method, path, remote_address;
  std::vector<std::pair<std::string, std::string>> headers;  // in order, names as sent
};

struct HttpStreamLimits {
  // Events not yet taken by the socket; the socket's send buffer is set to the same size.
  int64_t max_buffered_bytes = 256 << 10;
  std::chrono::milliseconds stall_timeout{30000};
  BufferBudget* budget = nullptr;  // the process's total (--max-buffered-total), if any
};

class HttpExchange {
 public:
  // `wake_fd` is the I/O thread's eventfd, written after each resume (libmicrohttpd driven
  // from outside its own thread does not wake on a resume by itself).
  HttpExchange(HttpRequestHead head, HttpStreamLimits limits, MHD_Connection* conn, int fd,
               int wake_fd);
  ~HttpExchange();

  // The request (any thread).
  const std::string& method() const { return head_.method; }
  const std::string& path() const { return head_.path; }
  const std::string& request_id() const { return request_id_; }
  const std::string& remote_address() const { return head_.remote_address; }
  std::vector<std::string> HeaderValues(const char* name) const;  // every value, in order
  const std::string& body() const { return body_; }               // whole once the handler runs

  // Whether the client has hung up (or the connection ended) before the answer was whole.
  bool PeerGone() ABSL_LOCKS_EXCLUDED(mu_);

  void SendJson(int status, const nlohmann::json& body) ABSL_LOCKS_EXCLUDED(mu_);
  void SendError(const ApiError& e) { SendJson(e.http_status, e.ToJson()); }
  void SendText(int status, const std::string& content_type, const std::string& body)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Server-Sent Events: the headers once, then "data: ...\n\n" per event. False once the
  // client is gone, or has read nothing for the stall timeout while the buffer was full.
  bool StartEvents() ABSL_LOCKS_EXCLUDED(mu_);
  bool SendEvent(const std::string& data) ABSL_LOCKS_EXCLUDED(mu_);
  void EndEvents() ABSL_LOCKS_EXCLUDED(mu_);

  int status() const ABSL_LOCKS_EXCLUDED(mu_);  // what was sent; 0: nothing yet
  // The client hung up before the whole answer was sent (metrics say 499).
  void set_client_gone() ABSL_LOCKS_EXCLUDED(mu_);
  bool client_gone() const ABSL_LOCKS_EXCLUDED(mu_);
  bool stalled() const ABSL_LOCKS_EXCLUDED(mu_);  // a stream was ended by the stall timeout

 private:
  friend class HttpServer;
  friend struct HttpServerCallbacks;
  enum class Answer { kNone, kWhole, kEvents };

  // Wakes the I/O thread if it suspended the connection waiting for this exchange.
  void ResumeLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // I/O thread: the connection waits until ResumeLocked (the one place it is resumed from).
  void SuspendLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Ends the connection under the I/O thread, which then finds it closed.
  void ShutLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // I/O thread: the body so far, before the handler runs.
  std::string& mutable_body() { return body_; }
  // I/O thread: the connection waits for the handler (or for more events).
  void MarkSuspended() ABSL_LOCKS_EXCLUDED(mu_);
  // Handler thread, when the handler returns: whatever it did not finish is ended.
  void FinishHandler() ABSL_LOCKS_EXCLUDED(mu_);
  // I/O thread: the request is over on the connection (answered, or the connection ended).
  void MarkClosed() ABSL_LOCKS_EXCLUDED(mu_);
  // I/O thread: copies up to `max` event bytes into `out`; 0 with `*end` unset: none yet.
  size_t TakeEvents(char* out, size_t max, bool* end, bool* failed) ABSL_LOCKS_EXCLUDED(mu_);

  // I/O thread, when the request is over: the status its client got (499: it went away first).
  int FinalStatus(bool completed) ABSL_LOCKS_EXCLUDED(mu_);

  const HttpRequestHead head_;
  const HttpStreamLimits limits_;
  const std::string request_id_;
  const std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
  std::string body_;
  int early_status_ = 0;  // I/O thread: answered before the request was whole

  mutable Mutex mu_;
  CondVar drained_;  // event bytes were taken, or the connection ended
  MHD_Connection* const conn_;
  const int fd_;  // the connection's socket, for PeerGone
  const int wake_fd_;
  bool suspended_ ABSL_GUARDED_BY(mu_) = false;     // the I/O thread waits for us
  bool closed_ ABSL_GUARDED_BY(mu_) = false;        // the request is over on the connection
  bool handler_done_ ABSL_GUARDED_BY(mu_) = false;  // the handler returned
  Answer answer_ ABSL_GUARDED_BY(mu_) = Answer::kNone;
  int status_ ABSL_GUARDED_BY(mu_) = 0;
  std::string content_type_ ABSL_GUARDED_BY(mu_);
  std::string whole_ ABSL_GUARDED_BY(mu_);           // a whole answer's body
  std::string events_ ABSL_GUARDED_BY(mu_);          // event bytes not yet taken
  size_t events_taken_ ABSL_GUARDED_BY(mu_) = 0;     // of events_, already taken
  bool events_ended_ ABSL_GUARDED_BY(mu_) = false;   // EndEvents(): the stream ends cleanly
  bool events_failed_ ABSL_GUARDED_BY(mu_) = false;  // the stream ends without its last chunk
  bool stalled_ ABSL_GUARDED_BY(mu_) = false;
  bool client_gone_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace walsh

#endif  // WALSH_OPENAI_HTTP_EXCHANGE_H_
