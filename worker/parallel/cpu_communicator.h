// In-process CPU ranks: threads that share memory. Collectives are barriers around shared
// buffers; the barrier has a timeout, and once a collective timed out the communicator is
// broken: every later call fails at once (a group with a lost rank never hangs).
#ifndef WALSH_WORKER_PARALLEL_CPU_COMMUNICATOR_H_
#define WALSH_WORKER_PARALLEL_CPU_COMMUNICATOR_H_

#include <vector>

#include "absl/base/thread_annotations.h"
#include "common/mutex.h"
#include "worker/parallel/communicator.h"

namespace walsh {

class CpuCommunicator final : public Communicator {
 public:
  explicit CpuCommunicator(int ranks);
  int size() const override { return ranks_; }

  absl::Status Barrier(int rank, std::chrono::milliseconds timeout) override
      ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status AllGatherInPlace(int rank, float* buffer, const std::vector<size_t>& offsets,
                                const std::vector<size_t>& counts,
                                std::chrono::milliseconds timeout) override
      ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status AllReduceSum(int rank, float* buffer, size_t count,
                            std::chrono::milliseconds timeout) override ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status Broadcast(int rank, int root, void* buffer, size_t bytes,
                         std::chrono::milliseconds timeout) override ABSL_LOCKS_EXCLUDED(mu_);
  bool broken() const override ABSL_LOCKS_EXCLUDED(mu_);

 private:
  const int ranks_;
  mutable Mutex mu_;
  CondVar cv_;
  int arrived_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
  bool broken_ ABSL_GUARDED_BY(mu_) = false;
  // Not guarded: written before a Barrier (slots_ under mu_) and read after it, which orders them.
  std::vector<void*> slots_;    // per-rank pointers exchanged by a collective
  std::vector<float> scratch_;  // all-reduce result
};

}  // namespace walsh

#endif  // WALSH_WORKER_PARALLEL_CPU_COMMUNICATOR_H_
