// Ranks 1..N-1 of a tensor-parallel group of in-process CPU ranks, each a thread that computes
// its rows of a projection and joins the all-gather; rank 0 is the calling thread.
#ifndef WALSH_WORKER_ENGINE_CPU_RANK_GROUP_H_
#define WALSH_WORKER_ENGINE_CPU_RANK_GROUP_H_

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "worker/parallel/cpu_communicator.h"

namespace walsh {

class CpuRankGroup {
 public:
  // stall_rank (tests): that rank stops answering after its first 200 collectives.
  CpuRankGroup(int ranks, CpuCommunicator* comm, std::chrono::milliseconds timeout, int stall_rank);
  ~CpuRankGroup();

  // Every rank runs work(rank) on its rows, then all meet in the all-gather.
  absl::Status Run(const std::function<void(int)>& work);

 private:
  void Loop(int rank);

  static constexpr int kStallAfter = 200;
  CpuCommunicator* comm_;
  std::chrono::milliseconds timeout_;
  int stall_rank_;
  int served_ = 0;
  std::mutex mu_;
  std::condition_variable cv_;
  const std::function<void(int)>* work_ = nullptr;
  uint64_t generation_ = 0;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace walsh

#endif  // WALSH_WORKER_ENGINE_CPU_RANK_GROUP_H_
