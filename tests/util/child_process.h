// A child process for integration tests: stdout to /dev/null, stderr drained by a thread of
// its own (a child that logs much never blocks on a full pipe) and read line by line with a
// timeout; killed and reaped when the object goes away.
#ifndef WALSH_TESTS_UTIL_CHILD_PROCESS_H_
#define WALSH_TESTS_UTIL_CHILD_PROCESS_H_

#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace walsh::testing {

class ChildProcess {
 public:
  explicit ChildProcess(const std::vector<std::string>& argv);
  ~ChildProcess();
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  bool started() const { return pid_ > 0; }
  pid_t pid() const { return pid_; }

  // The next stderr line for which `match` is true, or nullopt at timeout / end of stream.
  std::optional<std::string> WaitForStderrLine(const std::function<bool(const std::string&)>& match,
                                               std::chrono::milliseconds timeout);
  void Signal(int sig);
  // Exit code, or -1 if it did not exit normally within the timeout (then it is killed). Once
  // it has exited, waits (up to 2 s more) for its stderr to end, so stderr_text() holds it all.
  int Wait(std::chrono::milliseconds timeout);
  // Everything read from stderr so far.
  std::string stderr_text() const;

 private:
  void Drain();

  pid_t pid_ = -1;
  int err_fd_ = -1;
  std::thread drain_;
  mutable std::mutex mu_;
  std::condition_variable cv_;  // more stderr, or its end
  std::string err_buf_, err_all_;
  bool err_closed_ = false;
  bool exited_ = false;
  int exit_code_ = -1;
};

// GET http://127.0.0.1:port/path; the body, or "" on failure.
std::string HttpGet(int port, const std::string& path);
// A TCP port that was free a moment ago.
int FreePort();

// A loopback port held until destruction (bound with SO_REUSEPORT, never listening), so no
// other process's ephemeral port takes it before a gRPC server, which binds with SO_REUSEPORT
// too, is started on it; connections to it are refused meanwhile.
class ReservedPort {
 public:
  ReservedPort();
  ~ReservedPort();
  ReservedPort(const ReservedPort&) = delete;
  ReservedPort& operator=(const ReservedPort&) = delete;
  int port() const { return port_; }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }

 private:
  int fd_ = -1;
  int port_ = 0;
};

}  // namespace walsh::testing

#endif  // WALSH_TESTS_UTIL_CHILD_PROCESS_H_
