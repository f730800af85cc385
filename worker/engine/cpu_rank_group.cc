#include "worker/engine/cpu_rank_group.h"

namespace walsh {

CpuRankGroup::CpuRankGroup(int ranks, CpuCommunicator* comm, std::chrono::milliseconds timeout,
                           int stall_rank)
    : comm_(comm), timeout_(timeout), stall_rank_(stall_rank) {
  for (int r = 1; r < ranks; ++r) threads_.emplace_back([this, r] { Loop(r); });
}

CpuRankGroup::~CpuRankGroup() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
}

absl::Status CpuRankGroup::Run(const std::function<void(int)>& work) {
  {
    std::lock_guard<std::mutex> l(mu_);
    work_ = &work;
    ++generation_;
  }
  cv_.notify_all();
  work(0);
  return comm_->AllGatherInPlace(0, nullptr, {}, {}, timeout_);
}

void CpuRankGroup::Loop(int rank) {
  uint64_t seen = 0;
  for (;;) {
    const std::function<void(int)>* work;
    {
      std::unique_lock<std::mutex> l(mu_);
      cv_.wait(l, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      work = work_;
    }
    if (rank == stall_rank_ && ++served_ > kStallAfter) {
      std::this_thread::sleep_for(timeout_ * 2);  // a stalled rank (tests)
      continue;
    }
    (*work)(rank);
    (void)comm_->AllGatherInPlace(rank, nullptr, {}, {}, timeout_);
  }
}

}  // namespace walsh
