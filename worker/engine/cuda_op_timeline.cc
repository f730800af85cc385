#include "worker/engine/cuda_op_timeline.h"

#include <chrono>

#include "absl/strings/str_cat.h"

namespace walsh {
namespace {

absl::Status EventStatus(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return absl::OkStatus();
  (void)cudaGetLastError();
  return absl::InternalError(absl::StrCat("cuda: profile ", what, ": ", cudaGetErrorString(e)));
}

}  // namespace

CudaOpTimeline::~CudaOpTimeline() {
  for (cudaEvent_t e : events_) (void)cudaEventDestroy(e);
}

absl::Status CudaOpTimeline::Record(cudaStream_t stream) {
  if (marks_ == events_.size()) {
    cudaEvent_t e = nullptr;
    if (absl::Status s = EventStatus(cudaEventCreate(&e), "event"); !s.ok()) return s;
    events_.push_back(e);
  }
  return EventStatus(cudaEventRecord(events_[marks_++], stream), "mark");
}

absl::Status CudaOpTimeline::Begin(cudaStream_t stream) {
  if (!enabled()) return absl::OkStatus();
  marks_ = 0;
  ops_.clear();
  return Record(stream);
}

absl::Status CudaOpTimeline::Mark(const char* op, cudaStream_t stream) {
  if (!enabled() || marks_ == 0) return absl::OkStatus();
  ops_.push_back(op);
  return Record(stream);
}

absl::Status CudaOpTimeline::Collect() {
  if (!enabled() || marks_ == 0) return absl::OkStatus();
  for (size_t i = 1; i < marks_; ++i) {
    float ms = 0;
    if (absl::Status s =
            EventStatus(cudaEventElapsedTime(&ms, events_[i - 1], events_[i]), "elapsed time");
        !s.ok()) {
      return s;
    }
    profile_->Add(ops_[i - 1], std::chrono::nanoseconds(static_cast<int64_t>(ms * 1e6)));
  }
  marks_ = 0;
  ops_.clear();
  return absl::OkStatus();
}

}  // namespace walsh
