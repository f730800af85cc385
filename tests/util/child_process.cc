#include "tests/util/child_process.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

extern char** environ;

namespace walsh::testing {

ChildProcess::ChildProcess(const std::vector<std::string>& argv) {
  int err_pipe[2];
  if (pipe(err_pipe) != 0) return;
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, err_pipe[1], 2);
  posix_spawn_file_actions_addclose(&actions, err_pipe[0]);
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  if (posix_spawn(&pid_, args[0], &actions, nullptr, args.data(), environ) != 0) pid_ = -1;
  posix_spawn_file_actions_destroy(&actions);
  close(err_pipe[1]);
  err_fd_ = err_pipe[0];
  drain_ = std::thread(&ChildProcess::Drain, this);
}

ChildProcess::~ChildProcess() {
  if (pid_ > 0 && !exited_) {
    kill(pid_, SIGKILL);
    int status;
    waitpid(pid_, &status, 0);
  }
  if (drain_.joinable()) drain_.join();  // the pipe ends with the child
  if (err_fd_ >= 0) close(err_fd_);
}

void ChildProcess::Drain() {
  char buf[4096];
  ssize_t n;
  while ((n = read(err_fd_, buf, sizeof buf)) > 0 || (n < 0 && errno == EINTR)) {
    if (n <= 0) continue;
    std::lock_guard<std::mutex> l(mu_);
    err_buf_.append(buf, n);
    err_all_.append(buf, n);
    cv_.notify_all();
  }
  std::lock_guard<std::mutex> l(mu_);
  err_closed_ = true;
  cv_.notify_all();
}

std::string ChildProcess::stderr_text() const {
  std::lock_guard<std::mutex> l(mu_);
  return err_all_;
}

std::optional<std::string> ChildProcess::WaitForStderrLine(
    const std::function<bool(const std::string&)>& match, std::chrono::milliseconds timeout) {
  const auto end = std::chrono::steady_clock::now() + timeout;
  std::unique_lock<std::mutex> l(mu_);
  for (;;) {
    size_t nl;
    while ((nl = err_buf_.find('\n')) != std::string::npos) {
      std::string line = err_buf_.substr(0, nl);
      err_buf_.erase(0, nl + 1);
      if (match(line)) return line;
    }
    if (err_closed_ || err_fd_ < 0) return std::nullopt;
    if (cv_.wait_until(l, end) == std::cv_status::timeout) return std::nullopt;
  }
}

void ChildProcess::Signal(int sig) {
  if (pid_ > 0 && !exited_) kill(pid_, sig);
}

int ChildProcess::Wait(std::chrono::milliseconds timeout) {
  if (exited_) return exit_code_;
  const auto end = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < end) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    int status;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      exited_ = true;
      exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      // What it wrote last may still be in the pipe: stderr_text() after Wait holds all of it
      // once the drain reads the end (at most 2 s more, should a grandchild hold the pipe open).
      std::unique_lock<std::mutex> l(mu_);
      cv_.wait_until(l, std::chrono::steady_clock::now() + std::chrono::seconds(2),
                     [&] { return err_closed_ || err_fd_ < 0; });
      return exit_code_;
    }
  }
  return -1;
}

std::string HttpGet(int port, const std::string& path) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return "";
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string body;
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) {
    const std::string req =
        "GET " + path + " HTTP/1.0\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
    if (write(fd, req.data(), req.size()) == static_cast<ssize_t>(req.size())) {
      std::string resp;
      char buf[8192];
      ssize_t n;
      while ((n = read(fd, buf, sizeof buf)) > 0) resp.append(buf, n);
      const size_t split = resp.find("\r\n\r\n");
      if (split != std::string::npos) body = resp.substr(split + 4);
    }
  }
  close(fd);
  return body;
}

int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  socklen_t len = sizeof addr;
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  return ntohs(addr.sin_port);
}

ReservedPort::ReservedPort() {
  fd_ = socket(AF_INET, SOCK_STREAM, 0);
  const int one = 1;
  setsockopt(fd_, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) return;
  socklen_t len = sizeof addr;
  getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len);
  port_ = ntohs(addr.sin_port);
}

ReservedPort::~ReservedPort() {
  if (fd_ >= 0) close(fd_);
}

}  // namespace walsh::testing
