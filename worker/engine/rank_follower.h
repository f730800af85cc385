// A follower of a tensor-parallel group that spans processes: it holds one rank's shard (its
// backend and its graph) and carries out what the leader's engine sends it (rank_command.h), in
// order, meeting the leader and the other followers in each step's collectives. It owns no
// sequences: the leader's KV manager decides every page and slot, and the follower checks each
// index against the caches it was told to allocate.
#ifndef WALSH_WORKER_ENGINE_RANK_FOLLOWER_H_
#define WALSH_WORKER_ENGINE_RANK_FOLLOWER_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "worker/engine/backend_group.h"
#include "worker/engine/engine_options.h"
#include "worker/engine/model.h"
#include "worker/engine/qwen35_graph.h"
#include "worker/engine/rank_command.h"
#include "worker/parallel/shard_plan.h"

namespace walsh {

class RankFollower {
 public:
  // `group` holds this process's rank (not 0) and its communicator; options.tp its size.
  static absl::StatusOr<std::unique_ptr<RankFollower>> Create(std::unique_ptr<Model> model,
                                                              const EngineOptions& options,
                                                              ProcessGroup group);

  // Runs the leader's commands until it closes the group (OK) or the group fails (the error,
  // naming the rank and the collective). Waits for each command without a deadline: an idle
  // leader sends nothing, and a leader that dies closes its connections, which ends the wait.
  absl::Status Serve();

  int rank() const { return group_.first_rank(); }
  int64_t steps() const { return steps_.load(std::memory_order_relaxed); }
  const Backend& backend() const { return group_.backend(0); }

 private:
  RankFollower(std::unique_ptr<Model> model, const EngineOptions& options, BackendGroup group);
  absl::Status Carry(const RankCommand& command);
  absl::Status CheckSlot(int32_t slot) const;
  absl::Status CheckPage(int32_t page) const;
  absl::Status CheckTokens(const StepPlan& plan) const;

  std::unique_ptr<Model> model_;
  EngineOptions options_;
  BackendGroup group_;
  std::unique_ptr<ShardPlan> plan_;
  std::unique_ptr<Qwen35Graph> graph_;
  int64_t pages_ = -1, page_size_ = 0, slots_ = -1;  // the caches allocated (-1: none yet)
  std::atomic<int64_t> steps_{0};
};

}  // namespace walsh

#endif  // WALSH_WORKER_ENGINE_RANK_FOLLOWER_H_
