#include "common/stream_writer.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/grpc_status.h"
#include "common/raw_messages.h"

namespace walsh {

std::shared_ptr<StreamWriter> StreamWriter::Create(grpc::CallbackServerContext* context,
                                                   const StreamBufferLimits& limits,
                                                   EndedEarly on_cancel,
                                                   std::function<void()> on_writable) {
  std::shared_ptr<StreamWriter> writer(
      new StreamWriter(context, limits, std::move(on_cancel), std::move(on_writable)));
  writer->self_ = writer;
  writer->weak_self_ = writer;
  return writer;
}

StreamWriter::~StreamWriter() {
  if (limits_.budget != nullptr) limits_.budget->Release(bytes_);
}

bool StreamWriter::Push(const google::protobuf::Message& response,
                        const std::pair<std::string, std::string>* initial_metadata) {
  grpc::ByteBuffer buffer = SerializeToByteBuffer(response);
  const auto n = static_cast<int64_t>(buffer.Length());
  const grpc::ByteBuffer* next = nullptr;
  bool stalled = false, room = true;
  std::shared_ptr<grpc::Alarm> arm;
  Clock::time_point check_at;
  {
    MutexLock l(&mu_);
    if (finished_ || finish_pending_) return true;
    if (bytes_ >= limits_.max_bytes && bytes_ + n > 2 * limits_.max_bytes) {
      stalled = StopStalledLocked(absl::StrCat("the client stopped reading: ", bytes_,
                                               " bytes were waiting (--max-buffered-bytes ",
                                               limits_.max_bytes, ")"));
    } else {
      if (initial_metadata != nullptr && !metadata_sent_) {
        context_->AddInitialMetadata(initial_metadata->first, initial_metadata->second);
      }
      metadata_sent_ = true;
      queue_.push_back(std::move(buffer));
      bytes_ += n;
      if (limits_.budget != nullptr) limits_.budget->Add(n);
      if (!writing_) {
        writing_ = true;
        progress_ = Clock::now();
        next = &queue_.front();
        arm = ArmStallLocked();
        check_at = stall_check_at_;
      }
      if (bytes_ >= limits_.max_bytes) {
        blocked_ = true;
        room = false;
      }
    }
  }
  if (stalled) RunHook(true);
  if (next != nullptr) StartWrite(next);
  if (arm != nullptr) SetStallAlarm(std::move(arm), check_at);
  return room;
}

bool StreamWriter::HasRoom() {
  MutexLock l(&mu_);
  return finished_ || finish_pending_ || cancelled_ || bytes_ < limits_.max_bytes;
}

void StreamWriter::Complete(const absl::Status& status) {
  {
    MutexLock l(&mu_);
    if (finished_ || finish_pending_) return;
    finish_pending_ = true;
    status_ = status;
    if (writing_) return;
    finished_ = true;
  }
  Finish(ToGrpcStatus(status));
}

bool StreamWriter::cancelled() {
  MutexLock l(&mu_);
  return cancelled_;
}

absl::Status StreamWriter::CancelledStatus() {
  MutexLock l(&mu_);
  return stalled_ ? status_ : absl::CancelledError("cancelled");
}

void StreamWriter::OnWriteDone(bool ok) {
  const grpc::ByteBuffer* next = nullptr;
  bool finish = false, hook = false, writable = false;
  absl::Status status;
  std::shared_ptr<grpc::Alarm> arm;
  Clock::time_point check_at;
  {
    MutexLock l(&mu_);
    ReleaseLocked(static_cast<int64_t>(queue_.front().Length()));
    queue_.pop_front();
    progress_ = Clock::now();
    if (!ok) {
      while (!queue_.empty()) {
        ReleaseLocked(static_cast<int64_t>(queue_.back().Length()));
        queue_.pop_back();
      }
      hook = CancelLocked(/*stalled=*/false);
    }
    if (!queue_.empty()) {
      next = &queue_.front();
      arm = ArmStallLocked();
      check_at = stall_check_at_;
    } else {
      writing_ = false;
      if (finish_pending_ && !finished_ && !tearing_down_) {
        finished_ = finish = true;
        status = status_;
      }
    }
    if (blocked_ && bytes_ <= limits_.max_bytes / 2) {
      blocked_ = false;
      writable = true;
    }
  }
  if (next != nullptr) StartWrite(next);
  if (arm != nullptr) SetStallAlarm(std::move(arm), check_at);
  if (finish) Finish(ToGrpcStatus(status));
  if (hook) RunHook(false);
  if (writable && on_writable_) on_writable_();
}

void StreamWriter::OnCancel() {
  bool hook;
  {
    MutexLock l(&mu_);
    hook = CancelLocked(/*stalled=*/false);
  }
  if (hook) RunHook(false);
}

void StreamWriter::OnDone() {
  std::shared_ptr<StreamWriter> self;
  std::shared_ptr<grpc::Alarm> alarm;
  {
    MutexLock l(&mu_);
    self = std::move(self_);
    alarm = std::move(stall_alarm_);
  }
  if (alarm != nullptr) alarm->Cancel();
}  // the last reference may go here, after the lock is released

bool StreamWriter::CancelLocked(bool stalled) {
  if (cancelled_) return false;
  cancelled_ = true;
  stalled_ = stalled;
  return true;
}

bool StreamWriter::StopStalledLocked(std::string why) {
  // A write in flight cannot be taken back; what waits behind it goes.
  while (queue_.size() > (writing_ ? 1u : 0u)) {
    ReleaseLocked(static_cast<int64_t>(queue_.back().Length()));
    queue_.pop_back();
  }
  finish_pending_ = true;
  status_ = absl::ResourceExhaustedError(why);
  return CancelLocked(/*stalled=*/true);
}

void StreamWriter::ReleaseLocked(int64_t bytes) {
  bytes_ -= bytes;
  if (limits_.budget != nullptr) limits_.budget->Release(bytes);
}

std::shared_ptr<grpc::Alarm> StreamWriter::ArmStallLocked() {
  if (limits_.stall_timeout.count() <= 0 || stall_alarm_ != nullptr || !writing_ || cancelled_ ||
      self_ == nullptr) {
    return nullptr;
  }
  stall_alarm_ = std::make_shared<grpc::Alarm>();
  stall_check_at_ = progress_ + limits_.stall_timeout;
  return stall_alarm_;
}

void StreamWriter::SetStallAlarm(std::shared_ptr<grpc::Alarm> alarm, Clock::time_point when) {
  const auto deadline =
      std::chrono::system_clock::now() +
      std::chrono::duration_cast<std::chrono::system_clock::duration>(when - Clock::now());
  alarm->Set(deadline, [weak = weak_self_](bool fired) {
    if (!fired) return;  // cancelled: the stream is done
    if (std::shared_ptr<StreamWriter> w = weak.lock()) w->OnStallCheck();
  });
}

void StreamWriter::OnStallCheck() {
  bool stalled = false, abandon = false;
  std::shared_ptr<grpc::Alarm> fired, arm;
  Clock::time_point check_at;
  {
    MutexLock l(&mu_);
    fired = std::move(stall_alarm_);
    if (finished_ || !writing_) return;
    if (abandoning_) {
      abandon = tearing_down_ = true;  // the grace passed and the write is still stuck
    } else if (cancelled_ && !stalled_) {
      return;  // the client cancelled: gRPC fails the write itself
    } else if (stalled_ || Clock::now() - progress_ >= limits_.stall_timeout) {
      if (!stalled_) {
        stalled = StopStalledLocked(absl::StrCat(
            "the client read nothing for ",
            std::chrono::duration_cast<std::chrono::milliseconds>(limits_.stall_timeout).count() /
                1000.0,
            " s (--stall-timeout-seconds)"));
      }
      // A client that reads at last gets this status (or the overflow's); one that never does
      // holds the call and its write until the grace ends it.
      abandoning_ = true;
      arm = stall_alarm_ = std::make_shared<grpc::Alarm>();
      check_at =
          Clock::now() + std::max<Clock::duration>(limits_.stall_timeout, std::chrono::seconds(10));
    } else {
      arm = ArmStallLocked();
      check_at = stall_check_at_;
    }
  }
  if (stalled) RunHook(true);
  if (arm != nullptr) SetStallAlarm(std::move(arm), check_at);
  if (!abandon) return;
  // Finish has not been called (finished_ was false and tearing_down_ keeps OnWriteDone from it),
  // so the context is alive; the stuck write then completes, failed, perhaps inline.
  context_->TryCancel();
  bool finish = false;
  absl::Status status;
  {
    MutexLock l(&mu_);
    tearing_down_ = false;
    if (!writing_ && !finished_) {
      finished_ = finish = true;
      status = status_;
    }
  }
  if (finish) Finish(ToGrpcStatus(status));
}

void StreamWriter::RunHook(bool stalled) {
  if (on_cancel_) on_cancel_(stalled);
}

}  // namespace walsh
