// The server side of a response stream, shared by the worker and the gateway: responses queue
// and go out one write at a time, Finish follows the last write, and pushes after the stream
// ended are dropped. A client that stops reading may leave at most `max_buffered` responses
// queued; then the stream is cancelled and ends RESOURCE_EXHAUSTED after the write in flight.
#ifndef WALSH_COMMON_STREAM_WRITER_H_
#define WALSH_COMMON_STREAM_WRITER_H_

#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "common/mutex.h"
#include "google/protobuf/message.h"
#include "grpcpp/grpcpp.h"

namespace walsh {

class StreamWriter final : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
 public:
  // Runs once, outside the writer's lock, when the stream ends early: the client cancelled, a
  // write failed, or (stalled) the client stopped reading.
  using EndedEarly = std::function<void(bool stalled)>;

  // The writer keeps itself alive until gRPC is done with it (OnDone).
  static std::shared_ptr<StreamWriter> Create(grpc::CallbackServerContext* context,
                                              size_t max_buffered, EndedEarly on_cancel);

  // `initial_metadata`: added before the first response goes out (ignored after).
  void Push(const google::protobuf::Message& response,
            const std::pair<std::string, std::string>* initial_metadata = nullptr)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Ends the stream with `status` after the queued responses (no-op once it is ending).
  void Complete(const grpc::Status& status) ABSL_LOCKS_EXCLUDED(mu_);

  bool cancelled() ABSL_LOCKS_EXCLUDED(mu_);
  // Why it ended early: CANCELLED, or RESOURCE_EXHAUSTED naming --max-buffered-responses.
  grpc::Status CancelledStatus() ABSL_LOCKS_EXCLUDED(mu_);

  void OnWriteDone(bool ok) override ABSL_LOCKS_EXCLUDED(mu_);
  void OnCancel() override ABSL_LOCKS_EXCLUDED(mu_);
  void OnDone() override ABSL_LOCKS_EXCLUDED(mu_);

 private:
  StreamWriter(grpc::CallbackServerContext* context, size_t max_buffered, EndedEarly on_cancel)
      : context_(context), max_buffered_(max_buffered), on_cancel_(std::move(on_cancel)) {}
  // Marks the stream cancelled; returns whether the hook must run (the first time only).
  bool CancelLocked(bool stalled) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RunHook(bool stalled) ABSL_LOCKS_EXCLUDED(mu_);

  grpc::CallbackServerContext* const context_;
  const size_t max_buffered_;
  EndedEarly on_cancel_;
  Mutex mu_;
  std::deque<grpc::ByteBuffer> queue_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool finish_pending_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  bool metadata_sent_ ABSL_GUARDED_BY(mu_) = false;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  bool stalled_ ABSL_GUARDED_BY(mu_) = false;
  grpc::Status status_ ABSL_GUARDED_BY(mu_);
  // Not guarded: set in Create before the writer is shared; OnDone moves it out under mu_.
  std::shared_ptr<StreamWriter> self_;
};

}  // namespace walsh

#endif  // WALSH_COMMON_STREAM_WRITER_H_
