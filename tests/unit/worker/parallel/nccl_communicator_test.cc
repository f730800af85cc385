// The NCCL communicator's own logic on the CPU, against a fake NCCL and fake devices (no GPU
// here): the all-gather's grouped broadcasts give the in-process communicator's bits; a rank
// that never arrives is caught by the watchdog's deadline, which aborts every communicator
// (no polling); an error NCCL reports ends the call naming it; ranks sharing a device are
// refused below NCCL 2.30 or without NCCL_MULTI_RANK_GPU_ENABLE=1; the library loader names
// where it looked. The real NCCL runs in the GPU check (tests/gpu/run.sh).
#include "worker/parallel/nccl_communicator.h"

#include <stdlib.h>

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "gtest/gtest.h"
#include "worker/parallel/cpu_communicator.h"
#include "worker/parallel/nccl_api.h"

namespace walsh {
namespace {

using std::chrono::milliseconds;

// One fake NCCL group, its ranks the threads of one test. An enqueued broadcast completes when
// every rank has enqueued its own (then the root's bytes are copied to the others); a stream's
// Synchronize waits for everything its rank enqueued, or an abort.
struct FakeGroup {
  std::mutex mu;
  std::condition_variable cv;
  int ranks = 0;
  struct Op {
    int root = -1, posted = 0;
    size_t bytes = 0;
    std::vector<void*> buffers;
    bool done = false;
  };
  std::map<uint64_t, Op> ops;
  std::vector<uint64_t> next;  // per rank: the sequence number of its next op
  bool aborted = false;
  int aborts = 0, initialized = 0, destroyed = 0;
  int version = 23007;
  nccl::Result async_error = nccl::kSuccess;
  std::atomic<bool> in_group{false};
};
FakeGroup* fake = nullptr;

struct FakeComm {
  int rank;
};

nccl::Result FakeVersion(int* v) {
  *v = fake->version;
  return nccl::kSuccess;
}
const char* FakeErrorString(nccl::Result r) {
  return r == nccl::kRemoteError ? "remote process exited or there was a network error"
                                 : "fake error";
}
nccl::Result FakeUniqueId(nccl::UniqueId* id) {
  std::memset(id->internal, 7, sizeof(id->internal));
  return nccl::kSuccess;
}
nccl::Result FakeInitRank(nccl::Comm* comm, int ranks, nccl::UniqueId, int rank) {
  EXPECT_TRUE(fake->in_group) << "ranks of one thread are initialized inside a group";
  fake->ranks = ranks;
  fake->next.assign(ranks, 0);
  *comm = reinterpret_cast<nccl::Comm>(new FakeComm{rank});
  ++fake->initialized;
  return nccl::kSuccess;
}
nccl::Result FakeInitAll(nccl::Comm*, int, const int*) { return nccl::kInvalidUsage; }
nccl::Result FakeDestroy(nccl::Comm comm) {
  delete reinterpret_cast<FakeComm*>(comm);
  ++fake->destroyed;
  return nccl::kSuccess;
}
nccl::Result FakeAbort(nccl::Comm comm) {
  std::lock_guard<std::mutex> l(fake->mu);
  delete reinterpret_cast<FakeComm*>(comm);
  fake->aborted = true;
  ++fake->aborts;
  fake->cv.notify_all();
  return nccl::kSuccess;
}
nccl::Result FakeAsyncError(nccl::Comm, nccl::Result* out) {
  *out = fake->async_error;
  return nccl::kSuccess;
}
nccl::Result FakeBroadcast(const void*, void* recv, size_t count, nccl::DataType type, int root,
                           nccl::Comm comm, void*) {
  const int rank = reinterpret_cast<FakeComm*>(comm)->rank;
  std::lock_guard<std::mutex> l(fake->mu);
  FakeGroup::Op& op = fake->ops[fake->next[rank]++];
  op.buffers.resize(fake->ranks, nullptr);
  op.buffers[rank] = recv;
  op.root = root;
  op.bytes = count * (type == nccl::kFloat32 ? 4 : 1);
  if (++op.posted == fake->ranks) {
    for (int r = 0; r < fake->ranks; ++r) {
      if (r != root && op.bytes > 0) std::memcpy(op.buffers[r], op.buffers[root], op.bytes);
    }
    op.done = true;
    fake->cv.notify_all();
  }
  return nccl::kSuccess;
}
nccl::Result FakeAllReduce(const void* send, void* recv, size_t count, nccl::DataType type,
                           nccl::RedOp, nccl::Comm comm, void* stream) {
  return FakeBroadcast(send, recv, count, type, 0, comm, stream);  // a barrier's stand-in
}
nccl::Result FakeGroupStart() {
  fake->in_group = true;
  return nccl::kSuccess;
}
nccl::Result FakeGroupEnd() {
  fake->in_group = false;
  return nccl::kSuccess;
}

const nccl::Api kFakeApi = {FakeVersion,   FakeErrorString, FakeUniqueId,   FakeInitRank,
                            FakeInitAll,   FakeDestroy,     FakeAbort,      FakeAsyncError,
                            FakeBroadcast, FakeAllReduce,   FakeGroupStart, FakeGroupEnd};

// A stream is its rank's number; synchronizing waits for that rank's ops.
class FakeDevices final : public NcclDevices {
 public:
  absl::Status Select(int) override { return absl::OkStatus(); }
  absl::Status Synchronize(void* stream) override {
    const int rank = static_cast<int>(reinterpret_cast<intptr_t>(stream));
    std::unique_lock<std::mutex> l(fake->mu);
    fake->cv.wait(l, [&] {
      if (fake->aborted) return true;
      for (const auto& [seq, op] : fake->ops) {
        if (seq < fake->next[rank] && op.buffers[rank] != nullptr && !op.done) return false;
      }
      return true;
    });
    return fake->aborted ? absl::AbortedError("the stream's kernels were aborted")
                         : absl::OkStatus();
  }
  absl::StatusOr<void*> Scratch(int, size_t bytes) override {
    scratch_.emplace_back(bytes, 0);
    return scratch_.back().data();
  }

