// The CUDA backend's step profile (EngineOptions::profile, walsh-bench decode --profile): a CUDA
// event is recorded on the stream when the step's inputs are in and after every launch, and an
// op is charged the stream's time from the mark before its launch to the mark after it. So the
// ops' times add up to the step's time on the device, gaps between launches (the host's launch
// latency while the GPU waits) charged to the op that followed them: what a decode step bound by
// launches shows. Read when the step's logits come back (the stream has finished by then).
#ifndef WALSH_WORKER_ENGINE_CUDA_OP_TIMELINE_H_
#define WALSH_WORKER_ENGINE_CUDA_OP_TIMELINE_H_

#include <cuda_runtime.h>

#include <vector>

#include "absl/status/status.h"
#include "worker/engine/op_profile.h"

namespace walsh {

class CudaOpTimeline {
 public:
  explicit CudaOpTimeline(OpProfile* profile) : profile_(profile) {}
  ~CudaOpTimeline();
  CudaOpTimeline(const CudaOpTimeline&) = delete;
  CudaOpTimeline& operator=(const CudaOpTimeline&) = delete;

  bool enabled() const { return profile_ != nullptr; }
  // The step's first mark; drops marks of a step that never read its results.
  absl::Status Begin(cudaStream_t stream);
  // A mark after `op`'s launch (a static string).
  absl::Status Mark(const char* op, cudaStream_t stream);
  // Once the stream has finished: each op's time between its marks into the profile.
  absl::Status Collect();

 private:
  absl::Status Record(cudaStream_t stream);

  OpProfile* profile_;
  std::vector<cudaEvent_t> events_;  // a pool, reused from step to step
  std::vector<const char*> ops_;     // ops_[i]: the op that ends at mark i + 1
  size_t marks_ = 0;                 // marks recorded this step
};

}  // namespace walsh

#endif  // WALSH_WORKER_ENGINE_CUDA_OP_TIMELINE_H_
