#include "gateway/circuit_breaker.h"

namespace walsh {

bool CircuitBreaker::Allow() {
  MutexLock l(&mu_);
  if (state_ == State::kOpen && now_() - opened_at_ >= cool_down_) {
    state_ = State::kHalfOpen;
    trial_in_flight_ = false;
  }
  if (state_ == State::kClosed) return true;
  if (state_ == State::kHalfOpen && !trial_in_flight_) {
    trial_in_flight_ = true;
    return true;
  }
  return false;
}

void CircuitBreaker::RecordSuccess() {
  MutexLock l(&mu_);
  state_ = State::kClosed;
  failures_ = 0;
  trial_in_flight_ = false;
}

void CircuitBreaker::RecordAnswer() {
  MutexLock l(&mu_);
  if (state_ != State::kHalfOpen) return;
  state_ = State::kClosed;
  failures_ = 0;
  trial_in_flight_ = false;
}

void CircuitBreaker::RecordFailure() {
  MutexLock l(&mu_);
  ++failures_;
  if (state_ == State::kHalfOpen || failures_ >= threshold_) {
    state_ = State::kOpen;
    opened_at_ = now_();
    trial_in_flight_ = false;
  }
}

void CircuitBreaker::ReleaseTrial() {
  MutexLock l(&mu_);
  trial_in_flight_ = false;
}

CircuitBreaker::State CircuitBreaker::state() const {
  MutexLock l(&mu_);
  if (state_ == State::kOpen && now_() - opened_at_ >= cool_down_) return State::kHalfOpen;
  return state_;
}

const char* BreakerStateName(CircuitBreaker::State s) {
  switch (s) {
    case CircuitBreaker::State::kClosed:
      return "closed";
    case CircuitBreaker::State::kOpen:
      return "open";
    case CircuitBreaker::State::kHalfOpen:
      return "half_open";
  }
  return "";
}

}  // namespace walsh