 private:
  std::vector<std::vector<char>> scratch_;
};

class NcclCommunicatorTest : public ::testing::Test {
 protected:
  void SetUp() override { fake = &group_; }
  void TearDown() override { fake = nullptr; }
  absl::StatusOr<std::unique_ptr<NcclCommunicator>> Make(std::vector<int> devices) {
    std::vector<NcclCommunicator::Rank> ranks;
    for (size_t r = 0; r < devices.size(); ++r) {
      ranks.push_back({devices[r], reinterpret_cast<void*>(static_cast<intptr_t>(r))});
    }
    return NcclCommunicator::Create(kFakeApi, std::make_unique<FakeDevices>(), ranks);
  }
  FakeGroup group_;
};

TEST_F(NcclCommunicatorTest, AllGatherGivesTheInProcessBits) {
  constexpr int kRanks = 4;
  auto comm = Make({0, 1, 2, 3});
  ASSERT_TRUE(comm.ok()) << comm.status();
  EXPECT_EQ(group_.initialized, kRanks);
  CpuCommunicator local(kRanks);
  const std::vector<size_t> counts = {2, 0, 5, 1}, offsets = {3, 5, 5, 10};
  auto run = [&](Communicator& c) {
    std::vector<std::future<std::vector<float>>> ranks;
    for (int r = 0; r < kRanks; ++r) {
      ranks.push_back(std::async(std::launch::async, [&, r] {
        std::vector<float> b(12, -1.0f);
        for (size_t i = 0; i < counts[r]; ++i) b[offsets[r] + i] = 100.0f * r + i;
        const absl::Status s = c.AllGatherInPlace(r, b.data(), offsets, counts, milliseconds(5000));
        EXPECT_TRUE(s.ok()) << s;
        EXPECT_TRUE(c.Barrier(r, milliseconds(5000)).ok());
        return b;
      }));
    }
    std::vector<std::vector<float>> out;
    for (auto& f : ranks) out.push_back(f.get());
    return out;
  };
  const auto got = run(**comm), want = run(local);
  for (int r = 0; r < kRanks; ++r) {
    EXPECT_EQ(0, std::memcmp(got[r].data(), want[r].data(), 12 * sizeof(float))) << r;
  }
  EXPECT_FALSE((*comm)->broken());
  EXPECT_EQ((*comm)->AllReduceSum(0, nullptr, 0, milliseconds(10)).code(),
            absl::StatusCode::kUnimplemented);
  comm->reset();
  EXPECT_EQ(group_.destroyed, kRanks);
  EXPECT_EQ(group_.aborts, 0);
}

TEST_F(NcclCommunicatorTest, AHungCollectiveIsAbortedAtItsDeadline) {
  auto comm = Make({0, 1});
  ASSERT_TRUE(comm.ok()) << comm.status();
  std::vector<float> buffer(4, 1.0f);
  const auto start = std::chrono::steady_clock::now();
  // Rank 1 never comes: rank 0's broadcast hangs until the watchdog aborts the group.
  const absl::Status s =
      (*comm)->AllGatherInPlace(0, buffer.data(), {0, 2}, {2, 2}, milliseconds(200));
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_NE(s.message().find("rank 0 of 2: NCCL all-gather did not complete within 200 ms"),
            std::string::npos)
      << s;
  EXPECT_GE(took, milliseconds(200));
  EXPECT_LT(took, std::chrono::seconds(10));
  EXPECT_TRUE((*comm)->broken());
  const absl::Status later = (*comm)->Barrier(1, milliseconds(200));
  EXPECT_NE(later.message().find("broken by an earlier failure"), std::string::npos) << later;
  comm->reset();  // joins the watchdog, which may still be aborting the second communicator
  EXPECT_EQ(group_.aborts, 2);     // every communicator of the group, once
  EXPECT_EQ(group_.destroyed, 0);  // aborted communicators are not destroyed again
}

TEST_F(NcclCommunicatorTest, AnErrorNcclReportsIsNamed) {
  auto comm = Make({0, 1});
  ASSERT_TRUE(comm.ok()) << comm.status();
  group_.async_error = nccl::kRemoteError;
  auto a = std::async(std::launch::async, [&] {
    char byte = 'x';
    return (*comm)->Broadcast(1, 0, &byte, 1, milliseconds(5000));
  });
  char byte = 'y';
  const absl::Status s = (*comm)->Broadcast(0, 0, &byte, 1, milliseconds(5000));
  (void)a.get();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_NE(s.message().find("NCCL broadcast failed: remote process exited"), std::string::npos)
      << s;
  EXPECT_TRUE((*comm)->broken());
}

TEST_F(NcclCommunicatorTest, RanksSharingADeviceNeedNccl230AndItsVariable) {
  unsetenv("NCCL_MULTI_RANK_GPU_ENABLE");
  group_.version = 22907;
  auto old = Make({0, 0});
  ASSERT_FALSE(old.ok());
  EXPECT_NE(old.status().message().find("NCCL 2.30 or later (NCCL_MULTI_RANK_GPU_ENABLE); this "
                                        "is NCCL 2.29.7"),
            std::string::npos)
      << old.status();
  group_.version = 23007;
  auto unset = Make({0, 0});
  EXPECT_NE(unset.status().message().find("NCCL_MULTI_RANK_GPU_ENABLE=1 in the environment (NCCL "
                                          "2.30.7; it is unset)"),
            std::string::npos)
      << unset.status();
  setenv("NCCL_MULTI_RANK_GPU_ENABLE", "1", 1);
  auto shared = Make({0, 0});
  EXPECT_TRUE(shared.ok()) << shared.status();
  unsetenv("NCCL_MULTI_RANK_GPU_ENABLE");
  group_.version = 22907;
  EXPECT_TRUE(Make({0, 1}).ok());  // one rank per device: any NCCL 2
}

TEST(NcclApi, VersionsDecodeBothWays) {
  EXPECT_EQ(nccl::DecodeVersion(23007).ToString(), "2.30.7");
  EXPECT_EQ(nccl::DecodeVersion(2708).ToString(), "2.7.8");
  EXPECT_TRUE(nccl::DecodeVersion(23007).AtLeast(2, 30));
  EXPECT_FALSE(nccl::DecodeVersion(22907).AtLeast(2, 30));
  EXPECT_TRUE(nccl::DecodeVersion(30000).AtLeast(2, 30));
}

TEST(NcclApi, AMissingLibraryIsNamedWithWhereToPointIt) {
  auto api = nccl::LoadApiFrom("/nonexistent/libnccl.so.2");
  ASSERT_FALSE(api.ok());
  EXPECT_NE(api.status().message().find("cannot load /nonexistent/libnccl.so.2"),
            std::string::npos);
  EXPECT_NE(api.status().message().find("WALSH_NCCL_LIBRARY"), std::string::npos);
  // A library that is not NCCL's: the missing symbol named.
  auto libc = nccl::LoadApiFrom("libc.so.6");
  ASSERT_FALSE(libc.ok());
  EXPECT_NE(libc.status().message().find("has no ncclGetVersion"), std::string::npos)
      << libc.status();
}

}  // namespace
}  // namespace walsh
