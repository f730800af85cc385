#include "openai/generate_call.h"

namespace walsh {

// Reads are started from the HTTP thread (Wait) as well as from reactions, so the call holds a
// hold (gRPC's AddHold) while reads may still be started; it is removed exactly once, when the
// last read has returned or the caller stops reading, and only then can OnDone run.
GenerateCall::GenerateCall(v1::Generator::Stub* stub, const v1::GenerateRequest& request,
                           const std::multimap<std::string, std::string>& metadata)
    : request_(request) {
  for (const auto& [k, v] : metadata) context_.AddMetadata(k, v);
  stub->async()->Generate(&context_, &request_, this);
  {
    MutexLock l(&mu_);
    reading_ = true;
    held_ = true;
  }
  AddHold();
  StartRead(&incoming_);
  StartCall();
}

GenerateCall::~GenerateCall() {
  Cancel();
  MutexLock l(&mu_);
  while (!done_) changed_.Wait(&mu_);
}

void GenerateCall::Cancel() {
  bool release = false;
  {
    MutexLock l(&mu_);
    stopped_ = true;
    release = held_ && !reading_;  // else the outstanding read's return releases it
    if (release) held_ = false;
  }
  context_.TryCancel();
  if (release) RemoveHold();
}

void GenerateCall::OnReadDone(bool ok) {
  bool read_on = false, release = false;
  {
    MutexLock l(&mu_);
    reading_ = false;
    if (!ok) {
      reads_over_ = true;
    } else {
      queue_.push_back(std::move(incoming_));
      incoming_.Clear();
    }
    read_on = ok && !stopped_ && queue_.size() < kQueued;
    reading_ = read_on;
    release = held_ && (!ok || stopped_);
    if (release) held_ = false;
    changed_.SignalAll();
  }
  // Outside the lock: gRPC may run the next OnReadDone inline.
  if (read_on) StartRead(&incoming_);
  if (release) RemoveHold();
}

void GenerateCall::OnDone(const grpc::Status& s) {
  MutexLock l(&mu_);
  status_ = s;
  done_ = true;
  changed_.SignalAll();
}

GenerateCall::Next GenerateCall::Wait(std::chrono::milliseconds wait, v1::GenerateResponse* out) {
  bool read_on = false;
  Next next = Next::kIdle;
  {
    MutexLock l(&mu_);
    const absl::Time deadline = absl::Now() + absl::FromChrono(wait);
    while (queue_.empty() && !done_) {
      const absl::Duration left = deadline - absl::Now();
      if (left <= absl::ZeroDuration() || changed_.WaitWithTimeout(&mu_, left)) break;
    }
    if (!queue_.empty()) {
      *out = std::move(queue_.front());
      queue_.pop_front();
      // The hold is still held whenever a read may start: it is only removed once reads end.
      read_on = held_ && !reading_ && !reads_over_ && !stopped_;
      if (read_on) reading_ = true;
      next = Next::kMessage;
    } else if (done_) {
      next = Next::kDone;
    }
  }
  if (read_on) StartRead(&incoming_);
  return next;
}

grpc::Status GenerateCall::status() {
  MutexLock l(&mu_);
  return status_;
}

}  // namespace walsh
