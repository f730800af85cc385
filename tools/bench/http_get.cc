#include "tools/bench/http_get.h"

#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include "absl/strings/str_cat.h"

namespace walsh {
namespace {

struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) close(fd);
  }
};

struct AddrInfo {
  addrinfo* list = nullptr;
  ~AddrInfo() {
    if (list != nullptr) freeaddrinfo(list);
  }
};

}  // namespace

absl::StatusOr<std::string> HttpGet(const std::string& host_port, const std::string& path) {
  const size_t colon = host_port.rfind(':');
  if (colon == std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat("\"", host_port, "\" is not host:port"));
  }
  const std::string host = host_port.substr(0, colon), port = host_port.substr(colon + 1);
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  AddrInfo ai;
  if (getaddrinfo(host.c_str(), port.c_str(), &hints, &ai.list) != 0 || ai.list == nullptr) {
    return absl::UnavailableError(absl::StrCat("cannot resolve ", host_port));
  }
  Fd s{socket(ai.list->ai_family, ai.list->ai_socktype, ai.list->ai_protocol)};
  if (s.fd < 0 || connect(s.fd, ai.list->ai_addr, ai.list->ai_addrlen) != 0) {
    return absl::UnavailableError(absl::StrCat("cannot connect to ", host_port));
  }
  const std::string req =
      absl::StrCat("GET ", path, " HTTP/1.0\r\nHost: ", host, "\r\nConnection: close\r\n\r\n");
  if (write(s.fd, req.data(), req.size()) != static_cast<ssize_t>(req.size())) {
    return absl::UnavailableError(absl::StrCat("cannot send to ", host_port));
  }
  std::string resp;
  char buf[8192];
  for (ssize_t n; (n = read(s.fd, buf, sizeof buf)) > 0;) resp.append(buf, n);
  const size_t split = resp.find("\r\n\r\n");
  if (resp.compare(0, 12, "HTTP/1.0 200") != 0 && resp.compare(0, 12, "HTTP/1.1 200") != 0) {
    return absl::UnavailableError(
        absl::StrCat(host_port, path, " answered ", resp.substr(0, resp.find('\r'))));
  }
  return split == std::string::npos ? std::string() : resp.substr(split + 4);
}

}  // namespace walsh
