#include "openai/http_exchange.h"

#include <microhttpd.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <random>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "openai/json_text.h"

namespace walsh {
namespace {

// A client's x-request-id is kept if it is short and printable; otherwise one is made.
std::string RequestIdFrom(const HttpRequestHead& head) {
  for (const auto& [name, value] : head.headers) {
    if (!absl::EqualsIgnoreCase(name, "x-request-id")) continue;
    bool ok = !value.empty() && value.size() <= 128;
    for (char c : value) ok &= absl::ascii_isgraph(static_cast<unsigned char>(c));
    if (ok) return value;
    break;
  }
  thread_local std::mt19937_64 rng(std::random_device{}());
  return absl::StrCat(absl::Hex(rng(), absl::kZeroPad16), absl::Hex(rng(), absl::kZeroPad16));
}

}  // namespace

HttpExchange::HttpExchange(HttpRequestHead head, HttpStreamLimits limits, MHD_Connection* conn,
                           int fd, int wake_fd)
    : head_(std::move(head)),
      limits_(limits),
      request_id_(RequestIdFrom(head_)),
      conn_(conn),
      fd_(fd),
      wake_fd_(wake_fd) {}

HttpExchange::~HttpExchange() {
  if (limits_.budget != nullptr) {
    limits_.budget->Release(static_cast<int64_t>(events_.size() - events_taken_));
  }
}

std::vector<std::string> HttpExchange::HeaderValues(const char* name) const {
  std::vector<std::string> values;
  for (const auto& [n, v] : head_.headers) {
    if (absl::EqualsIgnoreCase(n, name)) values.push_back(v);
  }
  return values;
}

bool HttpExchange::PeerGone() {
  MutexLock l(&mu_);
  if (closed_) return true;
  // The socket stays open until the request is marked closed, which this lock orders.
  pollfd p{fd_, POLLRDHUP, 0};
  return ::poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
}

void HttpExchange::ResumeLocked() {
  if (!suspended_) return;
  suspended_ = false;
  MHD_resume_connection(conn_);
  const uint64_t one = 1;
  (void)!write(wake_fd_, &one, sizeof one);
}

void HttpExchange::ShutLocked() {
  if (!closed_) shutdown(fd_, SHUT_RDWR);  // the socket stays open until closed_ is set
}

void HttpExchange::SendText(int status, const std::string& content_type, const std::string& body) {
  MutexLock l(&mu_);
  if (answer_ != Answer::kNone) return;
  answer_ = Answer::kWhole;
  status_ = status;
  content_type_ = content_type;
  whole_ = body;
  ResumeLocked();
}

void HttpExchange::SendJson(int status, const nlohmann::json& body) {
  SendText(status, "application/json", JsonText(body));
}

bool HttpExchange::StartEvents() {
  MutexLock l(&mu_);
  if (answer_ != Answer::kNone) return false;
  answer_ = Answer::kEvents;
  status_ = 200;
  content_type_ = "text/event-stream; charset=utf-8";
  ResumeLocked();
  return !closed_;
}

bool HttpExchange::SendEvent(const std::string& data) {
  MutexLock l(&mu_);
  if (answer_ != Answer::kEvents || closed_ || events_failed_) return false;
  const auto stall_end = std::chrono::steady_clock::now() + limits_.stall_timeout;
  while (static_cast<int64_t>(events_.size() - events_taken_) >= limits_.max_buffered_bytes &&
         !closed_) {
    const auto left = stall_end - std::chrono::steady_clock::now();
    if (left <= std::chrono::steady_clock::duration::zero()) {
      stalled_ = true;
      events_failed_ = true;
      // The I/O thread is waiting to write, not to read from us: only a closed socket stops it.
      ShutLocked();
      return false;
    }
    drained_.WaitWithTimeout(&mu_, absl::FromChrono(left));
  }
  if (closed_) return false;
  if (events_taken_ > 0 && events_taken_ * 2 >= events_.size()) {
    events_.erase(0, events_taken_);
    events_taken_ = 0;
  }
  const size_t before = events_.size();
  absl::StrAppend(&events_, "data: ", data, "\n\n");
  if (limits_.budget != nullptr) {
    limits_.budget->Add(static_cast<int64_t>(events_.size() - before));
  }
  ResumeLocked();
  return true;
}

void HttpExchange::EndEvents() {
  MutexLock l(&mu_);
  events_ended_ = true;
  ResumeLocked();
}

int HttpExchange::status() const {
  MutexLock l(&mu_);
  return status_;
}

void HttpExchange::set_client_gone() {
  MutexLock l(&mu_);
  client_gone_ = true;
}

bool HttpExchange::client_gone() const {
  MutexLock l(&mu_);
  return client_gone_;
}

int HttpExchange::FinalStatus(bool completed) {
  if (early_status_ != 0) return early_status_;
  MutexLock l(&mu_);
  // 499: the client hung up before its answer was whole (nginx's code).
  if (!completed || status_ == 0 || client_gone_ || events_failed_) return 499;
  return status_;
}

bool HttpExchange::stalled() const {
  MutexLock l(&mu_);
  return stalled_;
}

void HttpExchange::SuspendLocked() {
  suspended_ = true;
  MHD_suspend_connection(conn_);
}

void HttpExchange::MarkSuspended() {
  MutexLock l(&mu_);
  SuspendLocked();
}

void HttpExchange::FinishHandler() {
  MutexLock l(&mu_);
  handler_done_ = true;
  if (answer_ == Answer::kEvents && !events_ended_) {
    events_failed_ = true;  // the stream cannot end well: its connection closes
    if (!suspended_) ShutLocked();
  }
  ResumeLocked();
}

void HttpExchange::MarkClosed() {
  MutexLock l(&mu_);
  closed_ = true;
  drained_.SignalAll();
}

size_t HttpExchange::TakeEvents(char* out, size_t max, bool* end, bool* failed) {
  MutexLock l(&mu_);
  const size_t n = std::min(max, events_.size() - events_taken_);
  if (n > 0) {
    std::memcpy(out, events_.data() + events_taken_, n);
    events_taken_ += n;
    if (limits_.budget != nullptr) limits_.budget->Release(static_cast<int64_t>(n));
    if (events_taken_ == events_.size()) {
      events_.clear();
      events_taken_ = 0;
    }
    drained_.SignalAll();
    return n;
  }
  if (events_failed_) {
    *failed = true;
  } else if (events_ended_) {
    *end = true;
  } else {
    SuspendLocked();  // SendEvent, EndEvents or FinishHandler resumes it
  }
  return 0;
}

}  // namespace walsh
