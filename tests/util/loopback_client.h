// A raw client connection for tests of the HTTP servers in process.
#ifndef WALSH_TESTS_UTIL_LOOPBACK_CLIENT_H_
#define WALSH_TESTS_UTIL_LOOPBACK_CLIENT_H_

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>

#include "gtest/gtest.h"

namespace walsh::testing {

// A raw TCP client of a server on loopback: it sends bytes and reads what comes back, so a test
// sees the HTTP exchange as a client does, headers and framing included.
class Client {
 public:
  explicit Client(int port) : fd_(socket(AF_INET, SOCK_STREAM, 0)) {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  }
  ~Client() { Close(); }
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  bool connected() const { return connected_; }
  void Send(const std::string& bytes) {
    ASSERT_EQ(send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL),
              static_cast<ssize_t>(bytes.size()));
  }
  // What arrives until the server closes the connection, `until` is read, or `timeout` passes.
  std::string Read(std::chrono::milliseconds timeout = std::chrono::milliseconds(10000),
                   const std::string& until = "") {
    std::string got;
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      if (!until.empty() && got.find(until) != std::string::npos) break;
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, 20) <= 0) continue;
      char buf[4096];
      const ssize_t n = recv(fd_, buf, sizeof(buf), 0);
      if (n <= 0) {
        closed_ = true;
        break;
      }
      got.append(buf, static_cast<size_t>(n));
    }
    return got;
  }
  bool closed_by_server() const { return closed_; }
  void Close() {
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
  }

 private:
  int fd_;
  bool connected_ = false;
  bool closed_ = false;
};

}  // namespace walsh::testing

#endif  // WALSH_TESTS_UTIL_LOOPBACK_CLIENT_H_
