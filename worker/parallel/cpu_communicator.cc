#include "worker/parallel/cpu_communicator.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"

namespace walsh {

CpuCommunicator::CpuCommunicator(int ranks) : ranks_(ranks), slots_(ranks, nullptr) {}

bool CpuCommunicator::broken() const {
  MutexLock l(&mu_);
  return broken_;
}

absl::Status CpuCommunicator::Barrier(int rank, std::chrono::milliseconds timeout) {
  MutexLock l(&mu_);
  if (broken_)
    return absl::UnavailableError("tensor-parallel group is broken by an earlier timeout");
  const uint64_t gen = generation_;
  if (++arrived_ == ranks_) {
    arrived_ = 0;
    ++generation_;
    cv_.SignalAll();
    return absl::OkStatus();
  }
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (generation_ == gen && !broken_) {
    const auto left = deadline - std::chrono::steady_clock::now();
    if (left <= left.zero()) break;
    cv_.WaitWithTimeout(&mu_, absl::FromChrono(left));
  }
  if (generation_ == gen && !broken_) {
    broken_ = true;
    cv_.SignalAll();
    return absl::DeadlineExceededError(
        absl::StrCat("rank ", rank, ": a collective did not complete within ", timeout.count(),
                     " ms (", arrived_, " of ", ranks_, " ranks arrived)"));
  }
  if (broken_ && generation_ == gen) {
    return absl::UnavailableError("tensor-parallel group is broken by a timeout on another rank");
  }
  return absl::OkStatus();
}

absl::Status CpuCommunicator::AllGatherInPlace(int rank, float* buffer,
                                               const std::vector<size_t>& offsets,
                                               const std::vector<size_t>& counts,
                                               std::chrono::milliseconds timeout) {
  {
    MutexLock l(&mu_);
    slots_[rank] = buffer;
  }
  if (absl::Status s = Barrier(rank, timeout); !s.ok()) return s;
  // Every rank copies the others' parts out of their buffers into its own.
  for (size_t r = 0; r < offsets.size(); ++r) {
    const float* from = static_cast<const float*>(slots_[r]);
    if (static_cast<int>(r) != rank && from != buffer && counts[r] > 0) {
      std::memcpy(buffer + offsets[r], from + offsets[r], counts[r] * sizeof(float));
    }
  }
  return Barrier(rank, timeout);
}

absl::Status CpuCommunicator::AllReduceSum(int rank, float* buffer, size_t count,
                                           std::chrono::milliseconds timeout) {
  {
    MutexLock l(&mu_);
    slots_[rank] = buffer;
  }
  if (absl::Status s = Barrier(rank, timeout); !s.ok()) return s;
  if (rank == 0) {
    scratch_.assign(count, 0.0f);
    for (int r = 0; r < ranks_; ++r) {
      const float* b = static_cast<const float*>(slots_[r]);
      for (size_t i = 0; i < count; ++i) scratch_[i] += b[i];
    }
  }
  if (absl::Status s = Barrier(rank, timeout); !s.ok()) return s;
  std::memcpy(buffer, scratch_.data(), count * sizeof(float));
  return Barrier(rank, timeout);
}

absl::Status CpuCommunicator::Broadcast(int rank, int root, void* buffer, size_t bytes,
                                        std::chrono::milliseconds timeout) {
  if (rank == root) {
    MutexLock l(&mu_);
    slots_[root] = buffer;
  }
  if (absl::Status s = Barrier(rank, timeout); !s.ok()) return s;
  if (rank != root && buffer != slots_[root]) std::memcpy(buffer, slots_[root], bytes);
  return Barrier(rank, timeout);
}

}  // namespace walsh
