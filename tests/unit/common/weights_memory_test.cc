// --weights-memory (common/weights_memory.h): what `auto` picks and why, what `hugepages`
// refuses naming the flag, and the copy itself (common/mapped_file.h): the file's bytes, on a
// huge-page boundary, read-only.
#include "common/weights_memory.h"

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "common/huge_page_share.h"
#include "common/mapped_file.h"
#include "gtest/gtest.h"
#include "tests/util/test_util.h"

namespace walsh {
namespace {

constexpr int64_t kGB = 1000 * 1000 * 1000;

TEST(WeightsMemory, ParsesItsThreeNames) {
  for (WeightsMemory m : {WeightsMemory::kAuto, WeightsMemory::kHugePages, WeightsMemory::kHugetlb,
                          WeightsMemory::kMmap}) {
    WeightsMemory parsed;
    ASSERT_TRUE(ParseWeightsMemory(WeightsMemoryName(m), &parsed));
    EXPECT_EQ(parsed, m);
  }
  WeightsMemory parsed;
  EXPECT_FALSE(ParseWeightsMemory("huge", &parsed));
  EXPECT_EQ(WeightsMemoryFor(WeightsMemory::kAuto, /*on_gpu=*/true), WeightsMemory::kMmap);
  EXPECT_EQ(WeightsMemoryFor(WeightsMemory::kHugePages, true), WeightsMemory::kHugePages);
  EXPECT_EQ(WeightsMemoryFor(WeightsMemory::kAuto, false), WeightsMemory::kAuto);
  EXPECT_FALSE(WeightsMemoryFitsDevice(WeightsMemory::kHugePages, /*on_gpu=*/true));
  EXPECT_TRUE(WeightsMemoryFitsDevice(WeightsMemory::kAuto, true));
  EXPECT_TRUE(WeightsMemoryFitsDevice(WeightsMemory::kHugePages, false));
  EXPECT_FALSE(WeightsMemoryFitsDevice(WeightsMemory::kHugetlb, true));
}

TEST(WeightsMemory, AutoTakesHugePagesWhereTheyAreOfferedAndTheCopyFits) {
  auto huge = ChooseWeightsMemory(WeightsMemory::kAuto, 7 * kGB, {"madvise", 20 * kGB});
  ASSERT_TRUE(huge.ok());
  EXPECT_EQ(huge->memory, WeightsMemory::kHugePages);
  EXPECT_NE(huge->reason.find("'madvise'"), std::string::npos) << huge->reason;

  auto off = ChooseWeightsMemory(WeightsMemory::kAuto, 7 * kGB, {"never", 20 * kGB});
  ASSERT_TRUE(off.ok());
  EXPECT_EQ(off->memory, WeightsMemory::kMmap);
  EXPECT_NE(off->reason.find("'never'"), std::string::npos) << off->reason;

  // 7 GB plus a quarter of headroom does not fit in 8 GB.
  auto short_of = ChooseWeightsMemory(WeightsMemory::kAuto, 7 * kGB, {"always", 8 * kGB});
  ASSERT_TRUE(short_of.ok());
  EXPECT_EQ(short_of->memory, WeightsMemory::kMmap);
  EXPECT_NE(short_of->reason.find("MemAvailable is 8.00 GB"), std::string::npos)
      << short_of->reason;

  auto mapped = ChooseWeightsMemory(WeightsMemory::kMmap, 7 * kGB, {"always", 20 * kGB});
  ASSERT_TRUE(mapped.ok());
  EXPECT_EQ(mapped->memory, WeightsMemory::kMmap);
}

TEST(WeightsMemory, HugePagesAreRefusedNamingTheFlagAndTheReason) {
  auto off = ChooseWeightsMemory(WeightsMemory::kHugePages, kGB, {"never", 20 * kGB});
  ASSERT_FALSE(off.ok());
  EXPECT_EQ(off.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(off.status().message().find("--weights-memory hugepages: transparent huge pages are "
                                        "'never'"),
            absl::string_view::npos)
      << off.status();
  auto unknown = ChooseWeightsMemory(WeightsMemory::kHugePages, kGB, {"", 20 * kGB});
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("'unavailable'"), absl::string_view::npos);
  auto short_of = ChooseWeightsMemory(WeightsMemory::kHugePages, 7 * kGB, {"always", 8 * kGB});
  ASSERT_FALSE(short_of.ok());
  EXPECT_NE(short_of.status().message().find("needs 8.75 GB"), absl::string_view::npos)
      << short_of.status();
}

TEST(WeightsMemory, HugetlbTakesTheLargestPoolThatHoldsTheCopy) {
  HostMemory host{"never", 20 * kGB};
  const int64_t two_mb = int64_t{2} << 20, one_gb = int64_t{1} << 30;
  host.hugetlb_pools = {{one_gb, 4}, {two_mb, 4000}};
  auto big = ChooseWeightsMemory(WeightsMemory::kHugetlb, 3 * kGB, host);
  ASSERT_TRUE(big.ok()) << big.status();
  EXPECT_EQ(big->memory, WeightsMemory::kHugetlb);
  EXPECT_EQ(big->page_bytes, one_gb);
  // 5 GB needs 5 pages of 1 GiB: the 2 MiB pool (7.8 GiB free) takes it.
  auto small = ChooseWeightsMemory(WeightsMemory::kHugetlb, 5 * kGB, host);
  ASSERT_TRUE(small.ok()) << small.status();
  EXPECT_EQ(small->page_bytes, two_mb);
  EXPECT_NE(small->reason.find("4000 free pages of 2048 kB"), std::string::npos) << small->reason;
  // A cgroup's hugetlb limit caps the pool.
  host.hugetlb_pools = {{two_mb, 4000, /*cgroup_room_bytes=*/kGB}};
  auto capped = ChooseWeightsMemory(WeightsMemory::kHugetlb, 5 * kGB, host);
  ASSERT_FALSE(capped.ok());
  EXPECT_NE(capped.status().message().find("1.00 GB left under the cgroup's hugetlb limit"),
            absl::string_view::npos)
      << capped.status();
  // `auto` never takes a reserved pool.
  host.thp_mode = "madvise";
  host.hugetlb_pools = {{two_mb, 4000}};
  auto automatic = ChooseWeightsMemory(WeightsMemory::kAuto, 5 * kGB, host);
  ASSERT_TRUE(automatic.ok());
  EXPECT_EQ(automatic->memory, WeightsMemory::kHugePages);
}

TEST(WeightsMemory, HugetlbIsRefusedNamingTheFlagAndThePools) {
  HostMemory host{"always", 20 * kGB};
  auto none = ChooseWeightsMemory(WeightsMemory::kHugetlb, kGB, host);
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(none.status().message().find("--weights-memory hugetlb: no hugetlbfs pool has room"),
            absl::string_view::npos)
      << none.status();
  EXPECT_NE(none.status().message().find("vm.nr_hugepages"), absl::string_view::npos);
  host.hugetlb_pools = {{int64_t{2} << 20, 10}};
  auto short_of = ChooseWeightsMemory(WeightsMemory::kHugetlb, kGB, host);
  ASSERT_FALSE(short_of.ok());
  EXPECT_NE(short_of.status().message().find("2048 kB pages: 10 free"), absl::string_view::npos)
      << short_of.status();
}

TEST(WeightsMemory, ReadsThisMachine) {
  const HostMemory host = ReadHostMemory();
  EXPECT_GT(host.available_bytes, 0);  // /proc/meminfo is always there on Linux
}

// The permissions /proc/self/maps gives the mapping that holds `p`.
std::string PermissionsAt(const void* p) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  const uintptr_t at = reinterpret_cast<uintptr_t>(p);
  while (std::getline(maps, line)) {
    unsigned long lo = 0, hi = 0;
    char perms[5] = {};
    if (std::sscanf(line.c_str(), "%lx-%lx %4s", &lo, &hi, perms) == 3 && lo <= at && at < hi) {
      return perms;
    }
  }
  return "";
}

TEST(WeightsMemory, TheCopyHoldsTheFilesBytesReadOnlyOnAHugePageBoundary) {
  testing::TempDir dir;
  const std::string path = dir.File("weights.bin");
  std::vector<char> bytes((size_t{5} << 20) + 12345);  // not a whole number of huge pages
  std::mt19937 gen(3);
  for (char& c : bytes) c = static_cast<char>(gen());
  {
    std::ofstream out(path, std::ios::binary);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  auto copy = MappedFile::CopyToHugePages(path);
  ASSERT_TRUE(copy.ok()) << copy.status();
  ASSERT_EQ((*copy)->size(), bytes.size());
  EXPECT_EQ(std::memcmp((*copy)->data(), bytes.data(), bytes.size()), 0);
  EXPECT_EQ(reinterpret_cast<uintptr_t>((*copy)->data()) % (size_t{2} << 20), 0u);
  EXPECT_EQ(PermissionsAt((*copy)->data()).substr(0, 3), "r--");
  EXPECT_FALSE(MappedFile::CopyToHugePages(path + ".missing").ok());
}

// A file of `bytes` random bytes in `dir`.
std::vector<char> WriteRandomFile(const std::string& path, size_t bytes) {
  std::vector<char> data(bytes);
  std::mt19937 gen(5);
  for (char& c : data) c = static_cast<char>(gen());
  std::ofstream out(path, std::ios::binary);
  out.write(data.data(), static_cast<std::streamsize>(data.size()));
  return data;
}

// The copy in a reserved pool where this machine has one with room (a reserved pool is the
// administrator's: the test does not make one); its refusal, from the real mmap, where not.
TEST(WeightsMemory, TheHugetlbCopyHoldsTheFilesBytesOrIsRefusedByTheKernel) {
  testing::TempDir dir;
  const std::string path = dir.File("weights.bin");
  const std::vector<char> bytes = WriteRandomFile(path, (size_t{3} << 20) + 777);
  const int64_t two_mb = int64_t{2} << 20;
  int64_t free_pages = 0;
  for (const HugetlbPool& pool : ReadHostMemory().hugetlb_pools) {
    if (pool.page_bytes == two_mb) free_pages = pool.free_bytes() / two_mb;
  }
  auto copy = MappedFile::CopyToHugetlb(path, two_mb);
  if (!copy.ok()) {
    // A pool with room maps (its pages are reserved at mmap); without one (and no overcommit
    // pages), the kernel refuses and the error names the flag.
    EXPECT_LT(free_pages, 2) << copy.status();
    EXPECT_EQ(copy.status().code(), absl::StatusCode::kResourceExhausted);
    EXPECT_NE(copy.status().message().find("--weights-memory hugetlb: cannot map"),
              absl::string_view::npos)
        << copy.status();
    GTEST_SKIP() << "no free 2 MiB hugetlb pages here: the refusal was checked, not the copy";
  }
  ASSERT_EQ((*copy)->size(), bytes.size());
  EXPECT_EQ(std::memcmp((*copy)->data(), bytes.data(), bytes.size()), 0);
  EXPECT_EQ(PermissionsAt((*copy)->data()).substr(0, 3), "r--");
  auto share = HugePageShareOf((*copy)->data(), (*copy)->size());
  ASSERT_TRUE(share.ok());
  EXPECT_EQ(share->huge_page_bytes, static_cast<int64_t>(bytes.size()));
}

// VmLck of /proc/self/status, in bytes.
int64_t LockedBytes() {
  std::ifstream status("/proc/self/status");
  std::string key;
  while (status >> key) {
    if (key == "VmLck:") {
      int64_t kb = 0;
      status >> kb;
      return kb * 1024;
    }
    status.ignore(1 << 16, '\n');
  }
  return -1;
}

TEST(WeightsMemory, MlockLocksTheMappingOrNamesTheLimit) {
  testing::TempDir dir;
  const std::string path = dir.File("weights.bin");
  WriteRandomFile(path, size_t{1} << 20);
  auto mapped = MappedFile::Open(path);
  ASSERT_TRUE(mapped.ok());
  const int64_t before = LockedBytes();
  const absl::Status locked = (*mapped)->Lock();
  if (!locked.ok()) {
    // Only a limit below 1 MiB without CAP_IPC_LOCK refuses it; the message names both.
    EXPECT_NE(locked.message().find("--mlock: cannot lock the 1048576 bytes of"),
              absl::string_view::npos)
        << locked;
    EXPECT_NE(locked.message().find("RLIMIT_MEMLOCK"), absl::string_view::npos) << locked;
    return;
  }
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "AddressSanitizer's mlock interceptor locks nothing: VmLck cannot move";
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
  GTEST_SKIP() << "AddressSanitizer's mlock interceptor locks nothing: VmLck cannot move";
#endif
#endif
  EXPECT_GE(LockedBytes() - before, int64_t{1} << 20);
  mapped->reset();
  EXPECT_EQ(LockedBytes(), before);
}

}  // namespace
}  // namespace walsh
