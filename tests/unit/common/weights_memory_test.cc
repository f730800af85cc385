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

#include "common/mapped_file.h"
#include "gtest/gtest.h"
#include "tests/util/test_util.h"

namespace walsh {
namespace {

constexpr int64_t kGB = 1000 * 1000 * 1000;

TEST(WeightsMemory, ParsesItsThreeNames) {
  for (WeightsMemory m : {WeightsMemory::kAuto, WeightsMemory::kHugePages, WeightsMemory::kMmap}) {
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

}  // namespace
}  // namespace walsh
