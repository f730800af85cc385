// The threads of a tensor-parallel group in one process: rank 0 is the calling thread, ranks
// 1..N-1 each a thread of their own, all running one step at once and meeting in the
// communicator's collectives (which time out, so a lost rank fails the step, never hangs it).
#ifndef WALSH_WORKER_ENGINE_RANK_THREADS_H_
#define WALSH_WORKER_ENGINE_RANK_THREADS_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "common/mutex.h"

namespace walsh {

class RankThreads {
 public:
  // stall_rank (a test seam): that rank stops taking steps after its first kStallAfterSteps,
  // sleeping instead, as a hung device would.
  RankThreads(int ranks, std::chrono::milliseconds stall_sleep, int stall_rank = -1);
  ~RankThreads();

  // Runs work(rank) on every rank at once; returns when all have finished: OK, or the first
  // failure in rank order.
  absl::Status Run(const std::function<absl::Status(int)>& work) ABSL_LOCKS_EXCLUDED(mu_);

  static constexpr int kStallAfterSteps = 2;

 private:
  void Loop(int rank) ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status RunRank(int rank, const std::function<absl::Status(int)>& work);

  const int ranks_;
  const std::chrono::milliseconds stall_sleep_;
  const int stall_rank_;
  int steps_of_stall_rank_ = 0;
  Mutex mu_;
  CondVar cv_;
  const std::function<absl::Status(int)>* work_ ABSL_GUARDED_BY(mu_) = nullptr;
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
  int pending_ ABSL_GUARDED_BY(mu_) = 0;
  // Not guarded: each rank writes only its own element (rank 0 without mu_), and Run reads them
  // once pending_ is 0.
  std::vector<absl::Status> status_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace walsh

#endif  // WALSH_WORKER_ENGINE_RANK_THREADS_H_
