#include "common/stream_writer.h"

#include "absl/strings/str_cat.h"
#include "common/raw_messages.h"

namespace walsh {

std::shared_ptr<StreamWriter> StreamWriter::Create(grpc::CallbackServerContext* context,
                                                   size_t max_buffered, EndedEarly on_cancel) {
  std::shared_ptr<StreamWriter> writer(
      new StreamWriter(context, max_buffered, std::move(on_cancel)));
  writer->self_ = writer;
  return writer;
}

void StreamWriter::Push(const google::protobuf::Message& response,
                        const std::pair<std::string, std::string>* initial_metadata) {
  const grpc::ByteBuffer* next = nullptr;
  bool stalled = false;
  {
    MutexLock l(&mu_);
    if (finished_ || finish_pending_) return;
    if (queue_.size() >= max_buffered_) {
      queue_.resize(1);  // the write in flight
      finish_pending_ = true;
      status_ = grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                             absl::StrCat("the client stopped reading: ", max_buffered_,
                                          " responses were waiting (--max-buffered-responses)"));
      stalled = CancelLocked(/*stalled=*/true);
    } else {
      if (initial_metadata != nullptr && !metadata_sent_) {
        context_->AddInitialMetadata(initial_metadata->first, initial_metadata->second);
      }
      metadata_sent_ = true;
      queue_.push_back(SerializeToByteBuffer(response));
      if (!writing_) {
        writing_ = true;
        next = &queue_.front();
      }
    }
  }
  if (stalled) RunHook(true);
  if (next != nullptr) StartWrite(next);
}

void StreamWriter::Complete(const grpc::Status& status) {
  {
    MutexLock l(&mu_);
    if (finished_ || finish_pending_) return;
    finish_pending_ = true;
    status_ = status;
    if (writing_) return;
    finished_ = true;
  }
  Finish(status);
}

bool StreamWriter::cancelled() {
  MutexLock l(&mu_);
  return cancelled_;
}

grpc::Status StreamWriter::CancelledStatus() {
  MutexLock l(&mu_);
  return stalled_ ? status_ : grpc::Status(grpc::StatusCode::CANCELLED, "cancelled");
}

void StreamWriter::OnWriteDone(bool ok) {
  const grpc::ByteBuffer* next = nullptr;
  bool finish = false, hook = false;
  grpc::Status status;
  {
    MutexLock l(&mu_);
    queue_.pop_front();
    if (!ok) {
      queue_.clear();
      hook = CancelLocked(/*stalled=*/false);
    }
    if (!queue_.empty()) {
      next = &queue_.front();
    } else {
      writing_ = false;
      if (finish_pending_ && !finished_) {
        finished_ = finish = true;
        status = status_;
      }
    }
  }
  if (next != nullptr) StartWrite(next);
  if (finish) Finish(status);
  if (hook) RunHook(false);
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
  {
    MutexLock l(&mu_);
    self = std::move(self_);
  }
}  // the last reference may go here, after the lock is released

bool StreamWriter::CancelLocked(bool stalled) {
  if (cancelled_) return false;
  cancelled_ = true;
  stalled_ = stalled;
  return true;
}

void StreamWriter::RunHook(bool stalled) {
  if (on_cancel_) on_cancel_(stalled);
}

}  // namespace walsh
