#include "worker/parallel/nccl_communicator.h"

#include <algorithm>
#include <cstdlib>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/status_macros.h"

namespace walsh {

using Clock = std::chrono::steady_clock;

absl::StatusOr<std::unique_ptr<NcclCommunicator>> NcclCommunicator::Create(
    const nccl::Api& api, std::unique_ptr<NcclDevices> devices, std::vector<Rank> ranks) {
  if (ranks.empty()) return absl::InvalidArgumentError("an NCCL group of no ranks");
  int code = 0;
  if (const nccl::Result r = api.GetVersion(&code); r != nccl::kSuccess) {
    return absl::FailedPreconditionError(
        absl::StrCat("ncclGetVersion failed: ", api.GetErrorString(r)));
  }
  const nccl::Version version = nccl::DecodeVersion(code);
  std::set<int> distinct;
  for (const Rank& r : ranks) distinct.insert(r.device);
  RETURN_IF_ERROR(nccl::CheckDeviceSharing(version, distinct.size() < ranks.size(),
                                           std::getenv("NCCL_MULTI_RANK_GPU_ENABLE")));
  std::unique_ptr<NcclCommunicator> c(
      new NcclCommunicator(api, std::move(devices), std::move(ranks), version));
  const int n = c->size();
  for (int r = 0; r < n; ++r) {
    ASSIGN_OR_RETURN(void* scratch, c->devices_->Scratch(c->ranks_[r].device, sizeof(float)));
    c->scratch_.push_back(scratch);
  }
  // One id, every rank initialized from this thread inside one group (NCCL's way for several
  // devices per thread; it also lets ranks share a device).
  nccl::UniqueId id;
  if (const nccl::Result r = api.GetUniqueId(&id); r != nccl::kSuccess) {
    return absl::UnavailableError(absl::StrCat("ncclGetUniqueId failed: ", api.GetErrorString(r)));
  }
  c->comms_.assign(n, nullptr);
  api.GroupStart();
  nccl::Result init = nccl::kSuccess;
  for (int r = 0; r < n && init == nccl::kSuccess; ++r) {
    if (absl::Status s = c->devices_->Select(c->ranks_[r].device); !s.ok()) {
      api.GroupEnd();
      return s;
    }
    init = api.CommInitRank(&c->comms_[r], n, id, r);
  }
  const nccl::Result ended = api.GroupEnd();
  if (init != nccl::kSuccess || ended != nccl::kSuccess) {
    return absl::UnavailableError(
        absl::StrCat("NCCL ", version.ToString(), ": ncclCommInitRank of ", n,
                     " ranks failed: ", api.GetErrorString(init != nccl::kSuccess ? init : ended)));
  }
  c->watchdog_ = std::thread([p = c.get()] { p->Watchdog(); });
  return c;
}

NcclCommunicator::NcclCommunicator(const nccl::Api& api, std::unique_ptr<NcclDevices> devices,
                                   std::vector<Rank> ranks, nccl::Version version)
    : api_(api),
      devices_(std::move(devices)),
      ranks_(std::move(ranks)),
      version_(version),
      watches_(ranks_.size()) {}

NcclCommunicator::~NcclCommunicator() {
  bool aborted;
  {
    MutexLock l(&mu_);
    stop_ = true;
    aborted = aborted_;
    cv_.SignalAll();
  }
  if (watchdog_.joinable()) watchdog_.join();
  if (aborted) return;  // ncclCommAbort freed them
  for (nccl::Comm comm : comms_) {
    if (comm != nullptr) api_.CommDestroy(comm);
  }
}

bool NcclCommunicator::broken() const {
  MutexLock l(&mu_);
  return broken_;
}

void NcclCommunicator::Watchdog() {
  MutexLock l(&mu_);
  while (!stop_) {
    Clock::time_point earliest = Clock::time_point::max();
    for (const Watch& w : watches_) {
      if (w.pending && !w.fired) earliest = std::min(earliest, w.deadline);
    }
    if (earliest == Clock::time_point::max()) {
      cv_.Wait(&mu_);
      continue;
    }
    const auto now = Clock::now();
    if (now < earliest) {
      cv_.WaitWithTimeout(&mu_, absl::FromChrono(earliest - now));
      continue;
    }
    for (Watch& w : watches_) {
      if (w.pending && w.deadline <= now) w.fired = true;
    }
    if (!aborted_) {
      aborted_ = broken_ = true;
      mu_.Unlock();
      // Ends every rank's kernels, the hung one's included; their waits then return.
      for (nccl::Comm comm : comms_) api_.CommAbort(comm);
      mu_.Lock();
    }
  }
}

absl::Status NcclCommunicator::Begin(int rank, const char* what) {
  if (rank < 0 || rank >= size()) {
    return absl::InternalError(absl::StrCat(what, " from rank ", rank, " of ", size()));
  }
  {
    MutexLock l(&mu_);
    if (broken_) {
      return absl::UnavailableError(absl::StrCat(
          "rank ", rank, ": the tensor-parallel group is broken by an earlier failure"));
    }
  }
  return devices_->Select(ranks_[rank].device);
}

absl::Status NcclCommunicator::Fail(int rank, const char* what, nccl::Result result) {
  MutexLock l(&mu_);
  broken_ = true;
  return absl::UnavailableError(absl::StrCat("rank ", rank, " of ", size(), ": NCCL ", what,
                                             " failed: ", api_.GetErrorString(result)));
}

absl::Status NcclCommunicator::Finish(int rank, const char* what, nccl::Result enqueued,
                                      std::chrono::milliseconds timeout) {
  if (enqueued != nccl::kSuccess) return Fail(rank, what, enqueued);
  {
    MutexLock l(&mu_);
    watches_[rank] = {Clock::now() + timeout, true, false};
    cv_.SignalAll();
  }
  const absl::Status synced = devices_->Synchronize(ranks_[rank].stream);
  bool fired;
  {
    MutexLock l(&mu_);
    watches_[rank].pending = false;
    fired = watches_[rank].fired;
  }
  if (fired) {
    return absl::DeadlineExceededError(absl::StrCat("rank ", rank, " of ", size(), ": NCCL ", what,
                                                    " did not complete within ", timeout.count(),
                                                    " ms; the group's communicators were aborted"));
  }
  nccl::Result async = nccl::kSuccess;
  api_.CommGetAsyncError(comms_[rank], &async);
  if (async != nccl::kSuccess && async != nccl::kInProgress) return Fail(rank, what, async);
  if (!synced.ok()) {
    MutexLock l(&mu_);
    broken_ = true;
    return absl::UnavailableError(
        absl::StrCat("rank ", rank, " of ", size(), ": NCCL ", what, ": ", synced.message()));
  }
  return absl::OkStatus();
}

absl::Status NcclCommunicator::Barrier(int rank, std::chrono::milliseconds timeout) {
  RETURN_IF_ERROR(Begin(rank, "barrier"));
  return Finish(rank, "barrier",
                api_.AllReduce(scratch_[rank], scratch_[rank], 1, nccl::kFloat32, nccl::kSum,
                               comms_[rank], ranks_[rank].stream),
                timeout);
}

absl::Status NcclCommunicator::AllGatherInPlace(int rank, float* buffer,
                                                const std::vector<size_t>& offsets,
                                                const std::vector<size_t>& counts,
                                                std::chrono::milliseconds timeout) {
  if (offsets.size() != ranks_.size() || counts.size() != ranks_.size()) {
    return absl::InternalError(
        absl::StrCat("all-gather of ", offsets.size(), " parts over ", size(), " ranks"));
  }
  RETURN_IF_ERROR(Begin(rank, "all-gather"));
  // Each rank's part broadcast from it, in one group: uneven parts, copies only.
  nccl::Result enqueued = api_.GroupStart();
  for (int r = 0; r < size() && enqueued == nccl::kSuccess; ++r) {
    enqueued = api_.Broadcast(buffer + offsets[r], buffer + offsets[r], counts[r], nccl::kFloat32,
                              r, comms_[rank], ranks_[rank].stream);
  }
  const nccl::Result ended = api_.GroupEnd();
  return Finish(rank, "all-gather", enqueued != nccl::kSuccess ? enqueued : ended, timeout);
}

absl::Status NcclCommunicator::AllReduceSum(int, float*, size_t, std::chrono::milliseconds) {
  return absl::UnimplementedError(
      "an NCCL all-reduce adds in NCCL's order, not the ranks': the graph all-gathers instead");
}

absl::Status NcclCommunicator::Broadcast(int rank, int root, void* buffer, size_t bytes,
                                         std::chrono::milliseconds timeout) {
  if (root < 0 || root >= size()) {
    return absl::InternalError(absl::StrCat("broadcast from rank ", root, " of ", size()));
  }
  RETURN_IF_ERROR(Begin(rank, "broadcast"));
  return Finish(
      rank, "broadcast",
      api_.Broadcast(buffer, buffer, bytes, nccl::kUint8, root, comms_[rank], ranks_[rank].stream),
      timeout);
}

}  // namespace walsh
