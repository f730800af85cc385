#include "gateway/http/http_exchange.h"

#include <civetweb.h>

#include <random>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace walsh {
namespace {

// A client's x-request-id is kept if it is short and printable; otherwise one is made.
std::string RequestIdFrom(const char* given) {
  if (given != nullptr) {
    const std::string id(given);
    bool ok = !id.empty() && id.size() <= 128;
    for (char c : id) ok &= absl::ascii_isgraph(static_cast<unsigned char>(c));
    if (ok) return id;
  }
  thread_local std::mt19937_64 rng(std::random_device{}());
  return absl::StrCat(absl::Hex(rng(), absl::kZeroPad16), absl::Hex(rng(), absl::kZeroPad16));
}

const mg_request_info& Info(mg_connection* conn) { return *mg_get_request_info(conn); }

}  // namespace

HttpExchange::HttpExchange(mg_connection* conn)
    : conn_(conn),
      method_(Info(conn).request_method),
      path_(Info(conn).local_uri != nullptr ? Info(conn).local_uri : ""),
      request_id_(RequestIdFrom(mg_get_header(conn, "x-request-id"))),
      remote_addr_(Info(conn).remote_addr) {}

std::vector<std::string> HttpExchange::HeaderValues(const char* name) const {
  const mg_request_info& info = Info(conn_);
  std::vector<std::string> values;
  for (int i = 0; i < info.num_headers; ++i) {
    if (mg_strcasecmp(info.http_headers[i].name, name) == 0) {
      values.emplace_back(info.http_headers[i].value);
    }
  }
  return values;
}

bool HttpExchange::PeerGone() {
  if (!peer_) peer_.emplace(remote_addr_, Info(conn_).remote_port, Info(conn_).server_port);
  return peer_->PeerGone();
}

absl::optional<std::string> HttpExchange::ReadBody(int64_t limit, std::chrono::seconds deadline) {
  const long long declared = Info(conn_).content_length;
  std::string body;
  // The connection is closed after a refusal: the rest of the body is not worth reading.
  auto refuse = [&](ApiError e) {
    mg_disable_connection_keep_alive(conn_);
    SendError(e);
    return absl::nullopt;
  };
  if (declared > limit) {
    return refuse({413, absl::StrCat("the body is ", declared, " bytes; the limit is ", limit),
                   "invalid_request_error", "", "request_too_large"});
  }
  const auto end = std::chrono::steady_clock::now() + deadline;
  char buf[16384];
  for (;;) {
    const int n = mg_read(conn_, buf, sizeof buf);
    if (n <= 0) break;
    body.append(buf, static_cast<size_t>(n));
    if (static_cast<int64_t>(body.size()) > limit) {
      return refuse({413, absl::StrCat("the body exceeds the limit of ", limit, " bytes"),
                     "invalid_request_error", "", "request_too_large"});
    }
    if (std::chrono::steady_clock::now() > end) {
      return refuse({408, absl::StrCat("the body took longer than ", deadline.count(), " s"),
                     "invalid_request_error", "", "request_timeout"});
    }
  }
  return body;
}

void HttpExchange::SendHeaders(int status, const std::string& content_type, int64_t length) {
  status_ = status;
  mg_response_header_start(conn_, status);
  mg_response_header_add(conn_, "Content-Type", content_type.c_str(), -1);
  mg_response_header_add(conn_, "x-request-id", request_id_.c_str(), -1);
  if (length >= 0) {
    mg_response_header_add(conn_, "Content-Length", std::to_string(length).c_str(), -1);
  } else {
    mg_response_header_add(conn_, "Cache-Control", "no-cache", -1);
    mg_response_header_add(conn_, "X-Accel-Buffering", "no", -1);  // nginx: do not buffer events
    mg_response_header_add(conn_, "Transfer-Encoding", "chunked", -1);
  }
  mg_response_header_send(conn_);
}

void HttpExchange::SendText(int status, const std::string& content_type, const std::string& body) {
  SendHeaders(status, content_type, static_cast<int64_t>(body.size()));
  if (method_ != "HEAD") mg_write(conn_, body.data(), body.size());
}

void HttpExchange::SendJson(int status, const nlohmann::json& body) {
  SendText(status, "application/json",
           body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}

bool HttpExchange::StartEvents() {
  SendHeaders(200, "text/event-stream; charset=utf-8", -1);
  return true;
}

bool HttpExchange::SendEvent(const std::string& data) {
  if (write_failed_) return false;
  const std::string event = absl::StrCat("data: ", data, "\n\n");
  write_failed_ = mg_send_chunk(conn_, event.data(), static_cast<unsigned>(event.size())) <= 0;
  return !write_failed_;
}

void HttpExchange::EndEvents() {
  if (!write_failed_) mg_send_chunk(conn_, "", 0);
}

}  // namespace walsh
