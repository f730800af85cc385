// CUDA ranks of one process over NCCL (nccl_api.h, loaded at run time): rank r on a device of its
// own, or several ranks on one device where NCCL allows it (2.30+, NCCL_MULTI_RANK_GPU_ENABLE=1).
// Buffers are device pointers; each collective is enqueued on the rank's stream, the stream its
// backend computes on, so it follows the ops before it without a host round trip.
//
// A hung collective is caught by a deadline, not by polling: the rank's thread blocks on its
// stream (a blocking-sync event, NcclDevices::Synchronize) while a watchdog thread waits for the
// earliest deadline of the collectives in flight; past it, the watchdog aborts every
// communicator of the group (ncclCommAbort), which ends the hung kernels, and the rank's call
// returns DEADLINE_EXCEEDED naming the rank and the collective. An error NCCL reports
// (ncclCommGetAsyncError) ends the call UNAVAILABLE naming it. Either way the group is broken and
// every later call fails at once.
//
// Exactness: the graph only all-gathers (grouped broadcasts: copies). NCCL's sums follow its own
// order, not the ranks', so AllReduceSum is refused rather than give other bits.
#ifndef WALSH_WORKER_PARALLEL_NCCL_COMMUNICATOR_H_
#define WALSH_WORKER_PARALLEL_NCCL_COMMUNICATOR_H_

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "common/mutex.h"
#include "worker/parallel/communicator.h"
#include "worker/parallel/nccl_api.h"

namespace walsh {

// What the communicator needs of the devices besides NCCL: CUDA's (nccl_cuda_devices.h) on a GPU,
// a fake in the CPU's tests.
class NcclDevices {
 public:
  virtual ~NcclDevices() = default;
  // Makes `device` current on the calling thread.
  virtual absl::Status Select(int device) = 0;
  // Blocks, without spinning, until everything enqueued on `stream` so far has finished or
  // failed.
  virtual absl::Status Synchronize(void* stream) = 0;
  // `bytes` of device memory on `device` for the communicator's own use, kept until it goes.
  virtual absl::StatusOr<void*> Scratch(int device, size_t bytes) = 0;
};

class NcclCommunicator final : public Communicator {
 public:
  struct Rank {
    int device = 0;
    void* stream = nullptr;  // cudaStream_t
  };
  // Ranks 0..N-1 of this process, rank r on ranks[r].device, its collectives on ranks[r].stream.
  // Refused, naming why, where NCCL cannot put two of them on one device.
  static absl::StatusOr<std::unique_ptr<NcclCommunicator>> Create(
      const nccl::Api& api, std::unique_ptr<NcclDevices> devices, std::vector<Rank> ranks);
  ~NcclCommunicator() override;

  int size() const override { return static_cast<int>(ranks_.size()); }
  const nccl::Version& version() const { return version_; }
  absl::Status Barrier(int rank, std::chrono::milliseconds timeout) override;
  absl::Status AllGatherInPlace(int rank, float* buffer, const std::vector<size_t>& offsets,
                                const std::vector<size_t>& counts,
                                std::chrono::milliseconds timeout) override;
  absl::Status AllReduceSum(int rank, float* buffer, size_t count,
                            std::chrono::milliseconds timeout) override;
  absl::Status Broadcast(int rank, int root, void* buffer, size_t bytes,
                         std::chrono::milliseconds timeout) override;
  bool broken() const override ABSL_LOCKS_EXCLUDED(mu_);

 private:
  NcclCommunicator(const nccl::Api& api, std::unique_ptr<NcclDevices> devices,
                   std::vector<Rank> ranks, nccl::Version version);
  // One collective of `rank`: armed under the watchdog's deadline before anything is enqueued,
  // `enqueue` inside NCCL (skipped once the group is aborted), then a wait on the rank's stream.
  absl::Status Collective(int rank, const char* what, std::chrono::milliseconds timeout,
                          const std::function<nccl::Result()>& enqueue) ABSL_LOCKS_EXCLUDED(mu_);
  // A rank's thread marks itself inside an NCCL call; false (and no call) once the group is
  // aborted. On leaving, it aborts its own communicator if the group was aborted meanwhile:
  // the watchdog aborts only communicators whose rank is outside NCCL, so none is freed under a
  // call.
  bool EnterNccl(int rank) ABSL_LOCKS_EXCLUDED(mu_);
  void LeaveNccl(int rank) ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status Fail(int rank, const char* what, const std::string& why) ABSL_LOCKS_EXCLUDED(mu_);
  void Watchdog() ABSL_LOCKS_EXCLUDED(mu_);

  const nccl::Api& api_;
  std::unique_ptr<NcclDevices> devices_;
  const std::vector<Rank> ranks_;
  const nccl::Version version_;
  std::vector<nccl::Comm> comms_;
  std::vector<void*> scratch_;  // a float per rank, for the barrier

  struct RankState {
    std::chrono::steady_clock::time_point deadline;
    bool pending = false;       // a collective armed and not yet waited out
    bool fired = false;         // the group was aborted while it was pending
    bool inside = false;        // the rank's thread is inside an NCCL call
    bool comm_aborted = false;  // its communicator is aborted (freed by NCCL)
  };
  mutable Mutex mu_;
  CondVar cv_;
  std::vector<RankState> state_ ABSL_GUARDED_BY(mu_);
  bool broken_ ABSL_GUARDED_BY(mu_) = false;
  bool aborted_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread watchdog_;
};

}  // namespace walsh

#endif  // WALSH_WORKER_PARALLEL_NCCL_COMMUNICATOR_H_
