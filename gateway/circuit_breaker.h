// Per-worker circuit breaker: opens after consecutive transport / server-side failures (never
// for a client's bad request), lets one trial call through after a cool-down (half-open), and
// closes again on that call's first response (RecordAnswer), so a long trial stream does not
// keep its worker half-open.
#ifndef WALSH_GATEWAY_CIRCUIT_BREAKER_H_
#define WALSH_GATEWAY_CIRCUIT_BREAKER_H_

#include <chrono>
#include <functional>

#include "absl/base/thread_annotations.h"
#include "common/mutex.h"

namespace walsh {

struct BreakerOptions {
  int failures = 3;                           // consecutive failures that open it
  std::chrono::milliseconds cool_down{2000};  // open this long before a trial call
  // The clock, a seam for tests (null: the steady clock). Called with the breaker's lock held,
  // from any thread: it must be thread-safe, must not block and must not use the breaker.
  std::function<std::chrono::steady_clock::time_point()> clock;
};

class CircuitBreaker {
 public:
  enum class State { kClosed, kOpen, kHalfOpen };
  using Clock = std::chrono::steady_clock;

  explicit CircuitBreaker(const BreakerOptions& options)
      : threshold_(options.failures),
        cool_down_(options.cool_down),
        now_(options.clock ? options.clock : [] { return Clock::now(); }) {}

  // May a call go to this worker now? In half-open state only one trial at a time.
  bool Allow() ABSL_LOCKS_EXCLUDED(mu_);
  void RecordSuccess() ABSL_LOCKS_EXCLUDED(mu_);
  // A call's first response: the worker serves. Closes a half-open breaker (its trial need not
  // end first: a long stream would keep the worker out); counts nothing otherwise, so a worker
  // that answers and then fails still reaches the failure threshold.
  void RecordAnswer() ABSL_LOCKS_EXCLUDED(mu_);
  void RecordFailure() ABSL_LOCKS_EXCLUDED(mu_);
  // A call that ends saying nothing of the worker's health (cancelled by its client, past its
  // deadline, refused as busy) gives back a half-open trial, so the next call can be the trial.
  void ReleaseTrial() ABSL_LOCKS_EXCLUDED(mu_);
  State state() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  mutable Mutex mu_;
  const int threshold_;
  const std::chrono::milliseconds cool_down_;
  const std::function<Clock::time_point()> now_;
  State state_ ABSL_GUARDED_BY(mu_) = State::kClosed;
  int failures_ ABSL_GUARDED_BY(mu_) = 0;
  Clock::time_point opened_at_ ABSL_GUARDED_BY(mu_){};
  bool trial_in_flight_ ABSL_GUARDED_BY(mu_) = false;
};

const char* BreakerStateName(CircuitBreaker::State s);

}  // namespace walsh

#endif  // WALSH_GATEWAY_CIRCUIT_BREAKER_H_
