// SIGTERM / SIGINT for servers that drain, and SIGHUP for servers that reload: blocked in every
// thread (call Block() before any thread starts), then taken synchronously by the main thread
// with Wait().
#ifndef WALSH_COMMON_TERMINATION_SIGNALS_H_
#define WALSH_COMMON_TERMINATION_SIGNALS_H_

#include <signal.h>

#include <functional>

namespace walsh {

class TerminationSignals {
 public:
  TerminationSignals() {
    sigemptyset(&set_);
    sigaddset(&set_, SIGTERM);
    sigaddset(&set_, SIGINT);
    sigaddset(&set_, SIGHUP);
  }
  // Threads created afterwards inherit the mask, so only Wait() ever sees the signals.
  void Block() { pthread_sigmask(SIG_BLOCK, &set_, nullptr); }
  // Blocks until SIGTERM or SIGINT arrives and returns it; each SIGHUP before that calls
  // on_hangup (when given) and goes on waiting.
  int Wait(const std::function<void()>& on_hangup = nullptr) {
    for (;;) {
      int sig = 0;
      sigwait(&set_, &sig);
      if (sig != SIGHUP) return sig;
      if (on_hangup) on_hangup();
    }
  }

 private:
  sigset_t set_;
};

}  // namespace walsh

#endif  // WALSH_COMMON_TERMINATION_SIGNALS_H_
