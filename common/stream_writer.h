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
#include <mutex>
#include <string>

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
            const std::pair<std::string, std::string>* initial_metadata = nullptr);
  // Ends the stream with `status` after the queued responses (no-op once it is ending).
  void Complete(const grpc::Status& status);

  bool cancelled();
  // Why it ended early: CANCELLED, or RESOURCE_EXHAUSTED naming --max-buffered-responses.
  grpc::Status CancelledStatus();

  void OnWriteDone(bool ok) override;
  void OnCancel() override;
  void OnDone() override;

 private:
  StreamWriter(grpc::CallbackServerContext* context, size_t max_buffered, EndedEarly on_cancel)
      : context_(context), max_buffered_(max_buffered), on_cancel_(std::move(on_cancel)) {}
  // Marks the stream cancelled; returns whether the hook must run (the first time only).
  bool CancelLocked(bool stalled);
  void RunHook(bool stalled);

  grpc::CallbackServerContext* const context_;
  const size_t max_buffered_;
  EndedEarly on_cancel_;
  std::mutex mu_;
  std::deque<grpc::ByteBuffer> queue_;
  bool writing_ = false, finish_pending_ = false, finished_ = false, metadata_sent_ = false;
  bool cancelled_ = false, stalled_ = false;
  grpc::Status status_;
  std::shared_ptr<StreamWriter> self_;
};

}  // namespace walsh

#endif  // WALSH_COMMON_STREAM_WRITER_H_
