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

class BackendGroup {
 public:
  BackendGroup(BackendGroup&&) = default;
  BackendGroup& operator=(BackendGroup&&) = default;
  ~BackendGroup();

  int size() const { return static_cast<int>(backends_.size()); }
  Backend& backend(int rank) const { return *backends_[rank]; }
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
                                                       const EngineFaults& faults);
  BackendGroup() = default;

  std::string kernels_;
  std::unique_ptr<Communicator> comm_;
  std::vector<std::unique_ptr<Backend>> backends_;
  std::unique_ptr<RankThreads> threads_;  // CPU ranks when there are several
};

// `model` must outlive the group.
absl::StatusOr<BackendGroup> MakeBackendGroup(const Model& model, const EngineOptions& options,
                                              const EngineFaults& faults = {});

}  // namespace walsh

#endif  // WALSH_WORKER_ENGINE_BACKEND_GROUP_H_
