#include "worker/engine/rank_threads.h"

namespace walsh {

RankThreads::RankThreads(int ranks, std::chrono::milliseconds stall_sleep, int stall_rank)
    : ranks_(ranks), stall_sleep_(stall_sleep), stall_rank_(stall_rank), status_(ranks) {
  for (int r = 1; r < ranks; ++r) threads_.emplace_back([this, r] { Loop(r); });
}

RankThreads::~RankThreads() {
  {
    MutexLock l(&mu_);
    stop_ = true;
  }
  cv_.SignalAll();
  for (auto& t : threads_) t.join();
}

absl::Status RankThreads::RunRank(int rank, const std::function<absl::Status(int)>& work) {
  if (rank == stall_rank_ && ++steps_of_stall_rank_ > kStallAfterSteps) {
    std::this_thread::sleep_for(stall_sleep_);
    return absl::DeadlineExceededError("rank stalled (test seam)");
  }
  return work(rank);
}

absl::Status RankThreads::Run(const std::function<absl::Status(int)>& work) {
  {
    MutexLock l(&mu_);
    work_ = &work;
    pending_ = ranks_ - 1;
    ++generation_;
  }
  cv_.SignalAll();
  status_[0] = RunRank(0, work);
  MutexLock l(&mu_);
  while (pending_ != 0) cv_.Wait(&mu_);
  for (const absl::Status& s : status_) {
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

void RankThreads::Loop(int rank) {
  uint64_t seen = 0;
  for (;;) {
    const std::function<absl::Status(int)>* work;
    {
      MutexLock l(&mu_);
      while (!(stop_ || generation_ != seen)) cv_.Wait(&mu_);
      if (stop_) return;
      seen = generation_;
      work = work_;
    }
    absl::Status s = RunRank(rank, *work);
    {
      MutexLock l(&mu_);
      status_[rank] = std::move(s);
      --pending_;
    }
    cv_.SignalAll();
  }
}

}  // namespace walsh
