// Collectives between the ranks of one tensor-parallel group. Every rank calls each collective
// (CPU ranks from their own threads); a collective that does not complete within its timeout
// fails with DEADLINE_EXCEEDED, so a stalled rank fails the step instead of hanging the worker.
// Two implementations: in-process CPU ranks (cpu_communicator.h) and NCCL over the local GPUs
// of one process (nccl_communicator.h). The graph sees only this interface; the engine picks
// the implementation for its device.
#ifndef WALSH_WORKER_PARALLEL_COMMUNICATOR_H_
#define WALSH_WORKER_PARALLEL_COMMUNICATOR_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"

namespace walsh {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int size() const = 0;

  virtual absl::Status Barrier(int rank, std::chrono::milliseconds timeout) = 0;
  // Every rank has written its part [offsets[r], offsets[r] + counts[r]) of its own `buffer`;
  // on return every rank's buffer holds all parts.
  virtual absl::Status AllGatherInPlace(int rank, float* buffer, const std::vector<size_t>& offsets,
                                        const std::vector<size_t>& counts,
                                        std::chrono::milliseconds timeout) = 0;
  // buffer = Σ over ranks, added in rank order (the same bits whatever the timing).
  virtual absl::Status AllReduceSum(int rank, float* buffer, size_t count,
                                    std::chrono::milliseconds timeout) = 0;
  // root's `bytes` bytes at `buffer` are copied into every rank's `buffer`.
  virtual absl::Status Broadcast(int rank, int root, void* buffer, size_t bytes,
                                 std::chrono::milliseconds timeout) = 0;
  // A collective failed (a rank stalled or died): every later call fails at once.
  virtual bool broken() const = 0;
};

}  // namespace walsh

#endif  // WALSH_WORKER_PARALLEL_COMMUNICATOR_H_
