// One HTTP request on a civetweb connection, from its handler's thread: the request's method,
// path, headers and body (read up to a limit), and a response sent whole (JSON with a
// Content-Length) or as a Server-Sent Events stream (chunked, one flush per event), always with
// the request's x-request-id. Keep-alive works for both.
#ifndef WALSH_GATEWAY_HTTP_HTTP_EXCHANGE_H_
#define WALSH_GATEWAY_HTTP_HTTP_EXCHANGE_H_

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/types/optional.h"
#include "gateway/http/api_error.h"
#include "gateway/http/peer_socket.h"
#include "nlohmann/json.hpp"

struct mg_connection;

namespace walsh {

class HttpExchange {
 public:
  explicit HttpExchange(mg_connection* conn);

  const std::string& method() const { return method_; }
  const std::string& path() const { return path_; }
  const std::string& request_id() const { return request_id_; }
  std::string remote_address() const { return remote_addr_; }
  // Every value of a request header, in order.
  std::vector<std::string> HeaderValues(const char* name) const;
  // Reads the body; nullopt (after answering 413, or 408 when it takes longer than `deadline`
  // in all: a client trickling bytes would otherwise hold the thread) when it exceeds `limit`.
  absl::optional<std::string> ReadBody(int64_t limit, std::chrono::seconds deadline);
  // Whether the client has hung up (its socket is looked up on the first call).
  bool PeerGone();

  void SendJson(int status, const nlohmann::json& body);
  void SendError(const ApiError& e) { SendJson(e.http_status, e.ToJson()); }
  void SendText(int status, const std::string& content_type, const std::string& body);
  // Server-Sent Events: the headers once, then "data: ...\n\n" per event. False once the
  // client can no longer be written to.
  bool StartEvents();
  bool SendEvent(const std::string& data);
  void EndEvents();

  int status() const { return status_; }  // what was sent; 0: nothing yet
  // The client hung up before the whole answer was sent (metrics say 499).
  void set_client_gone() { client_gone_ = true; }
  bool client_gone() const { return client_gone_; }

 private:
  void SendHeaders(int status, const std::string& content_type, int64_t length);

  mg_connection* conn_;
  std::string method_, path_, request_id_, remote_addr_;
  absl::optional<PeerSocket> peer_;
  int status_ = 0;
  bool write_failed_ = false;
  bool client_gone_ = false;
};

}  // namespace walsh

#endif  // WALSH_GATEWAY_HTTP_HTTP_EXCHANGE_H_
