// A tensor-parallel group across processes (one rank each, on one host or many) over gloo's TCP
// transport (Debian's libgloo): the CPU group CI tests, and the shape an NCCL group across pods
// takes. The ranks meet through a rendezvous store (gloo::rendezvous::Store: the leader's
// handshake service, worker/server/rank_group_service.h, or a HashStore in tests), then every
// collective runs over direct TCP pairs.
//
// Exactness: the graph only all-gathers (copies), and AllReduceSum gathers every rank's buffer
// and adds them in rank order from 0.0f, as CpuCommunicator does, so the bits never depend on
// the transport. A gloo failure (a timeout, a peer that closed its socket) breaks the group:
// that call and every later one fail, naming the rank and the collective.
#ifndef WALSH_WORKER_PARALLEL_GLOO_COMMUNICATOR_H_
#define WALSH_WORKER_PARALLEL_GLOO_COMMUNICATOR_H_

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/parallel/communicator.h"

namespace gloo {
class Context;
namespace rendezvous {
class Store;
}  // namespace rendezvous
}  // namespace gloo

namespace walsh {

class GlooCommunicator final : public Communicator {
 public:
  // Joins rank `rank` of `size` through `store`, listening for its peers on `hostname` (an
  // address the other ranks can reach; empty: this host's name). Fails when the group is not
  // complete within `timeout`.
  static absl::StatusOr<std::unique_ptr<GlooCommunicator>> Connect(
      gloo::rendezvous::Store& store, int rank, int size, const std::string& hostname,
      std::chrono::milliseconds timeout);
  ~GlooCommunicator() override;

  int size() const override { return size_; }
  int rank() const { return rank_; }

  absl::Status Barrier(int rank, std::chrono::milliseconds timeout) override;
  absl::Status AllGatherInPlace(int rank, float* buffer, const std::vector<size_t>& offsets,
                                const std::vector<size_t>& counts,
                                std::chrono::milliseconds timeout) override;
  absl::Status AllReduceSum(int rank, float* buffer, size_t count,
                            std::chrono::milliseconds timeout) override;
  absl::Status Broadcast(int rank, int root, void* buffer, size_t bytes,
                         std::chrono::milliseconds timeout) override;
  bool broken() const override { return broken_.load(std::memory_order_acquire); }

 private:
  GlooCommunicator(std::shared_ptr<gloo::Context> context, int rank, int size);
  // Runs one gloo collective: its exception becomes a status naming the rank and `what`, and
  // breaks the group.
  template <typename F>
  absl::Status Guard(const char* what, int rank, F&& collective);

  std::shared_ptr<gloo::Context> context_;
  const int rank_, size_;
  std::atomic<bool> broken_{false};
  std::vector<float> gathered_;  // AllReduceSum's every-rank buffer
};

}  // namespace walsh

#endif  // WALSH_WORKER_PARALLEL_GLOO_COMMUNICATOR_H_
