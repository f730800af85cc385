// SIGTERM / SIGINT for servers that drain: blocked in every thread (call Block() before any
// thread starts), then taken synchronously by the main thread with Wait().
#ifndef WALSH_COMMON_TERMINATION_SIGNALS_H_
#define WALSH_COMMON_TERMINATION_SIGNALS_H_

#include <signal.h>

namespace walsh {

class TerminationSignals {
 public:
  TerminationSignals() {
    sigemptyset(&set_);
    sigaddset(&set_, SIGTERM);
    sigaddset(&set_, SIGINT);
  }
  // Threads created afterwards inherit the mask, so only Wait() ever sees the signals.
  void Block() { pthread_sigmask(SIG_BLOCK, &set_, nullptr); }
  // Blocks until SIGTERM or SIGINT arrives; returns it.
  int Wait() {
    int sig = 0;
    sigwait(&set_, &sig);
    return sig;
  }

 private:
  sigset_t set_;
};

}  // namespace walsh

#endif  // WALSH_COMMON_TERMINATION_SIGNALS_H_
