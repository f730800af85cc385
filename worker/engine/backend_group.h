// The backends of one engine, one per tensor-parallel rank, and what joins them: the
// communicator and, for CPU ranks, the rank threads. MakeBackendGroup picks the kernels (the
// CPU's best ISA or the one asked for, or CUDA), the devices and the communicator, so the engine
// holds none of them. A device that cannot be had is an error naming why.
#ifndef WALSH_WORKER_ENGINE_BACKEND_GROUP_H_
#define WALSH_WORKER_ENGINE_BACKEND_GROUP_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/engine/backend.h"
#include "worker/engine/engine_options.h"
#include "worker/engine/rank_threads.h"
#include "worker/parallel/communicator.h"

namespace walsh {

// This process's place in a tensor-parallel group that spans processes (one rank each): rank
// `rank` of comm->size(), joined to the others by `comm` (worker/parallel/gloo_communicator.h).
struct ProcessGroup {
  int rank = 0;
  std::unique_ptr<Communicator> comm;
};

class BackendGroup {
 public:
  BackendGroup(BackendGroup&&) = default;
  BackendGroup& operator=(BackendGroup&&) = default;
  ~BackendGroup();

  // The ranks this process holds: first_rank() .. first_rank() + size() - 1 of ranks().
  int size() const { return static_cast<int>(backends_.size()); }
  int first_rank() const { return first_rank_; }
  int ranks() const { return comm_ != nullptr ? comm_->size() : 1; }
  // Other processes hold some of the ranks (a ProcessGroup): the leader mirrors every backend
  // operation to them (rank_command.h).
  bool spans_processes() const { return ranks() > size(); }
  // The backend of the r-th rank this process holds.
  Backend& backend(int r) const { return *backends_[r]; }
  // Null at one rank.
  Communicator* communicator() const { return comm_.get(); }
  // "cuda", or the CPU kernels' ISA ("avx2", "scalar", "avx512vnni", "avx512vbmi").
  const std::string& kernels() const { return kernels_; }
  // A collective failed: the group is broken and every later step fails.
  bool broken() const { return comm_ != nullptr && comm_->broken(); }

  // Runs work(rank) on every rank at once (inline at one rank); OK, or the first failure in rank
  // order.
  absl::Status Run(const std::function<absl::Status(int)>& work);

 private:
  friend absl::StatusOr<BackendGroup> MakeBackendGroup(const Model& model,
                                                       const EngineOptions& options,
                                                       const EngineFaults& faults,
                                                       ProcessGroup process_group);
  BackendGroup() = default;

  std::string kernels_;
  int first_rank_ = 0;
  // Destroyed in reverse: the rank threads, then the communicator (NCCL's use the backends'
  // streams), then the backends.
  std::vector<std::unique_ptr<Backend>> backends_;
  std::unique_ptr<Communicator> comm_;
  std::unique_ptr<RankThreads> threads_;  // ranks when there are several in this process
};

// `model` must outlive the group. With a process group's communicator, this process holds its one
// rank (options.tp must be the group's size); otherwise all options.tp ranks.
absl::StatusOr<BackendGroup> MakeBackendGroup(const Model& model, const EngineOptions& options,
                                              const EngineFaults& faults = {},
                                              ProcessGroup process_group = {});

}  // namespace walsh

#endif  // WALSH_WORKER_ENGINE_BACKEND_GROUP_H_
