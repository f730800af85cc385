// The server side of a response stream, shared by the worker and the gateway: responses queue
// and go out one write at a time, Finish follows the last write, and pushes after the stream
// ended are dropped.
//
// Its buffer is bounded in bytes, with backpressure: once `max_bytes` wait (the write in flight
// included), Push answers false and the producer holds its next response until `on_writable`
// runs, when half has drained (a high and a low watermark, as Envoy's per-stream buffers). A
// producer that pushes anyway may reach twice the limit; past that the stream ends. A client that
// reads nothing for `stall_timeout` while a write waits is cancelled. Either way the stream ends
// RESOURCE_EXHAUSTED, naming the flag, after the write in flight.
#ifndef WALSH_COMMON_STREAM_WRITER_H_
#define WALSH_COMMON_STREAM_WRITER_H_

#include <chrono>
#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "common/buffer_budget.h"
#include "common/mutex.h"
#include "google/protobuf/message.h"
#include "grpcpp/alarm.h"
#include "grpcpp/grpcpp.h"

namespace walsh {

struct StreamBufferLimits {
  int64_t max_bytes = 256 << 10;                   // --max-buffered-bytes
  std::chrono::milliseconds stall_timeout{30000};  // --stall-timeout-seconds; 0: never
  BufferBudget* budget = nullptr;                  // the process's total, if any
};

class StreamWriter final : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
 public:
  // Runs once, outside the writer's lock, when the stream ends early: the client cancelled, a
  // write failed, or (stalled) the client stopped reading.
  using EndedEarly = std::function<void(bool stalled)>;

  // The writer keeps itself alive until gRPC is done with it (OnDone). `on_writable` (may be
  // empty) runs outside the lock after a Push that answered false, once the buffer has room.
  static std::shared_ptr<StreamWriter> Create(grpc::CallbackServerContext* context,
                                              const StreamBufferLimits& limits,
                                              EndedEarly on_cancel,
                                              std::function<void()> on_writable = nullptr);
  ~StreamWriter() override;

  // Queues `response`; false once the buffer is full (the response is kept). `initial_metadata`:
  // added before the first response goes out (ignored after).
  bool Push(const google::protobuf::Message& response,
            const std::pair<std::string, std::string>* initial_metadata = nullptr)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Whether a Push now would find room (true once the stream has ended: nothing waits for it).
  bool HasRoom() ABSL_LOCKS_EXCLUDED(mu_);
  // Ends the stream with `status` after the queued responses (no-op once it is ending).
  void Complete(const absl::Status& status) ABSL_LOCKS_EXCLUDED(mu_);

  bool cancelled() ABSL_LOCKS_EXCLUDED(mu_);
  // Why it ended early: CANCELLED, or RESOURCE_EXHAUSTED naming the limit the client passed.
  absl::Status CancelledStatus() ABSL_LOCKS_EXCLUDED(mu_);

  void OnWriteDone(bool ok) override ABSL_LOCKS_EXCLUDED(mu_);
  void OnCancel() override ABSL_LOCKS_EXCLUDED(mu_);
  void OnDone() override ABSL_LOCKS_EXCLUDED(mu_);

 private:
  using Clock = std::chrono::steady_clock;

  StreamWriter(grpc::CallbackServerContext* context, const StreamBufferLimits& limits,
               EndedEarly on_cancel, std::function<void()> on_writable)
      : context_(context),
        limits_(limits),
        on_cancel_(std::move(on_cancel)),
        on_writable_(std::move(on_writable)) {}
  // Marks the stream cancelled; returns whether the hook must run (the first time only).
  bool CancelLocked(bool stalled) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Drops what waits behind the write in flight and ends the stream with `why` after it.
  bool StopStalledLocked(std::string why) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ReleaseLocked(int64_t bytes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Arms the stall check if a write waits and none is armed; the alarm is set by the caller,
  // outside the lock.
  std::shared_ptr<grpc::Alarm> ArmStallLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SetStallAlarm(std::shared_ptr<grpc::Alarm> alarm, Clock::time_point when);
  void OnStallCheck() ABSL_LOCKS_EXCLUDED(mu_);
  void RunHook(bool stalled) ABSL_LOCKS_EXCLUDED(mu_);

  grpc::CallbackServerContext* const context_;
  const StreamBufferLimits limits_;
  EndedEarly on_cancel_;
  std::function<void()> on_writable_;
  Mutex mu_;
  std::deque<grpc::ByteBuffer> queue_ ABSL_GUARDED_BY(mu_);
  int64_t bytes_ ABSL_GUARDED_BY(mu_) = 0;     // in queue_, the write in flight included
  bool blocked_ ABSL_GUARDED_BY(mu_) = false;  // a Push answered false; on_writable is owed
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  Clock::time_point progress_ ABSL_GUARDED_BY(mu_);  // the last write started from idle or done
  std::shared_ptr<grpc::Alarm> stall_alarm_ ABSL_GUARDED_BY(mu_);
  Clock::time_point stall_check_at_ ABSL_GUARDED_BY(mu_);
  bool finish_pending_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  bool metadata_sent_ ABSL_GUARDED_BY(mu_) = false;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  bool stalled_ ABSL_GUARDED_BY(mu_) = false;
  // After a stall the client gets a grace to read its status; then the call is cancelled, and
  // while that runs (outside the lock) the write's completion leaves Finish to the canceller.
  bool abandoning_ ABSL_GUARDED_BY(mu_) = false;
  bool tearing_down_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status status_ ABSL_GUARDED_BY(mu_);  // what it ends with: gRPC's form at Finish
  // Not guarded: set in Create before the writer is shared; OnDone moves it out under mu_.
  std::shared_ptr<StreamWriter> self_;
  std::weak_ptr<StreamWriter> weak_self_;
};

}  // namespace walsh

#endif  // WALSH_COMMON_STREAM_WRITER_H_
