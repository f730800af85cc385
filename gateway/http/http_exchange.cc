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
      remote_addr_(Info(conn).remote_addr),
      peer_(Info(conn).remote_addr, Info(conn).remote_port, Info(conn).server_port) {}

int HttpExchange::HeaderCount(const char* name) const {
  const mg_request_info& info = Info(conn_);
  int n = 0;
  for (int i = 0; i < info.num_headers; ++i) {
    n += mg_strcasecmp(info.http_headers[i].name, name) == 0;
  }
  return n;
}

absl::optional<std::string> HttpExchange::Header(const char* name) const {
  if (HeaderCount(name) != 1) return absl::nullopt;
  return std::string(mg_get_header(conn_, name));
}

absl::optional<std::string> HttpExchange::ReadBody(int64_t limit) {
  const long long declared = Info(conn_).content_length;
  std::string body;
  if (declared > limit) {
    SendError({413, absl::StrCat("the body is ", declared, " bytes; the limit is ", limit),
               "invalid_request_error", "", "request_too_large"});
    return absl::nullopt;
  }
  char buf[16384];
  for (;;) {
    const int n = mg_read(conn_, buf, sizeof buf);
    if (n <= 0) break;
    body.append(buf, static_cast<size_t>(n));
    if (static_cast<int64_t>(body.size()) > limit) {
      SendError({413, absl::StrCat("the body exceeds the limit of ", limit, " bytes"),
                 "invalid_request_error", "", "request_too_large"});
      return absl::nullopt;
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
    mg_response_header_add(conn_, "Transfer-Encoding", "chunked", -1);
  }
  mg_response_header_send(conn_);
}

void HttpExchange::SendText(int status, const std::string& content_type, const std::string& body) {
  SendHeaders(status, content_type, static_cast<int64_t>(body.size()));
  mg_write(conn_, body.data(), body.size());
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
