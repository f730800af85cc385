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
  // Every device answers before the group starts: a group that inits only some of its ranks
  // would wait for the others in NCCL's bootstrap.
  for (int r = 0; r < n; ++r) {
    RETURN_IF_ERROR(c->devices_->Select(c->ranks_[r].device));
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
  nccl::Result init = api.GroupStart();
  for (int r = 0; r < n && init == nccl::kSuccess; ++r) {
    (void)c->devices_->Select(c->ranks_[r].device);  // answered above
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
      state_(ranks_.size()) {}

NcclCommunicator::~NcclCommunicator() {
  bool aborted;
  std::vector<bool> gone(comms_.size());
  {
    MutexLock l(&mu_);
    stop_ = true;
    aborted = aborted_;
    for (size_t r = 0; r < comms_.size(); ++r) gone[r] = state_[r].comm_aborted;
    cv_.SignalAll();
  }
  if (watchdog_.joinable()) watchdog_.join();
  // No rank is inside NCCL now (the engine's steps are over). An aborted group's communicators
  // not aborted yet are; a whole group's are destroyed in one NCCL group, since one thread holds
  // every rank and destroying them one by one could wait on ranks not yet destroyed.
  if (aborted) {
    for (size_t r = 0; r < comms_.size(); ++r) {
      if (comms_[r] != nullptr && !gone[r]) (void)api_.CommAbort(comms_[r]);
    }
    return;
  }
  (void)api_.GroupStart();
  for (nccl::Comm comm : comms_) {
    if (comm != nullptr) (void)api_.CommDestroy(comm);
  }
  (void)api_.GroupEnd();
}

bool NcclCommunicator::broken() const {
  MutexLock l(&mu_);
  return broken_;
}

void NcclCommunicator::Watchdog() {
  MutexLock l(&mu_);
  while (!stop_) {
    Clock::time_point earliest = Clock::time_point::max();
    for (const RankState& s : state_) {
      if (s.pending && !s.fired) earliest = std::min(earliest, s.deadline);
    }
    if (aborted_ || earliest == Clock::time_point::max()) {
      cv_.Wait(&mu_);
      continue;
    }
    const auto now = Clock::now();
    if (now < earliest) {
      cv_.WaitWithTimeout(&mu_, absl::FromChrono(earliest - now));
      continue;
    }
    // A collective passed its deadline: the group is aborted, every pending wait ends.
    aborted_ = broken_ = true;
    std::vector<nccl::Comm> abort;
    for (size_t r = 0; r < state_.size(); ++r) {
      RankState& s = state_[r];
      if (s.pending) s.fired = true;
      if (!s.inside && !s.comm_aborted) {
        s.comm_aborted = true;
        abort.push_back(comms_[r]);
      }
    }
    mu_.Unlock();
    // Ends the kernels of every rank outside NCCL, the hung one's included; a rank inside NCCL
    // aborts its own on leaving (LeaveNccl).
    for (nccl::Comm comm : abort) api_.CommAbort(comm);
    mu_.Lock();
    cv_.SignalAll();
  }
}

bool NcclCommunicator::EnterNccl(int rank) {
  MutexLock l(&mu_);
  if (aborted_) return false;
  state_[rank].inside = true;
  return true;
}

void NcclCommunicator::LeaveNccl(int rank) {
  bool abort = false;
  {
    MutexLock l(&mu_);
    RankState& s = state_[rank];
    s.inside = false;
    if (aborted_ && !s.comm_aborted) abort = s.comm_aborted = true;
  }
  if (abort) api_.CommAbort(comms_[rank]);
}

absl::Status NcclCommunicator::Fail(int rank, const char* what, const std::string& why) {
  MutexLock l(&mu_);
  broken_ = true;
  state_[rank].pending = false;
  return absl::UnavailableError(
      absl::StrCat("rank ", rank, " of ", size(), ": NCCL ", what, " failed: ", why));
}

absl::Status NcclCommunicator::Collective(int rank, const char* what,
                                          std::chrono::milliseconds timeout,
                                          const std::function<nccl::Result()>& enqueue) {
  if (rank < 0 || rank >= size()) {
    return absl::InternalError(absl::StrCat(what, " from rank ", rank, " of ", size()));
  }
  {
    // Armed before enqueuing: an enqueue that blocks (NCCL connects lazily, at a group's first
    // collective) is under the deadline too.
    MutexLock l(&mu_);
    if (broken_) {
      return absl::UnavailableError(absl::StrCat(
          "rank ", rank, ": the tensor-parallel group is broken by an earlier failure"));
    }
    state_[rank].deadline = Clock::now() + timeout;
    state_[rank].pending = true;
    state_[rank].fired = false;
    cv_.SignalAll();
  }
  if (absl::Status s = devices_->Select(ranks_[rank].device); !s.ok()) {
    return Fail(rank, what, std::string(s.message()));
  }
  nccl::Result enqueued = nccl::kSuccess;
  if (EnterNccl(rank)) {
    enqueued = enqueue();
    LeaveNccl(rank);
  }
  const absl::Status synced =
      enqueued == nccl::kSuccess ? devices_->Synchronize(ranks_[rank].stream) : absl::OkStatus();
  bool fired, aborted;
  {
    MutexLock l(&mu_);
    state_[rank].pending = false;
    fired = state_[rank].fired;
    aborted = aborted_;
  }
  if (fired || aborted) {
    return absl::DeadlineExceededError(
        absl::StrCat("rank ", rank, " of ", size(), ": NCCL ", what,
                     fired ? absl::StrCat(" did not complete within ", timeout.count(), " ms")
                           : std::string(" was cut short"),
                     "; the group's communicators were aborted at a collective's deadline"));
  }
  if (enqueued != nccl::kSuccess) return Fail(rank, what, api_.GetErrorString(enqueued));
  nccl::Result async = nccl::kSuccess;
  if (EnterNccl(rank)) {
    api_.CommGetAsyncError(comms_[rank], &async);
    LeaveNccl(rank);
  }
  if (async != nccl::kSuccess && async != nccl::kInProgress) {
    return Fail(rank, what, api_.GetErrorString(async));
  }
  if (!synced.ok()) return Fail(rank, what, std::string(synced.message()));
  return absl::OkStatus();
}

absl::Status NcclCommunicator::Barrier(int rank, std::chrono::milliseconds timeout) {
  return Collective(rank, "barrier", timeout, [&] {
    return api_.AllReduce(scratch_[rank], scratch_[rank], 1, nccl::kFloat32, nccl::kSum,
                          comms_[rank], ranks_[rank].stream);
  });
}

absl::Status NcclCommunicator::AllGatherInPlace(int rank, float* buffer,
                                                const std::vector<size_t>& offsets,
                                                const std::vector<size_t>& counts,
                                                std::chrono::milliseconds timeout) {
  if (offsets.size() != ranks_.size() || counts.size() != ranks_.size()) {
    return absl::InternalError(
        absl::StrCat("all-gather of ", offsets.size(), " parts over ", size(), " ranks"));
  }
  // Each rank's part broadcast from it, in one group: uneven parts, copies only.
  return Collective(rank, "all-gather", timeout, [&] {
    nccl::Result enqueued = api_.GroupStart();
    for (int r = 0; r < size() && enqueued == nccl::kSuccess; ++r) {
      enqueued = api_.Broadcast(buffer + offsets[r], buffer + offsets[r], counts[r], nccl::kFloat32,
                                r, comms_[rank], ranks_[rank].stream);
    }
    const nccl::Result ended = api_.GroupEnd();
    return enqueued != nccl::kSuccess ? enqueued : ended;
  });
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
  return Collective(rank, "broadcast", timeout, [&] {
    return api_.Broadcast(buffer, buffer, bytes, nccl::kUint8, root, comms_[rank],
                          ranks_[rank].stream);
  });
}

}  // namespace walsh
