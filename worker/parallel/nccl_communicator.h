// NCCL ranks: one communicator per local GPU of this process (ncclCommInitAll). Buffers are
// device pointers on the rank's GPU. Each collective is enqueued on the rank's stream and then
// polled until done or until the timeout, when the communicator is aborted (no NCCL hang).
// Built when CUDA is; exercised only where GPUs exist.
#ifndef WALSH_WORKER_PARALLEL_NCCL_COMMUNICATOR_H_
#define WALSH_WORKER_PARALLEL_NCCL_COMMUNICATOR_H_

#include <memory>

#include "absl/status/statusor.h"
#include "worker/parallel/communicator.h"

namespace walsh {

class NcclCommunicator final : public Communicator {
 public:
  // Ranks 0..devices-1 on GPUs 0..devices-1.
  static absl::StatusOr<std::unique_ptr<NcclCommunicator>> Create(int devices);
  ~NcclCommunicator() override;

  int size() const override;
  absl::Status Barrier(int rank, std::chrono::milliseconds timeout) override;
  absl::Status AllGatherInPlace(int rank, float* buffer, const std::vector<size_t>& offsets,
                                const std::vector<size_t>& counts,
                                std::chrono::milliseconds timeout) override;
  // NCCL's sum order is fixed for a given topology and size, not the rank order.
  absl::Status AllReduceSum(int rank, float* buffer, size_t count,
                            std::chrono::milliseconds timeout) override;
  absl::Status Broadcast(int rank, int root, void* buffer, size_t bytes,
                         std::chrono::milliseconds timeout) override;
  bool broken() const override;

 private:
  struct Impl;
  explicit NcclCommunicator(std::unique_ptr<Impl> impl);
  absl::Status Wait(int rank, std::chrono::milliseconds timeout);
  std::unique_ptr<Impl> impl_;
};

}  // namespace walsh

#endif  // WALSH_WORKER_PARALLEL_NCCL_COMMUNICATOR_H_
